"""A model is its config: the tensors of any mixture-of-experts model that ``transformers`` implements, from its
``config.json`` alone, with each tensor's category read off ``transformers``' own modeling code.

The model is built on the meta device (``torch.device("meta")``: shapes only, nothing allocated; DeepSeek-V3's 671B
parameters in about a second) and its ``named_parameters`` are classified by the *module* that holds them, not by
typed per-model name patterns:

==============  ================================================================================================
category        what holds the tensor
==============  ================================================================================================
routed_expert   the module named ``experts`` of a MoE block: a fused one (transformers 5 keeps every expert of a
                layer in one 3D tensor, expert on dim 0; its bytes are split evenly over the experts) or a
                ``ModuleList`` of per-expert MLPs (expert = list index)
router          a sibling of ``experts`` whose class is a router/gate, or whose weight has one row per expert
shared_expert   any other sibling of ``experts`` (Qwen2-MoE's ``shared_expert`` and its gate, DeepSeek's
                ``shared_experts``, Llama 4's ``shared_expert``, Granite's ``shared_mlp``)
attention       a token mixer of a decoder layer: attention (MHA, GQA, MLA, sliding window, sinks) and the state-
                space / linear-attention mixers of hybrid models (Mamba, gated DeltaNet, short convolutions)
embedding       ``get_input_embeddings()`` (and any other ``nn.Embedding``)
lm_head         ``get_output_embeddings()`` (absent when tied: ``named_parameters`` lists a tied weight once)
norm            a normalisation layer outside a token mixer
dense_mlp       any other module inside a decoder layer (the dense MLP of the layers without experts)
other           anything else, reported with its bytes, never dropped
==============  ================================================================================================

A checkpoint's own names (per-expert ``experts.E.w1``, Mixtral's ``block_sparse_moe``) are mapped onto the model's
with ``transformers``' own checkpoint conversion mapping (the renamings and converters ``from_pretrained`` applies),
see :func:`offload_lab.fit.hfcheckpoint.classify_checkpoint`.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from offload_lab.core.errors import InputError
from offload_lab.fit.classify import Classification, Classified, DEFAULT_ENGRAM_PATTERN
from offload_lab.fit.headers import CONFIG_NAME, INDEX_NAME, Checkpoint, Shard, Tensor

# config.json keys for the routed experts per MoE layer and the experts each token uses, as transformers' config
# classes spell them (attribute_map aliases included).
NUM_EXPERTS_KEYS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "moe_k", "moe_topk", "top_k")
_DTYPE_SAFETENSORS = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "half": "F16", "float": "F32"}
LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_ROUTER_CLASS = re.compile(r"Router|TopK|Topk|Gate$|MoEGate|Gating", re.I)
_MIXER_CLASS = re.compile(r"Attention|Attn|MLA$|Mamba|Mixer|DeltaNet|ShortConv|SSM|Lightning")
# Containers whose class name may carry a mixer's word (Jamba's JambaAttentionDecoderLayer) without being one.
_STRUCTURAL_CLASS = re.compile(r"(DecoderLayer|Model|ForCausalLM|ModuleList)$")
_EXPERTS_CLASS = re.compile(r"(?<!Shared)Experts$")
_NORM_CLASS = re.compile(r"Norm", re.I)
KIND = "config"


def _torch() -> Any:
    try:
        import torch
        import transformers
    except ImportError as e:  # pragma: no cover - both are dependencies of the package
        raise InputError(f"reading a model from its config.json needs torch and transformers ({e}); "
                         "install offload-lab with its dependencies") from e
    transformers.logging.set_verbosity_error()
    return torch


# ----------------------------------------------------------------------------------------------------------------
# The config


def text_config(config: Any) -> Any:
    """The language model's config (multimodal configs nest it)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def hf_config(raw: Mapping[str, Any], where: str = "config.json") -> Any:
    """A ``transformers`` config object from a config.json mapping (its ``model_type`` picks the class)."""
    _torch()
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    mt = raw.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise InputError(f"{where}: no model_type; a Hugging Face config.json names its architecture in model_type")
    if mt not in CONFIG_MAPPING:
        raise InputError(f"{where}: model_type {mt!r} is not one the installed transformers implements; "
                         f"upgrade transformers, or audit the checkpoint's safetensors headers instead")
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "transformers_version", "auto_map")}
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return AutoConfig.for_model(mt, **fields)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds on a bad field; name the input
        raise InputError(f"{where}: transformers' {mt} config refuses it: {' '.join(str(e).split())[:300]}") from e


