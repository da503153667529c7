"""Will it fit: bytes each GPU must hold under tensor or expert parallelism, with and without a plan, against the
usable memory per GPU; KV-cache bytes per token; and the parameters x bits-per-weight calculator.

Per-GPU bytes follow how vLLM loads a MoE checkpoint (``deepseek_v2.py``, ``qwen3_moe.py``,
``FusedMoEParallelConfig``; summarised in shared/anchors/expert-offload.md):

====================  ===============================================================================
category              on each of n ranks
====================  ===============================================================================
routed_expert         TP: 1/n of every expert (the intermediate dimension is split). EP: whole experts,
                      rank r holds experts r*E/n..(r+1)*E/n-1 ("linear") or e % n == r ("round_robin")
shared_expert         1/n (TP-sharded)
dense_mlp             1/n
attention             1/n, except the replicated ones: MLA down-projections (q_a_proj, kv_a_proj_with_mqa,
                      wq_a, wkv_a), norms, V3.2's indexer; GQA k/v hold max(1, kv_heads/n) heads' share
router                replicated (gate weight and bias, fp32)
embedding, lm_head    1/n (vocabulary-sharded)
engram                1/n (assumed vocabulary-parallel like an embedding; override with tp_modes)
norm, other           replicated (other: unknown tensors are counted in full on every GPU, the safe side)
mtp                   1/n
====================  ===============================================================================

A plan moves (layer, expert) pairs and named tensors to pinned host RAM; each rank then holds only its share of
what stays. A rank *fits* when its bytes plus the headroom asked for (KV cache, activations, CUDA graphs) are within
the usable memory per GPU (what the driver reports, times vLLM's gpu_memory_utilization if you use one).

KV bytes per token come from config.json. MLA (``kv_lora_rank`` present) caches ``kv_lora_rank + qk_rope_head_dim``
values per layer and token and every TP rank holds the whole cache (vLLM replicates it), so TP does not add KV room.
GQA caches ``2 * num_key_value_heads * head_dim`` values per layer; each rank holds ``max(1, kv_heads / n)`` heads.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

import numpy as np

from offload_lab.fit.classify import CATEGORIES, Classification, config_int, config_levels
from offload_lab.core.errors import InputError

GiB = 1 << 30
TPMode = Literal["shard", "replicate"]
DEFAULT_TP_MODES: dict[str, TPMode] = {
    "routed_expert": "shard", "shared_expert": "shard", "dense_mlp": "shard", "attention": "shard",
    "router": "replicate", "embedding": "shard", "lm_head": "shard", "engram": "shard", "norm": "replicate",
    "mtp": "shard", "other": "replicate",
}
# Attention tensors every rank holds whole: low-rank down-projections and norms (vLLM ReplicatedLinear / RMSNorm),
# and DeepSeek-V3.2's sparse-attention indexer.
REPLICATED_ATTENTION = re.compile(
    r"\.(?:q_a_proj|kv_a_proj_with_mqa|wq_a|wkv_a|indexer|weights_proj|wk|"
    r"q_a_layernorm|kv_a_layernorm|q_norm|k_norm|kv_norm)(?:\.|$)"
)
_GQA_KV = re.compile(r"\.(?:k_proj|v_proj)(?:\.|$)")
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "float8_e4m3fn": 1}


@dataclass(frozen=True)
class Parallelism:
    tp: int = 1
    ep: bool = False  # vLLM --enable-expert-parallel: routed experts placed whole over the tp ranks
    placement: Literal["linear", "round_robin"] = "linear"
    tp_modes: Mapping[str, TPMode] = field(default_factory=lambda: dict(DEFAULT_TP_MODES))

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise InputError(f"--tp must be at least 1, not {self.tp}")
        unknown = set(self.tp_modes) - set(CATEGORIES)
        if unknown:
            raise InputError(f"tp_modes names unknown categories {sorted(unknown)}; known: {', '.join(CATEGORIES)}")

    def expert_rank(self, expert: int, num_experts: int) -> int:
        if self.placement == "round_robin":
            return expert % self.tp
        return min(self.tp - 1, expert // math.ceil(num_experts / self.tp))


@dataclass(frozen=True)
class HostSet:
    """What a plan puts in host RAM: (layer, expert) pairs and whole named tensors."""

    experts: frozenset[tuple[int, int]] = frozenset()
    tensors: frozenset[str] = frozenset()


@dataclass
class RankMemory:
    rank: int
    device_bytes: dict[str, int]
    host_bytes: dict[str, int]

    @property
    def device_total(self) -> int:
        return sum(self.device_bytes.values())

    @property
    def host_total(self) -> int:
        return sum(self.host_bytes.values())


@dataclass
class MemoryReport:
    parallelism: Parallelism
    ranks: list[RankMemory]
    usable_bytes: int | None
    reserve_bytes: int
    kv: KVCache | None
    usable_gib: float | None = None
    reserve_gib: float = 0.0

    @property
    def per_gpu_bytes(self) -> int:
        """The fullest GPU: the one that decides whether the model loads."""
        return max(r.device_total for r in self.ranks)

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.usable_bytes is None else self.usable_bytes - self.per_gpu_bytes

    @property
    def fits(self) -> bool | None:
        h = self.headroom_bytes
        return None if h is None else h >= self.reserve_bytes

    @property
    def kv_tokens(self) -> int | None:
        """Tokens of KV cache that fit per GPU in the headroom left after the reserve."""
        h = self.headroom_bytes
        if h is None or self.kv is None or self.kv.per_gpu_bytes == 0:
            return None
        return max(0, (h - self.reserve_bytes) // self.kv.per_gpu_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tp": self.parallelism.tp,
            "ep": self.parallelism.ep,
            "usable_gib": self.usable_gib,
            "reserve_gib": self.reserve_gib,
            "per_gpu_gib": self.per_gpu_bytes / GiB,
            "headroom_gib": None if self.headroom_bytes is None else self.headroom_bytes / GiB,
            "fits": self.fits,
            "kv_bytes_per_token_per_gpu": self.kv.per_gpu_bytes if self.kv else None,
            "kv_tokens_in_headroom": self.kv_tokens,
            "host_gib_per_gpu": max(r.host_total for r in self.ranks) / GiB,
            "ranks": [
                {"rank": r.rank, "device_gib": r.device_total / GiB, "host_gib": r.host_total / GiB,
                 "device_bytes": r.device_bytes, "host_bytes": r.host_bytes}
                for r in self.ranks
            ],
        }


# ----------------------------------------------------------------------------------------------------------------
# KV cache


@dataclass(frozen=True)
class KVCache:
    kind: Literal["mla", "gqa", "mha"]
    layers: int
    values_per_token_per_layer: int  # one whole copy
    dtype_bytes: int
    per_gpu_bytes: int  # bytes per token on each GPU

    @property
    def total_bytes(self) -> int:
        """Bytes per token of one whole copy of the cache (all heads, all layers)."""
        return self.layers * self.values_per_token_per_layer * self.dtype_bytes


def kv_cache(config: Mapping[str, Any], tp: int = 1, dtype_bytes: int | None = None) -> KVCache:
    """KV bytes per token from config.json (see the module docstring); ``dtype_bytes`` defaults to torch_dtype's."""
    layers = config_int(config, "num_hidden_layers", "n_layers")
    if not layers:
        raise InputError("config.json lacks num_hidden_layers; cannot size the KV cache")
    if dtype_bytes is None:
        dtype = next((str(c.get("torch_dtype") or c.get("dtype")) for c in config_levels(config)
                      if c.get("torch_dtype") or c.get("dtype")), "bfloat16")
        dtype_bytes = _DTYPE_BYTES.get(dtype.removeprefix("torch."), 2)
    kv_lora = config_int(config, "kv_lora_rank")
    if kv_lora:
        rope = config_int(config, "qk_rope_head_dim") or 0
        values = kv_lora + rope
        return KVCache("mla", layers, values, dtype_bytes, layers * values * dtype_bytes)
    heads = config_int(config, "num_attention_heads", "n_heads")
    if not heads:
        raise InputError("config.json lacks num_attention_heads; cannot size the KV cache")
    kv_heads = config_int(config, "num_key_value_heads") or heads
    hidden = config_int(config, "hidden_size", "dim")
    head_dim = config_int(config, "head_dim") or (hidden // heads if hidden else None)
    if not head_dim:
        raise InputError("config.json lacks head_dim and hidden_size; cannot size the KV cache")
    per_rank_heads = max(1, math.ceil(kv_heads / tp))
    return KVCache("gqa" if kv_heads < heads else "mha", layers, 2 * kv_heads * head_dim, dtype_bytes,
                   layers * 2 * per_rank_heads * head_dim * dtype_bytes)


# ----------------------------------------------------------------------------------------------------------------
# Per-GPU bytes


@dataclass
class ExpertTable:
    """Per-(layer, expert) bytes held on each rank, as arrays: what plan generators and budget-fit work on."""

    keys: list[tuple[int, int]]  # sorted (layer, expert)
    bytes: np.ndarray  # [n] whole-expert bytes
    rank_bytes: np.ndarray  # [n, tp] bytes of each expert that sit on each rank
    index: dict[tuple[int, int], int]

    @property
    def layers(self) -> list[int]:
        return sorted({layer for layer, _ in self.keys})


class MemoryModel:
    """Per-rank bytes of a classified checkpoint under one parallelism; cheap to re-evaluate for many plans."""

    def __init__(self, cls: Classification, par: Parallelism, config: Mapping[str, Any] | None = None):
        self.cls = cls
        self.par = par
        self.config = config or {}
        n = par.tp
        kv_heads = config_int(self.config, "num_key_value_heads")
        eb = cls.expert_bytes()
        keys = sorted(eb)
        self.experts = ExpertTable(keys=keys, bytes=np.array([eb[k] for k in keys], dtype=np.int64),
                                   rank_bytes=np.zeros((len(keys), n), dtype=np.float64),
                                   index={k: i for i, k in enumerate(keys)})
        per_layer = {}
        for layer, e in keys:
            per_layer[layer] = max(per_layer.get(layer, 0), e + 1)
        for i, (layer, e) in enumerate(keys):
            if par.ep:
                self.experts.rank_bytes[i, par.expert_rank(e, per_layer[layer])] = eb[(layer, e)]
            elif par.tp_modes.get("routed_expert", "shard") == "shard":
                self.experts.rank_bytes[i, :] = eb[(layer, e)] / n
            else:
                self.experts.rank_bytes[i, :] = eb[(layer, e)]
        # Everything that is not a routed expert: bytes per rank by category, and per named tensor for host moves.
        self.base = {c: np.zeros(n) for c in CATEGORIES}
        self.tensor_rank_bytes: dict[str, tuple[str, np.ndarray]] = {}
        for it in cls.items:
            if it.category == "routed_expert":
                continue
            share = self._share(it.name, it.category, kv_heads)
            vec = np.full(n, it.nbytes * share)
            self.base[it.category] += vec
            self.tensor_rank_bytes[it.name] = (it.category, vec)

    def _share(self, name: str, category: str, kv_heads: int | None) -> float:
        n = self.par.tp
        mode = self.par.tp_modes.get(category, DEFAULT_TP_MODES.get(category, "replicate"))
        if mode == "replicate" or n == 1:
            return 1.0
        if category == "attention":
            if REPLICATED_ATTENTION.search(name):
                return 1.0
            if kv_heads and _GQA_KV.search(name):
                return max(1, math.ceil(kv_heads / n)) / kv_heads
        return 1.0 / n

    def routed_rank_bytes(self, host_mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(device, host) routed-expert bytes per rank for a boolean host mask over ``experts.keys``."""
        rb = self.experts.rank_bytes
        if host_mask is None or not host_mask.any():
            return rb.sum(axis=0), np.zeros(self.par.tp)
        host = rb[host_mask].sum(axis=0)
        return rb.sum(axis=0) - host, host

    def host_mask(self, host: HostSet) -> np.ndarray:
        mask = np.zeros(len(self.experts.keys), dtype=bool)
        for key in host.experts:
            i = self.experts.index.get(key)
            if i is None:
                raise InputError(f"host expert (layer {key[0]}, expert {key[1]}) is not in the checkpoint")
            mask[i] = True
        return mask

    def report(self, host: HostSet | None = None, usable_gib: float | None = None, reserve_gib: float = 0.0,
               kv_dtype_bytes: int | None = None) -> MemoryReport:
        if usable_gib is not None and not (math.isfinite(usable_gib) and usable_gib > 0):
            raise InputError(f"--usable-gib {usable_gib}: give the usable memory per GPU, a finite number above 0")
        if not (math.isfinite(reserve_gib) and reserve_gib >= 0):
            raise InputError(f"--reserve-gib {reserve_gib}: give the headroom to keep free, a finite number, 0 or more")
        host = host or HostSet()
        n = self.par.tp
        device = {c: self.base[c].copy() for c in CATEGORIES}
        on_host = {c: np.zeros(n) for c in CATEGORIES}
        for name in host.tensors:
            if name not in self.tensor_rank_bytes:
                raise InputError(f"host tensor {name} is not in the checkpoint, or is a routed expert's tensor "
                                 "(list experts as (layer, expert) pairs)")
            cat, vec = self.tensor_rank_bytes[name]
            device[cat] -= vec
            on_host[cat] += vec
        dev, hst = self.routed_rank_bytes(self.host_mask(host))
        device["routed_expert"] = dev
        on_host["routed_expert"] = hst
        ranks = [
            RankMemory(r, {c: int(round(device[c][r])) for c in CATEGORIES},
                       {c: int(round(on_host[c][r])) for c in CATEGORIES if on_host[c][r]})
            for r in range(n)
        ]
        kv = None
        if self.config:
            try:
                kv = kv_cache(self.config, n, kv_dtype_bytes)
            except InputError:
                kv = None
        return MemoryReport(self.par, ranks, None if usable_gib is None else int(round(usable_gib * GiB)),
                            int(round(reserve_gib * GiB)), kv, usable_gib, reserve_gib)


def per_gpu(cls: Classification, par: Parallelism, host: HostSet | None = None, usable_gib: float | None = None,
            reserve_gib: float = 0.0, config: Mapping[str, Any] | None = None) -> MemoryReport:
    """One-shot :meth:`MemoryModel.report`."""
    return MemoryModel(cls, par, config).report(host, usable_gib, reserve_gib)


def per_gpu_pipeline(cls: Classification, par: Parallelism, pp: int, partition: list[int] | None = None,
                     host: HostSet | None = None, usable_gib: float | None = None, reserve_gib: float = 0.0,
                     config: Mapping[str, Any] | None = None) -> list[MemoryReport]:
    """Per-GPU bytes under pipeline parallelism: one report per stage, each over its ``par.tp`` ranks (numbered
    stage x tp + rank, as vLLM's). Stage s holds the decoder layers vLLM gives it (``pp_layer_ranges``: equal shares,
    the remainder to the stages before the last; ``partition`` is ``VLLM_PP_LAYER_PARTITION``) at their TP shares.
    Tensors without a layer: the embedding on the first stage; lm_head, the final norm and the MTP layers (index >=
    num_hidden_layers) on the last (an assumption to check on the real model); anything else on every stage (the
    safe side). Each stage's KV bytes per token are its own layers' (pipeline stages add KV room; MLA's TP does
    not), so the model fits when every stage fits, and its KV tokens are the least of the stages'."""
    import dataclasses

    from offload_lab.server.multinode import pp_layer_ranges

    layers = cls.num_hidden_layers or config_int(config or {}, "num_hidden_layers", "n_layers")
    if not layers:
        raise InputError("the checkpoint's config.json lacks num_hidden_layers; cannot split it into pipeline stages")
    if pp == 1:
        return [per_gpu(cls, par, host, usable_gib, reserve_gib, config)]
    ranges = pp_layer_ranges(layers, pp, partition)
    first, last = {"embedding"}, {"lm_head", "norm", "mtp"}

    def stage_of(it: Any) -> int | None:  # None: every stage
        if it.category == "mtp" or (it.layer is not None and it.layer >= layers):
            return pp - 1
        if it.layer is not None:
            return next(s for s, r in enumerate(ranges) if it.layer in r)
        return 0 if it.category in first else pp - 1 if it.category in last else None

    reports = []
    for s, r in enumerate(ranges):
        part = dataclasses.replace(cls, items=[it for it in cls.items if stage_of(it) in (s, None)])
        stage_host = None
        if host is not None:
            names = {it.name for it in part.items}
            stage_host = HostSet(frozenset((la, e) for la, e in host.experts if la in r),
                                 frozenset(n for n in host.tensors if n in names))
        rep = MemoryModel(part, par, config).report(stage_host, usable_gib, reserve_gib)
        for rank in rep.ranks:
            rank.rank += s * par.tp
        if rep.kv is not None:
            rep.kv = dataclasses.replace(rep.kv, layers=len(r),
                                         per_gpu_bytes=rep.kv.per_gpu_bytes // rep.kv.layers * len(r))
        reports.append(rep)
    return reports


def parse_tp_modes(items: Iterable[str]) -> dict[str, TPMode]:
    """``["engram=replicate", ...]`` from the command line, over the defaults."""
    modes = dict(DEFAULT_TP_MODES)
    for item in items:
        cat, _, mode = item.partition("=")
        if cat not in CATEGORIES or mode not in ("shard", "replicate"):
            raise InputError(f"--tp-mode {item!r}: expected CATEGORY=shard|replicate with CATEGORY one of "
                             f"{', '.join(CATEGORIES)}")
        modes[cat] = mode  # type: ignore[assignment]
    return modes


# The calculator lives in its own module; these names stay importable from here.
from offload_lab.fit.memory_math import MemoryMathInputs, memory_math, memory_math_inputs, parse_count  # noqa: E402,F401
