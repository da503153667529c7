"""Decode and prefill times of a MoE model on a pod, from bytes, FLOPs and the hardware's rates.

Decode, one step of B streams each verifying ``1 + spec`` tokens (T = B(1 + spec) tokens), on each of ``tp`` GPUs
(every GPU reads its 1/tp of each weight it uses; tensor parallelism)::

    p_r        = probability a token routes to the expert of popularity rank r: Zipf(s) over the experts of a layer,
                 scaled so that the p_r sum to top_k (s = 0 is uniform routing)
    u_r(T)     = 1 - (1 - p_r)^T                        chance the expert is used in the step
    host       = the plan's experts on host: the least popular ranks (a plan made from routing counts keeps the hot
                 experts on the GPUs; under uniform routing which ones does not matter)
    t_layer    = max(sum_gpu u_r s / BW_hbm, sum_host u_r s / BW_link)      HBM and link reads overlap in a layer
    t_step     = dense / BW_hbm + sum_layers t_layer + B * kv_read(context) / BW_hbm + layers * overhead,
                 or the FLOPs time if larger (overhead: launches and tensor-parallel all-reduces, per layer and step)
    TPOT       = t_step / (1 + acceptance * spec)       every stream gets its accepted tokens per step

Prefill of n new tokens after c cached ones: FLOPs = 2 * active * n + attention pairs (n*c + n^2/2, each query
limited to ``index_topk`` keys under sparse attention, plus the indexer's own pairs) at ``compute_efficiency`` of
the GPUs' dense peak; every chunk of ``chunk`` tokens touches every expert, so the host's experts cross the link once
per chunk, copied before the GEMMs that use them (staging: link time adds to compute time). The KV cache holds what is left of each GPU's memory after the
weights it keeps and the reserve.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from offload_lab.core.errors import InputError
from offload_lab.predict.shape import Shape

GB = 1e9
GiB = float(1 << 30)


@dataclass(frozen=True)
class Factors:
    """The free factors: held the same for every pod of a hardware class, fitted on named figures."""

    link_efficiency: float = 1.0  # share of the link's peak a GPU reads host experts at
    routing_skew: float = 0.0  # Zipf exponent of expert popularity inside a layer (0: uniform)
    compute_efficiency: float = 0.5  # share of the dense peak prefill reaches
    layer_overhead_us: float = 0.0  # fixed time per layer and decode step: launches, tensor-parallel all-reduces

    def __post_init__(self) -> None:
        if not (0 < self.link_efficiency <= 1.5 and 0 <= self.routing_skew <= 4 and 0 < self.compute_efficiency <= 1
                and 0 <= self.layer_overhead_us <= 10_000):
            raise InputError(f"factors {self}: link_efficiency in (0, 1.5], routing_skew in [0, 4], "
                             "compute_efficiency in (0, 1], layer_overhead_us in [0, 10000]")


@dataclass(frozen=True)
class PodSpec:
    """What the physics needs of a pod: per GPU figures, how many, the link to host memory and the host's rate."""

    gpu: str
    count: int
    hbm_gbps: float
    memory_gib: float  # usable per GPU as the driver reports it
    peak_tflops: float  # dense, at the precision the stack's GEMMs run in (BF16/FP16)
    peak_fp8_tflops: float | None = None  # dense FP8 (a sparse-attention indexer runs in FP8); None: peak_tflops
    link: str = "pcie"
    link_gbps: float = 0.0  # per GPU, per direction
    host_memory_gbps: float | None = None  # the host's DRAM rate, shared by every GPU's link
    host_ram_gib: float | None = None
    unified: bool = False  # the GPU reads host memory at HBM rate (Apple unified memory, Grace's C2C coherent)


@dataclass(frozen=True)
class Serving:
    """The stack's choices that the physics reads (from its flags, or the user's)."""

    tp: int = 1
    host_experts: int = 0  # routed experts on host, spread over the MoE layers
    spec_tokens: int = 0  # speculative tokens per step (MTP or a draft)
    acceptance: float = 0.0  # chance one speculative token is accepted
    chunk_tokens: int = 8192  # prefill chunk (vLLM's max_num_batched_tokens)
    gpu_memory_utilization: float = 0.9
    reserve_gib: float = 5.0  # activations, CUDA graphs, staging buffers per GPU
    kv_dtype_bytes: float | None = None  # None: the model's dtype
    weights_per_gpu_gib: float | None = None  # what each GPU holds (published or computed); None: computed


