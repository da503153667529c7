"""A plan in the formats other engines read, with each architecture's own names, and read back by each reader's rule.

- ``dsv41-host-plan``: the dsv41 host-DMA patch's ``{layer_name: [expert ids]}`` (:mod:`offload_lab.fit.hostplan`),
  keyed by the ``layer_name`` vLLM gives this architecture's MoE layers (:mod:`offload_lab.fit.vllm_names`), not
  DeepSeek-V4's ``model.layers.N.ffn.experts`` for every model. Read back with the patch's lookup (exact key, else
  suffix match either way: :func:`offload_lab.fit.plan_formats.patch_lookup`).
- ``vllm-cpu-offload``: upstream vLLM's own flags, ``--cpu-offload-gb G --cpu-offload-params experts``. vLLM's UVA
  offloader (``model_executor/offloader/uva.py``) walks the decoder layers in order (``make_layers`` wraps them with
  no prefix, so a segment cannot name a layer) and moves every parameter whose name has the segment ``experts`` until
  G GiB per GPU are moved: it can express exactly the plans that put the first K MoE layers' experts, whole, on host
  (``plan make --generator layer-order``). Read back by replaying that walk over the layers' expert parameters
  (``w13_weight`` then ``w2_weight``, each layer's bytes on one GPU).
- ``llama-cpp-ot``: llama.cpp's ``--override-tensor`` (``-ot``) ``PATTERN=CPU`` over GGUF tensor names
  (``blk.N.ffn_{gate,up,down}_exps.weight``, names from gguf-py's ``TENSOR_NAMES``); llama.cpp matches each tensor
  name with ``std::regex_search``, which Python's ``re.search`` reproduces for these patterns. A GGUF stores a
  layer's experts in one tensor per projection, so only whole layers move.

Each writer refuses (exit 2, naming the first layer) a plan its format cannot express rather than writing another.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offload_lab.core import inputs, runs
from offload_lab.core.errors import InputError
from offload_lab.fit.plan_file import PlanFile

GiB = 1 << 30
VLLM_PARAM_SEGMENT = "experts"
LLAMA_CPP_BUFFER = "CPU"
ENGINE_FORMATS = ("dsv41-host-plan", "vllm-cpu-offload", "llama-cpp-ot")


@dataclass
class ModelNames:
    """What an engine calls a model's MoE layers, and what each layer's experts weigh on one GPU."""

    architecture: str
    moe_layers: list[int]
    experts_per_layer: int
    layer_names: tuple[str, ...]  # templates with {layer}: vLLM's layer_name (and a prefixed variant)
    names_source: str
    layer_params: dict[int, list[int]] = field(default_factory=dict)  # layer -> [w13 bytes, w2 bytes] on rank 0
    gguf_exps: tuple[str, ...] = ()  # GGUF expert tensor templates, {bid} for the layer

    def gguf_names(self) -> list[str]:
        return [t.format(bid=layer) + ".weight" for layer in self.moe_layers for t in self.gguf_exps]


def gguf_expert_templates() -> tuple[str, ...]:
    """GGUF's per-layer routed-expert tensors, as gguf-py names them (``blk.{bid}.ffn_gate_exps`` ...)."""
    from gguf.constants import MODEL_TENSOR, TENSOR_NAMES

    return tuple(TENSOR_NAMES[getattr(MODEL_TENSOR, w)] for w in ("FFN_GATE_EXP", "FFN_UP_EXP", "FFN_DOWN_EXP"))


def _exps_alternation() -> str:
    """Every GGUF expert projection gguf-py names (gate, up, down, and a fused gate_up where it has one)."""
    from gguf.constants import MODEL_TENSOR, TENSOR_NAMES

    found = {TENSOR_NAMES[getattr(MODEL_TENSOR, w)] for w in ("FFN_GATE_EXP", "FFN_UP_EXP", "FFN_DOWN_EXP",
                                                              "FFN_GATE_UP_EXP") if hasattr(MODEL_TENSOR, w)}
    return "|".join(sorted(t.split("ffn_", 1)[1].removesuffix("_exps") for t in found))


