"""The generators that choose which routed experts go to host RAM, and the plan file made from their choice.

Generators (all deterministic):

- ``uniform``: the same share of experts on host in every layer (the study's "gen30": 30% per layer); the total is
  round(fraction x experts), spread so layers differ by at most one; within a layer evenly spaced expert ids (so
  that every expert-parallel rank gives up its share), or the coldest when routing counts are given
  (``within="coldest"``).
- ``layer-order``: whole layers from the first, as vLLM's UVA offload and llama.cpp's ``-ncmoe`` place them.
- ``budget-fit``: the fewest experts on host so that every GPU fits its usable memory with the headroom asked;
  largest experts first, round-robin over layers, or the coldest first when routing counts are given.
- ``activation-aware``: the coldest (layer, expert) pairs over all layers, by per-token routing probability. For a
  fixed number of host bytes this minimises the expected host bytes per token, sum over host experts of p(l,e) s(l,e)
  (moving an expert costs p*s and frees s, so the best ratio is the smallest p). An optional per-layer cap keeps one
  layer from becoming the critical path.

Each generator returns a boolean host mask over ``MemoryModel.experts.keys``; :func:`make_plan` turns a mask into a
:class:`~offload_lab.fit.plan_file.PlanFile`.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.fit.classify import CATEGORIES, Classification
from offload_lab.fit.memory import GiB, HostSet, MemoryModel
from offload_lab.fit.plan_file import FORMAT, VERSION, CheckpointRef, GeneratorRef, PlanFile, StatisticsRef
from offload_lab.fit.routing import RoutingCounts
from offload_lab.fit.headers import Checkpoint

GENERATORS = ("uniform", "layer-order", "budget-fit", "activation-aware")


def probabilities(model: MemoryModel, counts: RoutingCounts) -> np.ndarray:
    """p(l,e) aligned with ``model.experts.keys``; every MoE layer of the checkpoint must be counted."""
    keys = model.experts.keys
    probs = counts.probabilities()
    out = np.empty(len(keys))
    for i, (layer, e) in enumerate(keys):
        row = counts.layer_row(layer)
        if e >= counts.num_experts:
            raise InputError(f"routing counts cover {counts.num_experts} experts per layer; the checkpoint has "
                             f"expert {e} in layer {layer}")
        out[i] = probs[row, e]
    return out


def target_count(model: MemoryModel, fraction: float | None, count: int | None) -> int:
    n = len(model.experts.keys)
    if count is not None:
        if not 0 <= count <= n:
            raise InputError(f"--count {count}: the checkpoint has {n} routed experts")
        return count
    if fraction is None or not 0 <= fraction <= 1:
        raise InputError(f"give --fraction between 0 and 1 (got {fraction}) or --count")
    return int(round(fraction * n))


def _layer_groups(model: MemoryModel) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, (layer, _) in enumerate(model.experts.keys):
        groups.setdefault(layer, []).append(i)
    return groups


def gen_uniform(model: MemoryModel, fraction: float | None = None, count: int | None = None,
                counts: RoutingCounts | None = None, within: Literal["index", "coldest"] = "index") -> np.ndarray:
    n = target_count(model, fraction, count)
    groups = _layer_groups(model)
    layers = sorted(groups)
    base, extra = divmod(n, len(layers)) if layers else (0, 0)
    # Spread the layers that take one more expert evenly over the depth.
    bonus = {layers[(k * len(layers)) // extra] for k in range(extra)} if extra else set()
    p = probabilities(model, counts) if within == "coldest" else None
    if within == "coldest" and counts is None:
        raise InputError("uniform with within=coldest needs routing counts")
    mask = np.zeros(len(model.experts.keys), dtype=bool)
    for layer in layers:
        idx = groups[layer]
        take = min(len(idx), base + (1 if layer in bonus else 0))
        if p is None:
            # Evenly spaced ids, so that under expert parallelism every rank gives up its share.
            by_id = sorted(idx, key=lambda i: model.experts.keys[i][1])
            chosen = [by_id[int((j + 0.5) * len(by_id) / take)] for j in range(take)] if take else []
        else:
            chosen = sorted(idx, key=lambda i: (p[i], -model.experts.keys[i][1]))[:take]
        mask[chosen] = True
    return mask


def gen_layer_order(model: MemoryModel, fraction: float | None = None, count: int | None = None) -> np.ndarray:
    n = target_count(model, fraction, count)
    mask = np.zeros(len(model.experts.keys), dtype=bool)
    mask[:n] = True  # keys are sorted by (layer, expert)
    return mask


def gen_activation_aware(model: MemoryModel, counts: RoutingCounts, fraction: float | None = None,
                         count: int | None = None, max_layer_fraction: float | None = None) -> np.ndarray:
    n = target_count(model, fraction, count)
    p = probabilities(model, counts)
    return _take_with_cap(model, _coldest_first(model, p), n, max_layer_fraction)


def _coldest_first(model: MemoryModel, p: np.ndarray) -> list[int]:
    """Indices by routing probability; among equals the bigger expert (frees more memory), then (layer, expert)."""
    keys = model.experts.keys
    experts = np.array([e for _, e in keys])
    layers = np.array([layer for layer, _ in keys])
    return [int(i) for i in np.lexsort((experts, layers, -model.experts.bytes, p))]


def _layer_caps(model: MemoryModel, max_layer_fraction: float | None) -> dict[int, int]:
    """Most host experts each layer may give up ({} when there is no cap)."""
    if max_layer_fraction is None:
        return {}
    if not (math.isfinite(max_layer_fraction) and 0 < max_layer_fraction <= 1):
        raise InputError(f"--max-layer-fraction {max_layer_fraction}: give a share of a layer's experts in (0, 1]")
    return {layer: int(math.floor(max_layer_fraction * len(idx))) for layer, idx in _layer_groups(model).items()}


def _take_with_cap(model: MemoryModel, order: Iterable[int], n: int, max_layer_fraction: float | None) -> np.ndarray:
    keys = model.experts.keys
    mask = np.zeros(len(keys), dtype=bool)
    cap = _layer_caps(model, max_layer_fraction)
    taken: dict[int, int] = {}
    got = 0
    for i in order:
        if got >= n:
            break
        layer = keys[i][0]
        if cap and taken.get(layer, 0) >= cap[layer]:
            continue
        mask[i] = True
        taken[layer] = taken.get(layer, 0) + 1
        got += 1
    if got < n:
        raise InputError(f"the per-layer cap ({max_layer_fraction}) allows only {got} host experts, not {n}")
    return mask


def gen_budget_fit(model: MemoryModel, usable_gib: float, reserve_gib: float, host_tensors: Iterable[str] = (),
                   counts: RoutingCounts | None = None, max_layer_fraction: float | None = None) -> np.ndarray:
    """The fewest experts on host so that every rank's bytes + reserve <= usable; see the module docstring."""
    if not (math.isfinite(usable_gib) and usable_gib > 0):
        raise InputError(f"--usable-gib {usable_gib}: give the usable memory per GPU, a finite number above 0")
    if not (math.isfinite(reserve_gib) and reserve_gib >= 0):
        raise InputError(f"--reserve-gib {reserve_gib}: give the headroom to keep free, a finite number, 0 or more")
    report = model.report(HostSet(tensors=frozenset(host_tensors)))
    device = np.array([r.device_total for r in report.ranks], dtype=np.float64)
    deficit = device + reserve_gib * GiB - usable_gib * GiB
    keys = model.experts.keys
    mask = np.zeros(len(keys), dtype=bool)
    if (deficit <= 0).all():
        return mask
    if counts is not None:
        p = probabilities(model, counts)
        order = _coldest_first(model, p)
    else:
        # Largest first; within a size, round-robin over layers (expert ids from the top) so the plan is spread.
        position = np.zeros(len(keys), dtype=np.int64)
        for idx in _layer_groups(model).values():
            for k, i in enumerate(sorted(idx, key=lambda i: -keys[i][1])):
                position[i] = k
        order = sorted(range(len(keys)), key=lambda i: (-int(model.experts.bytes[i]), int(position[i]), keys[i][0]))
    cap = _layer_caps(model, max_layer_fraction)
    taken: dict[int, int] = {}
    rank_bytes = model.experts.rank_bytes
    for i in order:
        need = deficit > 0
        if not need.any():
            break
        if not (rank_bytes[i] > 0)[need].any():
            continue  # under EP this expert lives on a rank that already fits
        layer = keys[i][0]
        if cap and taken.get(layer, 0) >= cap[layer]:
            continue
        mask[i] = True
        taken[layer] = taken.get(layer, 0) + 1
        deficit -= rank_bytes[i]
    if (deficit > 0).any():
        worst = int(np.argmax(deficit))
        raise InputError(
            f"no plan fits: with every allowed routed expert on host, GPU {worst} still needs "
            f"{deficit[worst] / GiB:.2f} GiB more than {usable_gib} GiB usable with {reserve_gib} GiB reserved; "
            "move whole tensors to host too (--host-category embedding, engram), use more GPUs, or reserve less"
        )
    return mask


