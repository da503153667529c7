"""Plan files: which routed experts, and which whole tensors, a server keeps in pinned host RAM instead of on the GPUs;
the generators that choose them; and the predicted cost of a plan.

File format (JSON, one object; docs/plan-files.md has an example)::

    {
      "format": "offload-lab-plan",          # required, exactly this
      "version": 1,                          # required
      "model": "tiny-qwen3-moe",             # a name for people; not checked
      "checkpoint": {                        # what the plan was made for
        "source": "...", "revision": null, "commit": null,
        "fingerprint": "<sha256 of tensor names, dtypes, shapes>",
        "moe_layers": [0, 1, 2, 3], "experts_per_layer": 32
      },
      "host_experts": {"0": [3, 17], "2": [5]},   # checkpoint layer number -> expert ids on host
      "host_tensors": ["model.embed_tokens.weight"],   # whole tensors on host, by name
      "generator": {"name": "activation-aware", "parameters": {...}},
      "statistics": {"path": "...", "sha256": "...", "tokens": 8279} | null,   # routing counts used, if any
      "created_at": "2025-...Z",
      "predicted": {...}                     # optional, informational (see predict())
    }

Layer numbers are the checkpoint's own (DeepSeek-V3's first MoE layer is 3), as strings because JSON keys are
strings. An expert is named by (layer, expert) with every tensor of that expert moving together (the projections and,
for EXL3, trellis/suh/svh). Under tensor parallelism every rank moves its slice of the same experts; under expert
parallelism a host expert leaves the rank that owns it.

``plan check`` (:func:`check_plan`) rejects: a layer that has no routed experts in the checkpoint, an expert id out of
range, an expert or layer listed twice, a host tensor that does not exist or that belongs to a routed expert (list
the expert instead), a tensor listed twice. A checkpoint whose fingerprint differs from the plan's is a warning (a
plan may be reused across quantizations of the same model).

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

Predicted cost (:func:`predict`), per GPU, for routing probabilities p(l,e) (tokens routed to e / tokens) and
expert bytes s(l,e) (that GPU's share), at B tokens per step (B = 1 is single-stream decode)::

    u(l,e)     = 1 - (1 - p(l,e))^B                   chance the expert is used in a step (tokens independent)
    H_l        = sum_{e on host}   u(l,e) s(l,e)      expected bytes read over the host link at layer l
    R_l        = sum_{e on GPU}    u(l,e) s(l,e)      expected routed bytes read from HBM at layer l
    D_gpu      = bytes per step of every other weight read each token (attention, shared experts, dense MLPs,
                 routers, norms, lm_head) left on the GPU; D_host the same for those moved to host
    T_step    >= D_gpu / BW_hbm + D_host / BW_link + sum_l max(R_l / BW_hbm, H_l / BW_link)
    TPOT      >= T_step (every stream of the step gets one token per step)

It is a lower bound on the expected time: peak bandwidths, perfect overlap of HBM and link reads inside a layer,
layers in sequence, no KV-cache reads, kernels, launches or synchronisation, and E[max(a, b)] >= max(E[a], E[b]).
Give bandwidths as measured where you have them (zero-copy link rate, not the copy engine's). Embedding and Engram
rows are lookups (a few KB per token) and are not counted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from offload_lab.core import runs
from offload_lab.fit.checkpoint import Checkpoint, Classification
from offload_lab.core.errors import InputError
from offload_lab.fit.memory import GiB, HostSet, MemoryModel
from offload_lab.fit.routing import RoutingCounts

FORMAT = "offload-lab-plan"
VERSION = 1
GENERATORS = ("uniform", "layer-order", "budget-fit", "activation-aware")
# Categories whose weights are read in full for every token (so moving them to host costs link bandwidth per token).
PER_TOKEN_CATEGORIES = ("attention", "shared_expert", "dense_mlp", "router", "norm", "lm_head")


class CheckpointRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str | None = None
    revision: str | None = None
    commit: str | None = None
    fingerprint: str | None = None
    moe_layers: list[int] | None = None
    experts_per_layer: int | None = None


class GeneratorRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    parameters: dict[str, Any] = Field(default_factory=dict)


class StatisticsRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    sha256: str
    tokens: int | None = None


class PlanFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["offload-lab-plan"]
    version: Literal[1]
    model: str = ""
    checkpoint: CheckpointRef = Field(default_factory=CheckpointRef)
    host_experts: dict[str, list[int]] = Field(default_factory=dict)
    host_tensors: list[str] = Field(default_factory=list)
    generator: GeneratorRef | None = None
    statistics: StatisticsRef | None = None
    created_at: str | None = None
    predicted: dict[str, Any] | None = None

    @field_validator("host_experts")
    @classmethod
    def _layer_keys(cls, v: dict[str, list[int]]) -> dict[str, list[int]]:
        for key, experts in v.items():
            if not key.isdigit():
                raise ValueError(f"layer key {key!r} is not a layer number")
            if any(e < 0 for e in experts):
                raise ValueError(f"layer {key}: negative expert id")
        return v

    def experts(self) -> list[tuple[int, int]]:
        return [(int(layer), e) for layer, es in self.host_experts.items() for e in es]

    def host_set(self) -> HostSet:
        return HostSet(frozenset(self.experts()), frozenset(self.host_tensors))


@dataclass
class Problem:
    level: Literal["error", "warning"]
    message: str


# ----------------------------------------------------------------------------------------------------------------
# Reading and writing


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise InputError(f"key {k!r} appears twice in one object (for host_experts: list a layer once)")
        seen[k] = v
    return seen


def read_plan(path: Path | str) -> PlanFile:
    """Read and validate the structure of a plan file; errors name the file and the field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"plan file {p}: cannot read it ({e.strerror or e})") from e
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise InputError(f"plan file {p}: not valid JSON ({e})") from e
    except InputError as e:
        raise InputError(f"plan file {p}: {e}") from e
    if not isinstance(raw, dict):
        raise InputError(f"plan file {p}: expected a JSON object, got {type(raw).__name__}")
    if raw.get("format") != FORMAT:
        raise InputError(f"plan file {p}: field 'format' must be {FORMAT!r} (got {raw.get('format')!r}); "
                         "see docs/plan-files.md")
    try:
        return PlanFile.model_validate(raw)
    except ValidationError as e:
        details = "; ".join(f"field '{'.'.join(map(str, err['loc']))}': {err['msg']}" for err in e.errors())
        raise InputError(f"plan file {p}: {details}") from e