def config_value(config: Any, keys: tuple[str, ...]) -> int | None:
    tc = text_config(config)
    for k in keys:
        v = getattr(tc, k, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def is_moe(config: Any) -> bool:
    return bool(config_value(config, NUM_EXPERTS_KEYS))


def moe_model_types() -> list[str]:
    """Every model_type of the installed transformers whose default config is a mixture of experts with a causal-LM
    head (what ``audit CONFIG.json`` covers)."""
    _torch()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    out = []
    for mt in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                cfg = CONFIG_MAPPING[mt]()
        except Exception:  # noqa: BLE001 - a config class without usable defaults (composite audio models)
            continue
        if is_moe(cfg):
            out.append(mt)
    return out


# ----------------------------------------------------------------------------------------------------------------
# The meta model


def meta_model(config: Any) -> Any:
    """The causal-LM model of ``config`` on the meta device: shapes, no memory."""
    torch = _torch()
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"), contextlib.redirect_stderr(io.StringIO()):
            return AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001
        raise InputError(f"transformers cannot build a {config.model_type} model from this config: "
                         f"{' '.join(str(e).split())[:300]}") from e


@dataclass(frozen=True)
class ModelTensor:
    name: str
    shape: tuple[int, ...]
    category: str
    layer: int | None
    expert: int | None = None  # one expert's tensor (a ModuleList of experts)
    stacked_experts: int | None = None  # a fused tensor holding every expert of the layer along dim 0
    module: str = ""  # the holding module's class, for the record
    mixer: str = ""  # the class of the token mixer (attention, Mamba...) that holds it, if any

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class ModelLayout:
    """The tensors of a model as ``transformers`` builds it, with their categories."""

    model_type: str
    model_class: str
    config: Any
    tensors: list[ModelTensor]
    num_experts: int
    top_k: int
    seconds: float = 0.0
    _moe_blocks: dict[str, str] = field(default_factory=dict)  # MoE block module path -> its experts module path

    def params(self) -> dict[str, Any]:
        """Total and active parameters. Active: what one token uses, routed experts counted k of E; the input
        embedding is a lookup (one row per token), so it is given both counted in full and left out."""
        total = sum(t.numel for t in self.tensors)
        routed = sum(t.numel for t in self.tensors if t.category == "routed_expert")
        embed = sum(t.numel for t in self.tensors if t.category == "embedding")
        active = total - routed + routed * self.top_k // self.num_experts
        return {"total": total, "active": active, "active_without_input_embedding": active - embed,
                "routed_experts": routed, "input_embedding": embed, "experts_per_layer": self.num_experts,
                "experts_per_token": self.top_k,
                "active_counts_input_embedding": True}


def layout(config: Any) -> ModelLayout:
    """Build the meta model of ``config`` and classify its parameters (see the module docstring)."""
    if not is_moe(config):
        raise InputError(f"model_type {config.model_type!r}: its config has no routed experts ("
                         f"{', '.join(NUM_EXPERTS_KEYS)}); offload-lab plans mixture-of-experts models")
    t0 = time.monotonic()
    model = meta_model(config)
    n_exp = config_value(config, NUM_EXPERTS_KEYS) or 0
    top_k = config_value(config, TOP_K_KEYS) or 0
    tensors, blocks = _classify_model(model, n_exp)
    if not any(t.category == "routed_expert" for t in tensors):
        raise InputError(f"model_type {config.model_type!r}: transformers' model has no module named 'experts'; "
                         "offload-lab cannot tell its routed experts")
    return ModelLayout(config.model_type, type(model).__name__, config, tensors, n_exp, top_k,
                       time.monotonic() - t0, blocks)


def _classify_model(model: Any, n_exp: int) -> tuple[list[ModelTensor], dict[str, str]]:
    import torch.nn as nn

    modules = dict(model.named_modules())
    inp = model.get_input_embeddings()
    out_emb = model.get_output_embeddings()
    special = {id(inp): "embedding"}
    if out_emb is not None:
        special[id(out_emb)] = "lm_head"
    # Routed experts: modules named "experts" or of an *Experts class (JetMoE's ParallelExperts), outside a token
    # mixer (JetMoE's attention is itself a mixture of heads: attention). MoE blocks: their parents.
    blocks: dict[str, str] = {}
    for name, mod in modules.items():
        parent, _, last = name.rpartition(".")
        if not parent or not (last == "experts" or _EXPERTS_CLASS.search(type(mod).__name__)):
            continue
        if any(_is_mixer(modules[a]) for a in _ancestors(parent)):
            continue
        if parent not in blocks and not any(parent.startswith(b + ".") for b in blocks):
            blocks[parent] = name
    experts_paths = {n for n, mod in modules.items() if n.rpartition(".")[0] in blocks
                     and (n.endswith(".experts") or _EXPERTS_CLASS.search(type(mod).__name__))}
    tensors = []
    for pname, p in model.named_parameters():
        mod_path, _, _ = pname.rpartition(".")
        chain = _ancestors(mod_path)
        holder = modules.get(mod_path)
        layer_m = LAYER_INDEX.search(pname)
        layer = int(layer_m.group(1)) if layer_m else None
        shape = tuple(int(d) for d in p.shape)
        cat, expert, stacked = _category(pname, mod_path, chain, modules, blocks, experts_paths, special, shape,
                                         n_exp, nn, holder)
        mixer = next((type(modules[a]).__name__ for a in chain if a in modules and _is_mixer(modules[a])), "")
        tensors.append(ModelTensor(pname, shape, cat, layer, expert, stacked, type(holder).__name__, mixer))
    return tensors, blocks


def _is_mixer(mod: Any) -> bool:
    name = type(mod).__name__
    return bool(_MIXER_CLASS.search(name)) and not _STRUCTURAL_CLASS.search(name) and not _NORM_CLASS.search(name)


def _ancestors(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]  # nearest first


def _category(pname: str, mod_path: str, chain: list[str], modules: dict[str, Any], blocks: dict[str, str],
              experts_paths: set[str], special: dict[int, str], shape: tuple[int, ...], n_exp: int, nn: Any,
              holder: Any) -> tuple[str, int | None, int | None]:
    for i, path in enumerate(chain):
        if path in experts_paths:  # inside an experts module
            below = chain[i - 1] if i > 0 else None
            if below is not None and below.startswith(path + ".") and below[len(path) + 1:].split(".")[0].isdigit():
                return "routed_expert", int(below[len(path) + 1:].split(".")[0]), None
            # A fused tensor: every expert of the layer along dim 0 (LongCat-Flash's counts its zero-computation
            # experts too, so dim 0 is taken as it is, not checked against the config).
            return "routed_expert", None, (shape[0] if len(shape) >= 2 else None)
        if path in blocks:  # a direct child of a MoE block, or the block itself
            child = chain[i - 1] if i > 0 else mod_path
            mod = modules.get(child)
            if child == path:  # a parameter on the block itself (a score-correction bias, an output bias)
                return ("router" if shape and shape[-1] == n_exp else "dense_mlp"), None, None
            if _ROUTER_CLASS.search(type(mod).__name__) or child.rsplit(".", 1)[-1] in ("gate", "router"):
                return "router", None, None
            return "shared_expert", None, None
    for path in chain:
        mod = modules.get(path)
        if id(mod) in special:
            return special[id(mod)], None, None
    in_layer = LAYER_INDEX.search(pname + ".") is not None
    for path in chain:
        mod = modules.get(path)
        if in_layer and _is_mixer(mod):
            return "attention", None, None
    if _NORM_CLASS.search(type(holder).__name__):
        return "norm", None, None
    if isinstance(holder, nn.Embedding):
        return "embedding", None, None
    if in_layer:
        return "dense_mlp", None, None
    return "other", None, None


# ----------------------------------------------------------------------------------------------------------------
# As a checkpoint the audit reads


def dtype_name(config: Any) -> str:
    tc = text_config(config)
    raw = getattr(tc, "dtype", None) or getattr(tc, "torch_dtype", None) or getattr(config, "dtype", None)
    name = str(raw or "bfloat16").removeprefix("torch.")
    return _DTYPE_SAFETENSORS.get(name, "BF16")


def as_checkpoint(lay: ModelLayout, raw: Mapping[str, Any], source: str, *, revision: str | None = None,
                  commit: str | None = None, fetched: int = 0, requests: int = 0,
                  formats: Mapping[str, Any] | None = None) -> tuple[Checkpoint, Classification]:
    """The layout as the audit's records: one tensor per parameter at the config's dtype (the weights the model
    stores unquantized), or in ``formats`` (category -> :class:`offload_lab.fit.formats.Format`), and their
    classification."""
    from offload_lab.fit.headers import DTYPE_BITS

    dtype = dtype_name(lay.config)
    bits = DTYPE_BITS[dtype]
    sized: dict[str, int] = {}
    if formats:
        from offload_lab.fit import formats as fm

        tc = text_config(lay.config)
        sized = fm.apply(lay.tensors, {t.name: t.shape for t in lay.tensors}, bits // 8, dict(formats),
                         getattr(tc, "num_hidden_layers", None), lay.num_experts,
                         bool(getattr(tc, "tie_word_embeddings", False)))
    records, items, offset = [], [], 0
    for t in lay.tensors:
        nbytes = sized.get(t.name) or math.ceil(t.numel * bits / 8)
        fmt = (formats or {}).get(t.category)
        label = fmt.name if fmt is not None and len(t.shape) >= 2 and t.category != "router" else dtype
        records.append(Tensor(name=t.name, dtype=label, shape=t.shape, nbytes=nbytes, file=CONFIG_NAME, offset=offset))
        offset += nbytes
        items.append(Classified(t.name, t.category, nbytes, t.layer, t.expert, t.stacked_experts, None,
                                f"module {t.module}"))
    shard = Shard(file=CONFIG_NAME, header_bytes=0, file_bytes=None, metadata={"from": "transformers meta model"},
                  tensors=tuple(records), fetched_bytes=fetched, requests=requests)
    ckpt = Checkpoint(source=source, kind=KIND, shards=[shard], config=dict(raw), revision=revision, commit=commit)
    ckpt.seconds = lay.seconds
    n_layers = getattr(text_config(lay.config), "num_hidden_layers", None)
    cls = Classification(architecture=lay.model_type, engram_pattern=DEFAULT_ENGRAM_PATTERN, items=items,
                         num_hidden_layers=n_layers if isinstance(n_layers, int) else None)
    return ckpt, cls


# ----------------------------------------------------------------------------------------------------------------
# Sources


def config_source(source: str, force: bool = False) -> bool:
    """Whether ``source`` names a model by its config: a .json file (not a safetensors index), a directory with
    config.json and no safetensors, a URL of a config.json; anything with ``force`` (``--from-config``)."""
    s = str(source)
    if force:
        return True
    if s.startswith(("http://", "https://")):
        return s.rstrip("/").rsplit("/", 1)[-1] == CONFIG_NAME
    if s.startswith("hf://"):
        return False
    p = Path(s)
    if p.is_file():
        return p.suffix == ".json" and p.name != INDEX_NAME
    if p.is_dir():
        return (p / CONFIG_NAME).is_file() and not (p / INDEX_NAME).is_file() and not any(p.glob("*.safetensors"))
    return False


def read_config_json(source: str, opts: Any = None, hf_endpoint: str | None = None) -> tuple[dict[str, Any], dict]:
    """config.json from a file, a directory, an http(s) URL or hf://owner/name@revision (one small GET, through
    :mod:`offload_lab.fit.remote`'s client: retries, token only to the Hugging Face host)."""
    from offload_lab.core import inputs

    s = str(source)
    if s.startswith(("http://", "https://", "hf://")):
        import dataclasses
        from urllib.parse import urlsplit

        from offload_lab.fit import remote

        o = dataclasses.replace(opts) if opts else remote.RemoteOptions()
        meta: dict[str, Any] = {}
        if s.startswith("hf://"):
            hf = remote.parse_hf_source(s)
            url = remote.hf_file_url(hf, CONFIG_NAME, hf_endpoint)
            o.token_host = urlsplit(url).hostname
            meta["revision"] = hf.revision
        else:
            url = s if s.rstrip("/").endswith(".json") else s.rstrip("/") + "/" + CONFIG_NAME
        client = remote._Remote(o)  # the reader's own client: retries, token scoping, error messages
        try:
            got = client.get_json(url)
        finally:
            client.close()
        raw, headers = got  # type: ignore[misc]
        meta["commit"] = headers.get("x-repo-commit")
        meta["requests"] = 1
        if not isinstance(raw, dict):
            raise InputError(f"{url}: config.json is not a JSON object")
        return raw, meta
    p = Path(s)
    if p.is_dir():
        p = p / CONFIG_NAME
    return inputs.read_json(p, "config.json", expect=dict), {}


def read_model(source: str, opts: Any = None, hf_endpoint: str | None = None,
               formats: Mapping[str, Any] | None = None) -> tuple[Checkpoint, Classification, ModelLayout]:
    """A model named by its config.json, as the audit's checkpoint and classification, with its layout (tensor bytes
    in ``formats`` per category, else at the config's dtype)."""
    raw, meta = read_config_json(source, opts, hf_endpoint)
    t0 = time.monotonic()
    lay = layout(hf_config(raw, f"config.json of {source}"))
    lay.seconds = time.monotonic() - t0
    ckpt, cls = as_checkpoint(lay, raw, str(source), revision=meta.get("revision"), commit=meta.get("commit"),
                              requests=meta.get("requests", 0), formats=formats)
    return ckpt, cls, lay