# ----------------------------------------------------------------------------------------------------------------
# The plan file a mask makes


def host_tensors_for(cls: Classification, categories: Iterable[str] = (), names: Iterable[str] = ()) -> list[str]:
    """Named tensors plus every tensor of the given categories (e.g. embedding, engram), in checkpoint order."""
    cats = set(categories)
    known = {it.name for it in cls.items}
    names = list(names)
    missing = [n for n in names if n not in known]
    if missing:
        raise InputError(f"--host-tensor {missing[0]} does not exist in the checkpoint")
    if "routed_expert" in cats:
        raise InputError("--host-category routed_expert: choose experts with a generator instead")
    unknown = sorted(cats - set(CATEGORIES))
    if unknown:
        raise InputError(f"--host-category {unknown[0]}: not a category; known: {', '.join(CATEGORIES)}")
    out = [it.name for it in cls.items if it.category in cats]
    return out + [n for n in names if n not in out]


def make_plan(
    model: MemoryModel,
    ckpt: Checkpoint,
    generator: str,
    mask: np.ndarray,
    host_tensors: Sequence[str] = (),
    parameters: Mapping[str, Any] | None = None,
    counts: RoutingCounts | None = None,
    counts_path: Path | None = None,
    model_name: str | None = None,
) -> PlanFile:
    if generator not in GENERATORS:
        raise InputError(f"unknown generator {generator!r}; known: {', '.join(GENERATORS)}")
    host: dict[str, list[int]] = {}
    for i in np.flatnonzero(mask):
        layer, e = model.experts.keys[int(i)]
        host.setdefault(str(layer), []).append(e)
    stats = None
    if counts is not None:
        sha = runs.sha256_file(counts_path) if counts_path else _counts_sha(counts)
        stats = StatisticsRef(path=str(counts_path) if counts_path else None, sha256=sha, tokens=counts.tokens)
    layers = model.experts.layers
    plan = PlanFile(
        format=FORMAT, version=VERSION,
        model=model_name or str((ckpt.config or {}).get("_name_or_path") or Path(ckpt.source.rstrip("/")).name),
        checkpoint=CheckpointRef(source=ckpt.source, revision=ckpt.revision, commit=ckpt.commit,
                                 fingerprint=ckpt.fingerprint(), moe_layers=layers,
                                 experts_per_layer=max((e for _, e in model.experts.keys), default=-1) + 1),
        host_experts={k: sorted(v) for k, v in sorted(host.items(), key=lambda kv: int(kv[0]))},
        host_tensors=list(host_tensors),
        generator=GeneratorRef(name=generator, parameters=dict(parameters or {})),
        statistics=stats,
        created_at=runs.utc_now(),
    )
    return plan


