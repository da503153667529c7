"""The predicted cost of a plan, and the TPOT lower bound for the study's model on its pod.

:func:`predict`, per GPU, for routing probabilities p(l,e) (tokens routed to e / tokens) and expert bytes s(l,e)
(that GPU's share), at B tokens per step (B = 1 is single-stream decode)::

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

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from offload_lab.core.errors import InputError
from offload_lab.fit.generators import probabilities
from offload_lab.fit.memory import HostSet, MemoryModel
from offload_lab.fit.routing import RoutingCounts, uniform_counts

# Categories whose weights are read in full for every token (so moving them to host costs link bandwidth per token).
PER_TOKEN_CATEGORIES = ("attention", "shared_expert", "dense_mlp", "router", "norm", "lm_head")


@dataclass(frozen=True)
class Bandwidth:
    hbm_gbps: float  # GB/s (1e9 bytes) a GPU reads its own memory at
    link_gbps: float  # GB/s a GPU reads pinned host memory at (zero-copy over its PCIe link)

    def __post_init__(self) -> None:
        if not all(math.isfinite(x) and x > 0 for x in (self.hbm_gbps, self.link_gbps)):
            raise InputError(f"--hbm-gbps {self.hbm_gbps}, --link-gbps {self.link_gbps}: bandwidths must be finite "
                             "GB/s above 0")


def predict(model: MemoryModel, host: HostSet, counts: RoutingCounts, bw: Bandwidth | None = None,
            batch: int = 1) -> dict[str, Any]:
    """Expected bytes per token from host and HBM, and the TPOT lower bound (module docstring), for the fullest rank."""
    if batch < 1:
        raise InputError("batch must be at least 1")
    p = probabilities(model, counts)
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



def uniform_predict(model: MemoryModel, host: HostSet, top_k: int, bw: Bandwidth | None = None,
                    batch: int = 1) -> dict[str, Any]:
    """:func:`predict` under uniform routing (p = top_k / experts per layer), for a checkpoint whose routing is not
    counted; the result says so (``routing: uniform``)."""
    per_layer = max((e for _, e in model.experts.keys), default=-1) + 1
    out = predict(model, host, uniform_counts(model.experts.layers, per_layer, top_k), bw, batch)
    return {**out, "routing": "uniform"}


# ----------------------------------------------------------------------------------------------------------------
# The study's model on the study's pod: pure arithmetic, for the reference paper


@dataclass(frozen=True)
class ExpertLayout:
    """Routed experts of a MoE model as the bound needs them."""

    layers: int
    experts: int  # per layer
    top_k: int
    expert_bytes: float  # one whole expert
    tp: int  # every GPU reads 1/tp of every used expert over its own link


def exl3_expert_bytes(hidden: int, intermediate: int, bpw: float) -> float:
    """An EXL3 expert: ``3·H·I·bpw/8`` bytes of trellis plus ``3·(H+I)·2`` of fp16 suh/svh
    (shared/anchors/expert-offload.md, "Byte arithmetic")."""
    return 3 * hidden * intermediate * bpw / 8 + 3 * (hidden + intermediate) * 2


# DeepSeek-V4.1-Flash as the anchor gives it (384 routed experts x 40 MoE layers, top-6, hidden 5120, expert
# intermediate 2304; shared/anchors/expert-offload.md), 3 bits per weight EXL3 (13.32 MB an expert), TP 2.
STUDY_LAYOUT = ExpertLayout(layers=40, experts=384, top_k=6, expert_bytes=exl3_expert_bytes(5120, 2304, 3.0), tp=2)
# The study's gen30 plan: 4,608 of 15,360 routed experts on host (shared/reference/published-study.md, E1).
GEN30_HOST_EXPERTS = 4608
# RTX PRO 6000 Blackwell memory: 512-bit GDDR7 at 28 Gbps = 512 x 28 / 8 = 1,792 GB/s (vendor figure, as
# configs/campaigns/study-pod.yaml records it).
STUDY_HBM_GBPS = 1792.0
# PCIe Gen5 x16: about 63 GB/s raw per direction; 51.5 GB/s measured pinned H2D on a PRO 6000 (FreeToken), both in
# shared/anchors/expert-offload.md "Physical limits".
STUDY_LINK_GBPS = {"raw Gen5 x16": 63.0, "measured pinned H2D on a PRO 6000": 51.5}
BOUND_LEAVES_OUT = (
    "routing skew: uniform routing is assumed (the study publishes no routing counts or selection rule), so a plan "
    "that put cold experts on host moves fewer bytes than this",
    "speculative decoding (MTP): more than one token per step divides the step time by the accepted tokens",
    "dense weights, KV-cache reads, kernels, launches and synchronisation (they would raise the bound)",
)


def uniform_bound(layout: ExpertLayout, host_experts: int, bw: Bandwidth, batch: int = 1,
                  dense_bytes_per_gpu: float = 0.0) -> dict[str, Any]:
    """Lower bound on the decode step time for ``host_experts`` routed experts on host, spread over the layers as
    the uniform generator spreads them (layers differ by at most one), under uniform routing (the formula of the
    module docstring with p = top_k / experts). ``dense_bytes_per_gpu``: weights read every step from GPU memory
    (0 leaves them out, which lowers the bound)."""
    total = layout.layers * layout.experts
    if not 0 <= host_experts <= total:
        raise InputError(f"host experts {host_experts}: the layout has {total:,} routed experts")
    if batch < 1:
        raise InputError(f"batch {batch}: at least 1 token per step")
    s = layout.expert_bytes / layout.tp
    used = layout.experts * (1.0 - (1.0 - layout.top_k / layout.experts) ** batch)  # distinct experts per layer
    base, extra = divmod(host_experts, layout.layers)
    t = dense_bytes_per_gpu / (bw.hbm_gbps * 1e9)
    host_bytes = hbm_bytes = 0.0
    for layer in range(layout.layers):
        share = (base + (1 if layer < extra else 0)) / layout.experts
        h, r = used * share * s, used * (1 - share) * s
        host_bytes += h
        hbm_bytes += r
        t += max(r / (bw.hbm_gbps * 1e9), h / (bw.link_gbps * 1e9))
    return {"host_experts": host_experts, "experts": total, "host_share": host_experts / total, "batch": batch,
            "routing": "uniform", "tp": layout.tp, "hbm_gbps": bw.hbm_gbps, "link_gbps": bw.link_gbps,
            "host_bytes_per_step_per_gpu": host_bytes, "hbm_bytes_per_step_per_gpu": hbm_bytes + dense_bytes_per_gpu,
            # every stream of a step gets one token per step: TPOT >= the step time
            "step_lower_bound_ms": t * 1e3, "tpot_lower_bound_ms": t * 1e3,
            "leaves_out": list(BOUND_LEAVES_OUT)}


def study_pod_bounds(host_experts: tuple[int, ...] = (GEN30_HOST_EXPERTS, 6144, 7680), batch: int = 1,
                     layout: ExpertLayout = STUDY_LAYOUT, hbm_gbps: float = STUDY_HBM_GBPS,
                     links: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """The bound for the study's gen30 plan and plans with more experts on host (40% and 50% by default: the study
    does not publish how many its second plan moved), on its pod, at each link rate. One row each, labelled."""
    rows = []
    for n in host_experts:
        for link_name, link in (links or STUDY_LINK_GBPS).items():
            row = uniform_bound(layout, n, Bandwidth(hbm_gbps, link), batch)
            rows.append({"plan": "gen30" if n == GEN30_HOST_EXPERTS else f"{n / (layout.layers * layout.experts):.0%} "
                         "on host", "link": link_name, **row})
    return rows