def write_plan(plan: PlanFile, path: Path | str) -> Path:
    runs.atomic_write_text(Path(path), plan.model_dump_json(indent=2) + "\n")
    return Path(path)


# ----------------------------------------------------------------------------------------------------------------
# Checking against a checkpoint


def check_plan(plan: PlanFile, cls: Classification, ckpt: Checkpoint | None = None) -> list[Problem]:
    """Every way the plan does not fit the checkpoint (see the module docstring)."""
    problems: list[Problem] = []
    eb = cls.expert_bytes()
    per_layer: dict[int, set[int]] = {}
    for layer, e in eb:
        per_layer.setdefault(layer, set()).add(e)
    for key, experts in plan.host_experts.items():
        layer = int(key)
        if layer not in per_layer:
            problems.append(Problem("error", f"host_experts: layer {layer} has no routed experts in the checkpoint "
                                             f"(MoE layers: {_ranges(sorted(per_layer))})"))
            continue
        seen: set[int] = set()
        for e in experts:
            if e in seen:
                problems.append(Problem("error", f"host_experts: layer {layer} lists expert {e} twice"))
            seen.add(e)
            if e not in per_layer[layer]:
                problems.append(Problem("error", f"host_experts: layer {layer} has no expert {e} (it has "
                                                 f"{len(per_layer[layer])}, ids {_ranges(sorted(per_layer[layer]))})"))
    by_name = {it.name: it for it in cls.items}
    seen_t: set[str] = set()
    for name in plan.host_tensors:
        if name in seen_t:
            problems.append(Problem("error", f"host_tensors: {name} is listed twice"))
        seen_t.add(name)
        it = by_name.get(name)
        if it is None:
            problems.append(Problem("error", f"host_tensors: {name} does not exist in the checkpoint"))
        elif it.category == "routed_expert":
            where = f"layer {it.layer}, expert {it.expert}" if it.expert is not None else f"layer {it.layer}"
            problems.append(Problem("error", f"host_tensors: {name} is a routed expert's tensor ({where}); list "
                                             "the expert in host_experts instead"))
    if ckpt is not None and plan.checkpoint.fingerprint and plan.checkpoint.fingerprint != ckpt.fingerprint():
        problems.append(Problem("warning", "the plan was made for a checkpoint with a different tensor layout "
                                           f"(fingerprint {plan.checkpoint.fingerprint[:12]}..., this one "
                                           f"{ckpt.fingerprint()[:12]}...)"))
    return problems