def _counts_sha(counts: RoutingCounts) -> str:
    return hashlib.sha256((json.dumps(counts.to_dict(), separators=(",", ":")) + "\n").encode()).hexdigest()



def generate(model: MemoryModel, generator: str, *, fraction: float | None = None, count: int | None = None,
             counts: RoutingCounts | None = None, usable_gib: float | None = None, reserve_gib: float = 0.0,
             host_tensors: Sequence[str] = (), max_layer_fraction: float | None = None,
             within: Literal["index", "coldest"] = "index") -> np.ndarray:
    """Dispatch to one generator by name (the CLI's and the notebook's entry point)."""
    if generator == "uniform":
        return gen_uniform(model, fraction, count, counts, within)
    if generator == "layer-order":
        return gen_layer_order(model, fraction, count)
    if generator == "activation-aware":
        if counts is None:
            raise InputError("the activation-aware generator needs routing counts (--counts FILE)")
        return gen_activation_aware(model, counts, fraction, count, max_layer_fraction)
    if generator == "budget-fit":
        if usable_gib is None:
            raise InputError("the budget-fit generator needs --usable-gib")
        return gen_budget_fit(model, usable_gib, reserve_gib, host_tensors, counts, max_layer_fraction)
    raise InputError(f"unknown generator {generator!r}; known: {', '.join(GENERATORS)}")