@dataclass
class Predictor:
    shape: Shape
    pod: PodSpec
    serving: Serving
    factors: Factors = field(default_factory=Factors)

    def __post_init__(self) -> None:
        s = self.shape
        if self.serving.tp < 1 or self.serving.tp > self.pod.count:
            raise InputError(f"tensor parallel {self.serving.tp}: the pod has {self.pod.count} GPU(s)")
        total = s.moe_layers * s.experts
        if not 0 <= self.serving.host_experts <= total:
            raise InputError(f"host experts {self.serving.host_experts}: the model has {total:,} routed experts")
        k = max(s.top_k, 0)
        if s.experts:
            w = np.arange(1, s.experts + 1, dtype=float) ** -self.factors.routing_skew
            p = k * w / w.sum()
            # an expert cannot be picked twice by one token: cap at 1 and spread the rest over the others
            for _ in range(20):
                over = p > 1
                if not over.any():
                    break
                extra = (p[over] - 1).sum()
                p[over] = 1
                p[~over] += extra * p[~over] / p[~over].sum()
            self._p = p
        else:
            self._p = np.zeros(0)

    # --- decode --------------------------------------------------------------------------------------------------

    @property
    def host_fraction(self) -> float:
        total = self.shape.moe_layers * self.shape.experts
        return self.serving.host_experts / total if total else 0.0

    def _link_bps(self) -> float:
        pod = self.pod
        if pod.unified:
            return pod.hbm_gbps * GB
        link = pod.link_gbps * self.factors.link_efficiency
        if pod.host_memory_gbps:
            link = min(link, pod.host_memory_gbps / self.serving.tp)
        return link * GB

    def host_traffic_share(self, tokens: int = 1) -> float:
        """Share of the routed bytes a step reads that come from host experts."""
        used = 1 - (1 - self._p) ** tokens
        n_host = int(round(self.host_fraction * self.shape.experts))
        total = used.sum()
        return float(used[self.shape.experts - n_host:].sum() / total) if total and n_host else 0.0

    def kv_read_bytes(self, context: int) -> float:
        s = self.shape
        per_token = s.kv_bytes_per_token * self._kv_scale()
        if s.index_topk:
            return min(context, s.index_topk) * per_token + context * s.index_bytes_per_token
        return context * per_token

    def _kv_scale(self) -> float:
        kv_b = self.serving.kv_dtype_bytes
        return 1.0 if kv_b is None else kv_b / 2.0

    def step_ms(self, streams: int, context: int) -> dict[str, float]:
        s, sv, pod = self.shape, self.serving, self.pod
        tp = sv.tp
        tokens = streams * (1 + sv.spec_tokens)
        hbm = pod.hbm_gbps * GB
        link = self._link_bps()
        used = 1 - (1 - self._p) ** tokens
        n_host_total = sv.host_experts
        base, extra = divmod(n_host_total, max(s.moe_layers, 1))
        per_expert = s.expert_bytes / tp
        t_experts = 0.0
        host_bytes = hbm_bytes = 0.0
        cum = np.concatenate([[0.0], np.cumsum(used[::-1])])  # used of the coldest n experts = cum[n]
        total_used = cum[-1]
        for layer in range(s.moe_layers):
            n_host = base + (1 if layer < extra else 0)
            h = cum[n_host] * per_expert
            g = (total_used - cum[n_host]) * per_expert
            host_bytes += h
            hbm_bytes += g
            t_experts += max(g / hbm, h / link)
        t_dense = s.dense_bytes / tp / hbm
        kv_per_gpu = self.kv_read_bytes(context) / (1 if s.kv_replicated else tp)
        t_kv = streams * kv_per_gpu / hbm
        mem = t_dense + t_experts + t_kv + s.layers * self.factors.layer_overhead_us * 1e-6
        t_flops = self._compute_s(2 * s.active_params * tokens, [self._attn_flops(1, context)] * tokens) / tp
        step = max(mem, t_flops)
        per_step = 1 + sv.acceptance * sv.spec_tokens
        return {"step_ms": step * 1e3, "tpot_ms": step * 1e3 / per_step, "experts_ms": t_experts * 1e3,
                "dense_ms": t_dense * 1e3, "kv_ms": t_kv * 1e3, "flops_ms": t_flops * 1e3,
                "host_gb_per_step_per_gpu": host_bytes / GB, "hbm_gb_per_step_per_gpu": (hbm_bytes + s.dense_bytes / tp
                                                                                        + t_kv * hbm) / GB,
                "tokens_per_step": per_step}

    def tok_s(self, streams: int, context: int) -> float:
        return 1000.0 / self.step_ms(streams, context)["tpot_ms"]

    # --- prefill -------------------------------------------------------------------------------------------------

    def _compute_s(self, linear: float, attn: list[tuple[float, float]]) -> float:
        """Seconds on one GPU's worth of peak for GEMM FLOPs and attention (BF16, FP8 indexer) FLOPs."""
        pod, eff = self.pod, self.factors.compute_efficiency
        bf16 = linear + sum(a for a, _ in attn)
        fp8 = sum(b for _, b in attn)
        return (bf16 / (pod.peak_tflops * 1e12) + fp8 / ((pod.peak_fp8_tflops or pod.peak_tflops) * 1e12)) / eff

    def _attn_flops(self, new: int, cached: int) -> tuple[float, float]:
        s = self.shape
        pairs = new * cached + new * (new + 1) / 2
        if s.index_topk:
            k = s.index_topk
            # each query at position q reads min(q, k) keys
            lo, hi = cached + 1, cached + new
            full = max(0, min(hi, k) - lo + 1) if lo <= k else 0
            part = (min(hi, k) * (min(hi, k) + 1) / 2 - (lo - 1) * lo / 2) if full else 0.0
            main = part + (new - full) * k
            return main * s.attn_flops_per_pair, pairs * s.index_flops_per_pair
        return pairs * s.attn_flops_per_pair, 0.0

    def prefill_s(self, new: int, cached: int = 0, requests: int = 1) -> dict[str, float]:
        """Seconds to prefill ``requests`` prompts of ``new`` tokens after ``cached`` shared ones, scheduled together
        in chunks of ``chunk_tokens``, plus the first decode step."""
        s, sv, pod = self.shape, self.serving, self.pod
        tp = sv.tp
        tokens = new * requests
        chunks = max(1, math.ceil(tokens / sv.chunk_tokens))
        host_bytes_per_gpu = sv.host_experts * s.expert_bytes / tp
        t_link = chunks * host_bytes_per_gpu / self._link_bps()
        t_hbm = chunks * (s.routed_bytes / tp + s.dense_bytes / tp) / (pod.hbm_gbps * GB)
        # cached keys are read once per chunk that attends to them
        t_cache = chunks * requests * self.kv_read_bytes(cached) / (pod.hbm_gbps * GB) if cached else 0.0
        t_compute = self._compute_s(2 * s.active_params * tokens, [self._attn_flops(new, cached)] * requests) / tp
        # staged: a layer's host experts are copied before its GEMMs run on them (the dsv41 patch's DMA staging)
        t = max(t_compute + t_link, t_hbm) + t_cache
        first = self.step_ms(requests, cached + new)["step_ms"] / 1e3
        return {"ttft_s": t + first, "compute_s": t_compute, "link_s": t_link, "chunks": chunks,
                "cache_read_s": t_cache}

    def prefill_tail_s(self, new: int, cached: int, users: int) -> float:
        """Time to first token of the unluckiest of ``users`` closed-loop users on one cached prefix: its request
        arrives just after an engine step began that prefills the other ``users - 1`` requests (vLLM runs one
        step at a time and a waiting request joins the next one), so it waits for that whole step, host experts
        copied over the link included, then has its own prefill and first decode step. No free parameter: the
        worst arrival, taken as the tail of a handful of requests."""
        if users <= 1:
            return float(self.prefill_s(new, cached, 1)["ttft_s"])
        ahead = self.prefill_s(new, cached, users - 1)
        in_flight = ahead["ttft_s"] - self.step_ms(users - 1, cached + new)["step_ms"] / 1e3
        return float(in_flight + self.prefill_s(new, cached, 1)["ttft_s"])

    # --- memory --------------------------------------------------------------------------------------------------

    def weights_per_gpu_gib(self) -> float:
        if self.serving.weights_per_gpu_gib is not None:
            return self.serving.weights_per_gpu_gib
        s = self.shape
        gpu_experts = s.moe_layers * s.experts - self.serving.host_experts
        return (gpu_experts * s.expert_bytes + s.dense_bytes) / self.serving.tp / GiB

    def kv_capacity_tokens(self) -> int:
        s, sv = self.shape, self.serving
        free = self.pod.memory_gib * sv.gpu_memory_utilization - self.weights_per_gpu_gib() - sv.reserve_gib
        per_token = s.kv_bytes_per_token * self._kv_scale() / (1 if s.kv_replicated else sv.tp)
        per_token += s.index_bytes_per_token
        return max(0, int(free * GiB / per_token)) if per_token else 0

    def fits(self) -> dict[str, Any]:
        need = self.weights_per_gpu_gib() + self.serving.reserve_gib
        have = self.pod.memory_gib * self.serving.gpu_memory_utilization
        host_need = self.serving.host_experts * self.shape.expert_bytes / GiB
        out = {"weights_per_gpu_gib": round(self.weights_per_gpu_gib(), 2), "usable_per_gpu_gib": round(have, 2),
               "reserve_gib": self.serving.reserve_gib, "fits_gpu": need <= have,
               "host_experts": self.serving.host_experts, "host_ram_needed_gib": round(host_need, 1)}
        if self.pod.host_ram_gib is not None:
            out["host_ram_gib"] = self.pod.host_ram_gib
            out["fits_host"] = host_need <= self.pod.host_ram_gib * 0.9
        return out

    def describe(self) -> dict[str, Any]:
        return {"pod": asdict(self.pod), "serving": asdict(self.serving), "factors": asdict(self.factors),
                "model": self.shape.as_dict()}