def names_for(ckpt: Any, cls: Any, model: Any, layout: Any = None) -> ModelNames:
    """The engine names of a classified checkpoint (or config) and its MoE layers' expert bytes on rank 0."""
    from offload_lab.fit import vllm_names
    from offload_lab.fit.plan_formats import DSV41_LAYER_NAMES

    config = ckpt.config or {}
    arch = next(iter(config.get("architectures") or []), None) or (layout.model_class if layout else None)
    moe = cls.moe_layers()
    n_exp = max((e for _, e in cls.expert_bytes()), default=-1) + 1
    if cls.architecture == "deepseek_v4" or not arch:
        # DeepSeek-V4's native names: the pack's host plan keys, as read from the dsv41 stack (fit/hostplan.py).
        templates, source = DSV41_LAYER_NAMES, "the dsv41 pack's host plan (DeepSeek-V4 native names)"
        arch = arch or cls.architecture
    else:
        hf_block = None
        if layout is not None:
            block = next(iter(layout._moe_blocks), "")
            hf_block = block.rsplit(".", 1)[-1] if block else None
        names = vllm_names.moe_names(arch, hf_block)
        templates = (names.template, "language_model." + names.template)
        source = f"vLLM {names.source}"
    params: dict[int, list[int]] = {}
    for it in cls.items:
        if it.category != "routed_expert" or it.layer is None:
            continue
        i = model.experts.index.get((it.layer, it.expert if it.expert is not None else 0))
        share = float(model.experts.rank_bytes[i, 0]) / max(1, int(model.experts.bytes[i])) if i is not None else 1.0
        pair = params.setdefault(it.layer, [0, 0])
        pair[1 if "down" in it.name or ".w2" in it.name else 0] += int(round(it.nbytes * share))
    return ModelNames(arch, moe, n_exp, tuple(templates), source, params, gguf_expert_templates())


# ----------------------------------------------------------------------------------------------------------------
# Writers


def _whole_layers(plan: PlanFile, names: ModelNames, fmt: str) -> list[int]:
    host = {int(k): set(v) for k, v in plan.host_experts.items() if v}
    partial = [layer for layer, ids in sorted(host.items()) if len(ids) != names.experts_per_layer]
    if partial:
        layer = partial[0]
        raise InputError(f"{fmt} moves a layer's experts whole, all {names.experts_per_layer} or none; the plan keeps "
                         f"{len(host[layer])} of layer {layer}'s on host ({len(partial)} such layer(s)). Make a plan "
                         "of whole layers (plan make --generator layer-order) or export as dsv41-host-plan")
    return sorted(host)


def write(plan: PlanFile, fmt: str, names: ModelNames, path: Path | str) -> dict[str, Any]:
    """Write ``plan`` for engine format ``fmt``; returns what was written (and what the format could not carry)."""
    from offload_lab.fit import hostplan

    if fmt == "dsv41-host-plan":
        mapping, dropped = hostplan.to_host_plan(plan, key=names.layer_names[0])
        hostplan.write_host_plan(mapping, path)
        return {"layers": len(mapping), "host_experts": sum(len(v) for v in mapping.values()), "dropped": dropped,
                "layer_name": names.layer_names[0], "names_from": names.names_source}
    layers = _whole_layers(plan, names, fmt)
    dropped = [f"host_tensors: {t}" for t in plan.host_tensors]
    if fmt == "vllm-cpu-offload":
        first = names.moe_layers[:len(layers)]
        if layers != first:
            missing = next(layer for layer in first if layer not in layers)
            raise InputError(f"vllm-cpu-offload: vLLM offloads the experts of the first MoE layers in order until "
                             f"--cpu-offload-gb is reached; the plan skips layer {missing} but moves later ones. "
                             "Make a layer-order plan, or export as dsv41-host-plan")
        total = sum(sum(names.layer_params.get(layer, [0, 0])) for layer in layers)
        args = ["--cpu-offload-gb", repr(total / GiB), "--cpu-offload-params", VLLM_PARAM_SEGMENT] if layers else []
        text = shlex.join(args)
    elif fmt == "llama-cpp-ot":
        pattern = rf"blk\.({'|'.join(str(layer) for layer in layers)})\.ffn_({_exps_alternation()})_exps\."
        args = ["--override-tensor", f"{pattern}={LLAMA_CPP_BUFFER}"] if layers else []
        text = shlex.join(args)
    else:
        raise InputError(f"no engine writer for {fmt!r}; formats: {', '.join(ENGINE_FORMATS)}")
    runs.atomic_write_text(Path(path), text + "\n")
    return {"layers": len(layers), "host_experts": len(layers) * names.experts_per_layer, "dropped": dropped,
            "args": args, "names_from": names.names_source}


# ----------------------------------------------------------------------------------------------------------------
# Readers: what the engine would move


