"""A checkpoint's own tensor names onto ``transformers``' model of its config (:mod:`offload_lab.fit.hfmodel`): the
renamings and converters ``from_pretrained`` applies, quantization components taken for their weight, per-expert
indices kept; parameters counted from a checkpoint; a header-only checkpoint written from a config."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterator

from offload_lab.core.errors import InputError
from offload_lab.fit.classify import Classification, Classified, DEFAULT_ENGRAM_PATTERN
from offload_lab.fit.headers import Checkpoint
from offload_lab.fit.hfmodel import (LAYER_INDEX, NUM_EXPERTS_KEYS, TOP_K_KEYS, ModelLayout, dtype_name, hf_config,
                                     layout, meta_model, read_model, text_config)


def _conversions(model: Any) -> tuple[list[Any], list[Any]]:
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    transforms = get_model_conversion_mapping(model)
    return ([t for t in transforms if isinstance(t, WeightRenaming)],
            [t for t in transforms if isinstance(t, WeightConverter)])


_EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.")
_QUANT_SUFFIX = re.compile(r"\.(weight_scale_inv|weight_scale|scales|qweight|qzeros|g_idx|trellis|suh|svh|mcg|mul1|"
                           r"blocks|zeros|bias_scale|input_scale|weight_packed|weight_shape)$")


def classify_checkpoint(ckpt: Checkpoint, lay: ModelLayout, model: Any | None = None) -> Classification:
    """Classify a checkpoint's tensors by the module of ``transformers``' model each one loads into: the key is
    renamed as ``from_pretrained`` renames it (the model's checkpoint conversion mapping), a quantization
    component (``weight_scale_inv``, EXL3's ``trellis``...) is taken for its weight, and the expert index of a
    per-expert name (``experts.E.``) is kept. Layers at or past num_hidden_layers are the MTP module; a name that
    reaches no parameter is "other"."""
    from transformers.core_model_loading import rename_source_key

    model = model or meta_model(lay.config)
    renamings, converters = _conversions(model)
    by_name = {t.name: t for t in lay.tensors}
    n_layers = getattr(text_config(lay.config), "num_hidden_layers", None)
    prefix = getattr(model, "base_model_prefix", None)
    meta_sd = {k: None for k in by_name}
    items = []
    for name, t in ckpt.tensors.items():
        quant = "exl3" if name.rsplit(".", 1)[-1] in ("trellis", "suh", "svh", "mcg", "mul1") else (
            "fp8-block" if name.endswith(".weight_scale_inv") else None)
        key = _QUANT_SUFFIX.sub(".weight", name)
        target, _ = rename_source_key(key, renamings, converters, prefix, meta_sd)
        mt = by_name.get(target) or by_name.get(_QUANT_SUFFIX.sub(".weight", target))
        layer_m = LAYER_INDEX.search(name)
        layer = int(layer_m.group(1)) if layer_m else None
        if layer is not None and isinstance(n_layers, int) and layer >= n_layers:
            items.append(Classified(name, "mtp", t.nbytes, layer, None, None, quant, "layer >= num_hidden_layers"))
            continue
        if mt is None:
            items.append(Classified(name, "other", t.nbytes, layer, None, None, quant, None))
            continue
        expert = stacked = None
        if mt.category == "routed_expert":
            em = _EXPERT_INDEX.search(name)
            if em:
                expert = int(em.group(1))
            elif t.shape and t.shape[0] == lay.num_experts:
                stacked = lay.num_experts
        items.append(Classified(name, mt.category, t.nbytes, layer, expert, stacked, quant, f"module {mt.module}"))
    return Classification(architecture=lay.model_type, engram_pattern=DEFAULT_ENGRAM_PATTERN, items=items,
                          num_hidden_layers=n_layers if isinstance(n_layers, int) else None)


def iter_moe_layers(lay: ModelLayout) -> Iterator[tuple[int, str]]:
    """(layer index, module path of the MoE block's experts) for every MoE layer of the model."""
    for block, experts in sorted(lay._moe_blocks.items()):
        m = LAYER_INDEX.search(experts + ".")
        if m:
            yield int(m.group(1)), experts


def params_from_checkpoint(ckpt: Checkpoint, cls: Classification) -> dict[str, Any]:
    """Total and active parameters counted from a checkpoint's unquantized tensors (elements of each tensor; the
    experts per token from config.json). A quantized checkpoint stores packed words and scales, not parameters:
    it is not counted (audit its config.json for the model's count)."""
    packed = [t.name for t in ckpt.tensors.values() if t.dtype not in ("BF16", "F16", "F32", "F64")
              and cls_category(cls, t.name) != "other"]
    if packed:
        return {"total": None, "active": None,
                "note": f"not counted from this checkpoint: {len(packed):,} tensors are stored quantized (e.g. "
                        f"{packed[0]}); give its config.json for the model's parameters"}
    cats = {it.name: it.category for it in cls.items}
    total = sum(t.numel for t in ckpt.tensors.values() if cats.get(t.name) != "mtp")
    routed = sum(t.numel for t in ckpt.tensors.values() if cats.get(t.name) == "routed_expert")
    embed = sum(t.numel for t in ckpt.tensors.values() if cats.get(t.name) == "embedding")
    from offload_lab.fit.classify import config_int

    n_exp = config_int(ckpt.config, *NUM_EXPERTS_KEYS) or max((e for _, e in cls.expert_bytes()), default=-1) + 1
    k = config_int(ckpt.config, *TOP_K_KEYS)
    if not k or not n_exp:
        return {"total": total, "active": None, "note": "config.json lacks num_experts_per_tok: active not counted"}
    active = total - routed + routed * k // n_exp
    return {"total": total, "active": active, "active_without_input_embedding": active - embed,
            "routed_experts": routed, "input_embedding": embed, "experts_per_layer": n_exp, "experts_per_token": k,
            "active_counts_input_embedding": True, "source": "the checkpoint's tensors (MTP layers left out)"}


def cls_category(cls: Classification, name: str) -> str | None:
    if not hasattr(cls, "_cat_index"):
        cls._cat_index = {it.name: it.category for it in cls.items}  # type: ignore[attr-defined]
    return cls._cat_index.get(name)  # type: ignore[attr-defined]


SYNTH_SHARD_BYTES = 5 * 2**30  # shard size of a synthetic checkpoint written from a config (as the Hub's ~5 GB)


def write_synthetic(source: str, out_dir: Path | str, shards: int | None = None) -> dict[str, Any]:
    """A header-only checkpoint of the model a config.json names: transformers' own tensor names and shapes (fused
    experts as transformers 5 stores them) at the config's dtype, in sparse shards, with the config marked
    synthetic (see :mod:`offload_lab.fit.synthetic`)."""
    from offload_lab.fit.synthetic import TensorSpec, write_tensors

    ckpt, _, lay = read_model(source)
    dtype = dtype_name(lay.config)
    specs = [TensorSpec(t.name, dtype, t.shape) for t in ckpt.tensors.values()]
    n = shards or max(1, math.ceil(ckpt.total_bytes / SYNTH_SHARD_BYTES))
    config = {**(ckpt.config or {}), "offload_lab_synthetic": {
        "spec": str(source), "note": "header-only synthetic checkpoint from this config; no weights"}}
    info = write_tensors(specs, config, out_dir, n, f"config:{Path(str(source)).name}")
    info["parameters"] = lay.params()["total"]
    return info


def classify_by_transformers(ckpt: Checkpoint) -> tuple[Classification, ModelLayout] | None:
    """A checkpoint whose config.json names an architecture the typed rule sets (fit/classify.py) do not know,
    classified by transformers' model of it (:func:`classify_checkpoint`); None when transformers does not know it
    either, or it is not a mixture of experts."""
    from offload_lab.fit.classify import ARCH_ALIASES

    config = ckpt.config or {}
    keys = [config.get("model_type"), *(config.get("architectures") or [])]
    if not config.get("model_type") or any(isinstance(k, str) and k.lower() in ARCH_ALIASES for k in keys):
        return None
    try:
        lay = layout(hf_config(config, f"config.json of {ckpt.source}"))
    except InputError:
        return None
    return classify_checkpoint(ckpt, lay), lay
