"""The ``host-plan.json`` of the public dsv41 stack (vllm-exl3 with its host-DMA patch), read and written.

Format, as read from a republished copy of ``0xSero/dsv41-flash-offload`` (``HamidYaraliOfficial/dsv41-flash-offload``
@cb98d7bd, whose README preserves 0xSero's verbatim; the original repository could not be read):
``pack/prepare_pack.py`` writes ``json.dumps(plan)`` of ``{"model.layers.<N>.ffn.experts": [expert ids], ...}`` and the
patch (``patches/vllm-exl3-host-dma.patch``, ``_host_plan_for``) reads the file named by ``EXL3_HOST_EXPERTS``. It looks
a layer up by its vLLM ``layer_name``, exactly or by suffix either way, takes ``sorted(set(int(e)))``, and treats a
missing or empty list as no host experts. Only the EXL3 trellis moves to host (suh/svh/mcg/mul1 stay on the GPU) into
exact-size buffers (``cudaHostRegister``), the same plan on every TP rank.

The format has no place for whole tensors (that stack keeps Engram on NVMe, ``DSV41_ENGRAM_DISK``, and the embedding on
the GPU) or for metadata: exporting drops them and says what was dropped. Importing is stricter than the patch: expert
ids must be JSON integers listed once, as in offload-lab's own plans (docs/plan-files.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from offload_lab.core import inputs, runs
from offload_lab.core.errors import InputError
from offload_lab.fit.plan_file import (FORMAT, PLAN_MAX_BYTES, VERSION, CheckpointRef, GeneratorRef, PlanFile,
                                       host_expert_problems, parse_plan_json)

FORMAT_NAME = "dsv41-host-plan"
KEY = "model.layers.{layer}.ffn.experts"
_LAYER = re.compile(r"(?:^|\.)layers\.(0|[1-9][0-9]{0,4})\.ffn\.experts$")
_METADATA = ("checkpoint", "generator", "statistics", "predicted")


def to_host_plan(plan: PlanFile, key: str = KEY) -> tuple[dict[str, list[int]], list[str]]:
    """An offload-lab plan as a host-plan mapping, and what the format cannot carry (reported, never written: any
    extra key would be read as a layer name)."""
    out = {key.format(layer=int(layer)): sorted(experts)
           for layer, experts in sorted(plan.host_experts.items(), key=lambda kv: int(kv[0])) if experts}
    dropped = [f"host_tensors: {t}" for t in plan.host_tensors]
    dropped += [f"{k} (metadata)" for k in _METADATA if getattr(plan, k) not in (None, CheckpointRef())]
    return out, dropped


def from_host_plan(mapping: Any, where: str = "host plan", *, model: str = "", source: str | None = None,
                   moe_layers: list[int] | None = None, experts_per_layer: int | None = None) -> PlanFile:
    """A host-plan mapping as an offload-lab plan. Keys must name ``...layers.<N>.ffn.experts``; given the
    checkpoint's MoE layers and experts per layer, layers and ids outside them are refused too."""
    if not isinstance(mapping, dict):
        raise InputError(f"{where}: a host plan is a JSON object of layer name -> expert ids, not "
                         f"{type(mapping).__name__}")
    host: dict[str, Any] = {}
    problems: list[str] = []
    for name, experts in mapping.items():
        m = _LAYER.search(name)
        if not m:
            problems.append(f"key {name[:80]!r} does not name a MoE layer ('...layers.<N>.ffn.experts')")
            continue
        layer = m.group(1)
        if layer in host:
            problems.append(f"layer {layer} appears twice (again as {name!r})")
            continue
        if moe_layers is not None and int(layer) not in moe_layers:
            problems.append(f"{name}: layer {layer} is not a MoE layer of the checkpoint")
        host[layer] = experts
    problems += host_expert_problems(host)
    if experts_per_layer is not None:
        for layer, experts in host.items():
            over = [e for e in experts if isinstance(e, int) and e >= experts_per_layer]
            if over:
                problems.append(f"layer {layer}: expert id {over[0]} is out of range (a layer has "
                                f"{experts_per_layer} experts)")
    if problems:
        raise InputError(f"{where}: " + "; ".join(inputs.summarize(problems)))
    return PlanFile(format=FORMAT, version=VERSION, model=model,
                    checkpoint=CheckpointRef(source=source, moe_layers=moe_layers, experts_per_layer=experts_per_layer),
                    host_experts={k: sorted(v) for k, v in sorted(host.items(), key=lambda kv: int(kv[0])) if v},
                    generator=GeneratorRef(name="imported", parameters={"format": FORMAT_NAME}),
                    created_at=runs.utc_now())


def write_host_plan(mapping: dict[str, list[int]], path: Path | str) -> Path:
    # prepare_pack.py writes json.dumps(plan): compact, one line.
    runs.atomic_write_text(Path(path), json.dumps(mapping))
    return Path(path)


def read_host_plan(path: Path | str) -> dict[str, Any]:
    """The mapping of a host-plan file, with the plan file's bounds (size, UTF-8, no duplicate keys or NaN)."""
    p = Path(path)
    text = inputs.decode_utf8(inputs.read_bytes(p, "host plan", PLAN_MAX_BYTES), p, "host plan")
    return parse_plan_json(text, f"host plan {p}")