def read(path: Path | str, fmt: str, names: ModelNames) -> Any:
    """A :class:`offload_lab.fit.plan_formats.PatchView` of ``path`` as the engine reading ``fmt`` would take it."""
    from offload_lab.fit.plan_file import PLAN_MAX_BYTES, parse_plan_json
    from offload_lab.fit.plan_formats import PatchView, read_dsv41

    p = Path(path)
    text = inputs.decode_utf8(inputs.read_bytes(p, "plan file", PLAN_MAX_BYTES), p, "plan file")
    if fmt == "dsv41-host-plan":
        view = read_dsv41(parse_plan_json(text, f"plan file {p}"), str(p), names.moe_layers,
                          names.experts_per_layer, layer_names=names.layer_names)
        return view
    view = PatchView(path=str(p), format=fmt, moe_layers=list(names.moe_layers))
    try:
        args = shlex.split(text)
    except ValueError as e:
        view.problems.append(f"not a command-line argument list ({e})")
        return view
    if fmt == "vllm-cpu-offload":
        layers = _replay_uva(args, names, view)
    elif fmt == "llama-cpp-ot":
        layers = _replay_ot(args, names, view)
    else:
        raise InputError(f"no engine reader for {fmt!r}; formats: {', '.join(ENGINE_FORMATS)}")
    for layer in layers:
        view.host_experts[layer] = list(range(names.experts_per_layer))
        view.layers_found.append(layer)
    return view


def _replay_uva(args: list[str], names: ModelNames, view: Any) -> list[int]:
    gb, segments = 0.0, set()
    i = 0
    while i < len(args):
        if args[i] == "--cpu-offload-gb" and i + 1 < len(args):
            try:
                gb = float(args[i + 1])
            except ValueError:
                view.problems.append(f"--cpu-offload-gb {args[i + 1]!r} is not a number")
            i += 2
        elif args[i] == "--cpu-offload-params":
            i += 1
            while i < len(args) and not args[i].startswith("--"):
                segments.add(args[i])
                i += 1
        else:
            view.problems.append(f"argument {args[i]!r} is not one of vLLM's offload flags here")
            i += 1
    if gb and not segments:
        view.problems.append("--cpu-offload-gb without --cpu-offload-params moves any parameter (attention, "
                             "norms...) layer by layer, not the plan's experts")
        return []
    budget, moved, out = int(gb * GiB), 0, []
    for layer in names.moe_layers:
        # vLLM's rule (uva.py): a parameter moves when its dotted name holds a segment and the budget is not spent.
        parts = [("experts.w13_weight", names.layer_params.get(layer, [0, 0])[0]),
                 ("experts.w2_weight", names.layer_params.get(layer, [0, 0])[1])]
        took = 0
        for pname, nbytes in parts:
            if moved >= budget:
                break
            if any(f".{s}." in f".mlp.{pname}." for s in segments):
                moved += nbytes
                took += 1
        if took == len(parts):
            out.append(layer)
        elif took:
            view.problems.append(f"layer {layer}: vLLM would move only part of its experts' parameters")
    return out


def _replay_ot(args: list[str], names: ModelNames, view: Any) -> list[int]:
    patterns = []
    for i, a in enumerate(args):
        if a in ("-ot", "--override-tensor") and i + 1 < len(args):
            pat, _, buf = args[i + 1].rpartition("=")
            if buf != LLAMA_CPP_BUFFER:
                view.problems.append(f"-ot {args[i + 1]!r}: buffer {buf!r}, not {LLAMA_CPP_BUFFER}")
            try:
                patterns.append(re.compile(pat))
            except re.error as e:
                view.problems.append(f"-ot {args[i + 1]!r}: not a regular expression ({e})")
    per_layer: dict[int, int] = {}
    tensors = names.gguf_names()
    for name in tensors:
        if any(p.search(name) for p in patterns):  # llama.cpp: std::regex_search over each tensor's name
            layer = int(name.split(".")[1])
            per_layer[layer] = per_layer.get(layer, 0) + 1
    if patterns and not per_layer:
        view.problems.append(f"no pattern matches a GGUF expert tensor of this model (e.g. {tensors[0]})")
    whole = len(names.gguf_exps)
    for layer, n in per_layer.items():
        if n != whole:
            view.problems.append(f"layer {layer}: {n} of its {whole} expert tensors match; a layer moves whole")
    return sorted(layer for layer, n in per_layer.items() if n == whole)