def _ranges(xs: Sequence[int]) -> str:
    if not xs:
        return "none"
    out, start, prev = [], xs[0], xs[0]
    for x in list(xs[1:]) + [None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        if x is not None:
            start = prev = x
    return ",".join(out)


# ----------------------------------------------------------------------------------------------------------------
# Generators: each returns a boolean host mask over MemoryModel.experts.keys


def _probabilities(model: MemoryModel, counts: RoutingCounts) -> np.ndarray:
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
    p = _probabilities(model, counts) if within == "coldest" else None
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
    p = _probabilities(model, counts)
    return _take_with_cap(model, _coldest_first(model, p), n, max_layer_fraction)


def _coldest_first(model: MemoryModel, p: np.ndarray) -> list[int]:
    """Indices by routing probability; among equals the bigger expert (frees more memory), then (layer, expert)."""
    keys = model.experts.keys
    experts = np.array([e for _, e in keys])
    layers = np.array([layer for layer, _ in keys])
    return [int(i) for i in np.lexsort((experts, layers, -model.experts.bytes, p))]


def _take_with_cap(model: MemoryModel, order: Iterable[int], n: int, max_layer_fraction: float | None) -> np.ndarray:
    keys = model.experts.keys
    mask = np.zeros(len(keys), dtype=bool)
    cap: dict[int, int] = {}
    if max_layer_fraction is not None:
        for layer, idx in _layer_groups(model).items():
            cap[layer] = int(math.floor(max_layer_fraction * len(idx)))
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
    report = model.report(HostSet(tensors=frozenset(host_tensors)))
    device = np.array([r.device_total for r in report.ranks], dtype=np.float64)
    deficit = device + reserve_gib * GiB - usable_gib * GiB
    keys = model.experts.keys
    mask = np.zeros(len(keys), dtype=bool)
    if (deficit <= 0).all():
        return mask
    if counts is not None:
        p = _probabilities(model, counts)
        order = _coldest_first(model, p)
    else:
        # Largest first; within a size, round-robin over layers (expert ids from the top) so the plan is spread.
        position = np.zeros(len(keys), dtype=np.int64)
        for idx in _layer_groups(model).values():
            for k, i in enumerate(sorted(idx, key=lambda i: -keys[i][1])):
                position[i] = k
        order = sorted(range(len(keys)), key=lambda i: (-int(model.experts.bytes[i]), int(position[i]), keys[i][0]))
    cap: dict[int, int] = {}
    if max_layer_fraction is not None:
        cap = {layer: int(math.floor(max_layer_fraction * len(idx))) for layer, idx in _layer_groups(model).items()}
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
# Prediction


@dataclass(frozen=True)
class Bandwidth:
    hbm_gbps: float  # GB/s (1e9 bytes) a GPU reads its own memory at
    link_gbps: float  # GB/s a GPU reads pinned host memory at (zero-copy over its PCIe link)

    def __post_init__(self) -> None:
        if self.hbm_gbps <= 0 or self.link_gbps <= 0:
            raise InputError("bandwidths must be positive GB/s")


def predict(model: MemoryModel, host: HostSet, counts: RoutingCounts, bw: Bandwidth | None = None,
            batch: int = 1) -> dict[str, Any]:
    """Expected bytes per token from host and HBM, and the TPOT lower bound (module docstring), for the fullest rank."""
    if batch < 1:
        raise InputError("batch must be at least 1")
    p = _probabilities(model, counts)
    used = 1.0 - (1.0 - np.clip(p, 0.0, 1.0)) ** batch
    mask = model.host_mask(host)
    rb = model.experts.rank_bytes  # [n, tp]
    keys = model.experts.keys
    layer_of = np.array([layer for layer, _ in keys])
    host_step = (used[:, None] * rb * mask[:, None])  # [n, tp]
    gpu_step = (used[:, None] * rb * ~mask[:, None])
    # Per token: a step of B tokens reads each used expert once, so divide the step's bytes by B (B = 1: p * s).
    routed_total = float((used * model.experts.bytes).sum()) / batch
    host_total = float((used * model.experts.bytes * mask).sum()) / batch
    # Per-token fixed weights by rank: what is read each step from HBM and from host.
    report = model.report(host)
    d_gpu = np.array([sum(r.device_bytes.get(c, 0) for c in PER_TOKEN_CATEGORIES) for r in report.ranks], float)
    d_host = np.array([sum(r.host_bytes.get(c, 0) for c in PER_TOKEN_CATEGORIES) for r in report.ranks], float)
    out: dict[str, Any] = {
        "batch": batch,
        "host_experts": int(mask.sum()),
        "experts": len(keys),
        "host_expert_bytes": int((model.experts.bytes * mask).sum()),
        # Summed over GPUs: what the checkpoint's weights cost per token, independent of the split.
        "host_bytes_per_token": host_total,
        "routed_bytes_per_token": routed_total,
        "host_share_of_routed_traffic": host_total / routed_total if routed_total else 0.0,
        "gpu_hit_rate": 1.0 - float((p * mask).sum() / p.sum()) if p.sum() else 1.0,
    }
    per_rank_host = (host_step.sum(axis=0) + d_host) / batch
    out["host_bytes_per_token_per_gpu_max"] = float(per_rank_host.max())
    if bw is not None:
        times = []
        for r in range(model.par.tp):
            t = d_gpu[r] / (bw.hbm_gbps * 1e9) + d_host[r] / (bw.link_gbps * 1e9)
            for layer in np.unique(layer_of):
                sel = layer_of == layer
                t += max(gpu_step[sel, r].sum() / (bw.hbm_gbps * 1e9), host_step[sel, r].sum() / (bw.link_gbps * 1e9))
            times.append(t)
        out["tpot_lower_bound_ms"] = max(times) * 1e3
        out["bandwidth"] = {"hbm_gbps": bw.hbm_gbps, "link_gbps": bw.link_gbps}
    return out


# ----------------------------------------------------------------------------------------------------------------
# Building plan files


def host_tensors_for(cls: Classification, categories: Iterable[str] = (), names: Iterable[str] = ()) -> list[str]:
    """Named tensors plus every tensor of the given categories (e.g. embedding, engram), in checkpoint order."""
    cats = set(categories)
    known = {it.name for it in cls.items}
    names = list(names)
    missing = [n for n in names if n not in known]
    if missing:
        raise InputError(f"--host-tensor {missing[0]} does not exist in the checkpoint")
    bad = [c for c in cats if c == "routed_expert"]
    if bad:
        raise InputError("--host-category routed_expert: choose experts with a generator instead")
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
    import hashlib

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


def plan_summary(plan: PlanFile) -> dict[str, Any]:
    per_layer = {int(k): len(v) for k, v in plan.host_experts.items()}
    return {
        "model": plan.model,
        "generator": plan.generator.name if plan.generator else None,
        "parameters": plan.generator.parameters if plan.generator else {},
        "host_experts": sum(per_layer.values()),
        "layers_with_host_experts": len([v for v in per_layer.values() if v]),
        "host_experts_per_layer_min": min(per_layer.values(), default=0),
        "host_experts_per_layer_max": max(per_layer.values(), default=0),
        "host_tensors": list(plan.host_tensors),
        "statistics_sha256": plan.statistics.sha256 if plan.statistics else None,
        "checkpoint_fingerprint": plan.checkpoint.fingerprint,
    }
