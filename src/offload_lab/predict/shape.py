"""What the physics needs of a model: bytes and FLOPs per token, from a transformers ``config.json``.

Parameter counts follow the layer shapes the config names (DeepSeek MLA or grouped-query attention, routed and
shared experts, dense MLP layers, the router and the output head). Bits per weight: ``expert_bits`` / ``dense_bits``
where the config carries them (the project's synthetic checkpoint specs do), else the ``quantization_config``'s
``bits``, else the config's dtype. KV bytes per token come from :func:`offload_lab.fit.memory.kv_cache`.
Sparse attention (DeepSeek-V3.2's ``index_topk``): each query reads at most ``index_topk`` cached tokens, and the
indexer reads ``index_head_dim`` one-byte values of every cached token.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from offload_lab.core.errors import InputError
from offload_lab.fit.classify import config_int, config_levels
from offload_lab.fit.memory import kv_cache
from offload_lab.fit.predict import exl3_expert_bytes


@dataclass(frozen=True)
class Shape:
    name: str
    moe_layers: int
    layers: int
    experts: int  # routed, per MoE layer
    top_k: int
    expert_bytes: float  # one whole routed expert
    expert_params: float
    dense_bytes: float  # read once per step: attention, shared experts, dense MLPs, routers, lm_head (all GPUs)
    dense_params: float  # per token, for FLOPs (attention projections, shared experts, dense MLPs, lm_head)
    kv_bytes_per_token: float  # one whole copy (all layers)
    kv_replicated: bool  # MLA: every tensor-parallel rank holds the whole cache
    attn_flops_per_pair: float  # FLOPs of one (query, key) pair summed over layers, prefill
    index_topk: int | None  # sparse attention: keys a query reads
    index_bytes_per_token: float  # indexer keys read per cached token (all layers)
    index_flops_per_pair: float
    mtp_layers: int
    max_context: int | None
    source: str

    @property
    def active_params(self) -> float:
        return self.dense_params + self.moe_layers * self.top_k * self.expert_params

    @property
    def routed_bytes(self) -> float:
        return self.moe_layers * self.experts * self.expert_bytes

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "active_params": self.active_params, "routed_bytes": self.routed_bytes}


def _get(cfg: Mapping[str, Any], *keys: str) -> Any:
    for level in config_levels(cfg):
        for k in keys:
            if level.get(k) is not None:
                return level[k]
    return None


def _bits(cfg: Mapping[str, Any], key: str) -> float:
    v = _get(cfg, key)
    if isinstance(v, (int, float)):
        return float(v)
    q = _get(cfg, "quantization_config")
    if isinstance(q, Mapping) and isinstance(q.get("bits"), (int, float)):
        return float(q["bits"])
    if isinstance(q, Mapping) and str(q.get("quant_method", "")).lower() == "fp8":
        return 8.0
    dtype = str(_get(cfg, "torch_dtype", "dtype") or "bfloat16").removeprefix("torch.")
    return {"float32": 32.0, "float": 32.0}.get(dtype, 16.0)


def shape_from_config(cfg: Mapping[str, Any], name: str = "model", source: str = "config.json") -> Shape:
    """The sizes of a MoE (or dense) model from its config; a clear error naming the missing key."""
    def need(*keys: str) -> int:
        v = config_int(cfg, *keys)
        if not v:
            raise InputError(f"{source}: lacks {' / '.join(keys)}; cannot size the model (give a transformers "
                             "config.json of a MoE model)")
        return v

    hidden = need("hidden_size", "dim")
    layers = need("num_hidden_layers", "n_layers")
    heads = need("num_attention_heads", "n_heads")
    vocab = config_int(cfg, "vocab_size") or 0
    experts = config_int(cfg, "n_routed_experts", "num_experts", "num_local_experts") or 0
    top_k = config_int(cfg, "num_experts_per_tok", "moe_topk", "top_k") or 0
    moe_inter = config_int(cfg, "moe_intermediate_size", "expert_intermediate_size") or 0
    inter = config_int(cfg, "intermediate_size") or moe_inter
    first_dense = config_int(cfg, "first_k_dense_replace") or 0
    if experts and not (top_k and moe_inter):
        raise InputError(f"{source}: names {experts} experts but lacks num_experts_per_tok or moe_intermediate_size")
    step = config_int(cfg, "decoder_sparse_step") or 1
    mlp_only = _get(cfg, "mlp_only_layers") or []
    moe_layers = 0
    if experts:
        moe_layers = sum(1 for i in range(first_dense, layers) if (i + 1) % step == 0 and i not in mlp_only)
    dense_mlp_layers = layers - moe_layers
    shared = config_int(cfg, "n_shared_experts") or 0
    shared_inter = config_int(cfg, "shared_expert_intermediate_size") or (shared * moe_inter)

    # attention projections per layer
    kv_lora = config_int(cfg, "kv_lora_rank")
    if kv_lora:
        q_lora = config_int(cfg, "q_lora_rank") or 0
        nope = config_int(cfg, "qk_nope_head_dim") or 128
        rope = config_int(cfg, "qk_rope_head_dim") or 64
        v_dim = config_int(cfg, "v_head_dim") or 128
        q = (hidden * q_lora + q_lora * heads * (nope + rope)) if q_lora else hidden * heads * (nope + rope)
        attn = q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
        pair = 2.0 * heads * ((nope + rope) + v_dim)
    else:
        kv_heads = config_int(cfg, "num_key_value_heads") or heads
        hd = config_int(cfg, "head_dim") or hidden // heads
        attn = hidden * heads * hd * 2 + 2 * hidden * kv_heads * hd
        pair = 2.0 * heads * hd * 2
    expert_bits = _bits(cfg, "expert_bits")
    dense_bits = _bits(cfg, "dense_bits")
    expert_params = 3.0 * hidden * moe_inter
    if str(_get(cfg, "expert_format") or "") == "exl3":
        expert_bytes = exl3_expert_bytes(hidden, moe_inter, expert_bits)
    else:
        expert_bytes = expert_params * expert_bits / 8
    dense_params = (layers * attn + moe_layers * 3.0 * hidden * shared_inter
                    + dense_mlp_layers * 3.0 * hidden * inter + vocab * hidden)
    router_bytes = moe_layers * hidden * experts * 4.0  # fp32 gates
    kv = kv_cache(cfg, tp=1)
    topk = config_int(cfg, "index_topk")
    idx_dim = config_int(cfg, "index_head_dim") or 128
    idx_heads = config_int(cfg, "index_n_heads") or 64
    return Shape(
        name=name, moe_layers=moe_layers, layers=layers, experts=experts, top_k=top_k,
        expert_bytes=float(expert_bytes), expert_params=expert_params,
        dense_bytes=dense_params * dense_bits / 8 + router_bytes, dense_params=dense_params,
        kv_bytes_per_token=float(kv.total_bytes), kv_replicated=kv.kind == "mla",
        attn_flops_per_pair=pair * layers, index_topk=topk,
        index_bytes_per_token=float(layers * (idx_dim + 4)) if topk else 0.0,
        index_flops_per_pair=2.0 * idx_heads * idx_dim * layers if topk else 0.0,
        mtp_layers=config_int(cfg, "num_nextn_predict_layers") or 0,
        max_context=config_int(cfg, "max_position_embeddings"), source=source)


def read_config(path: Path | str) -> dict[str, Any]:
    """A config.json (or a directory holding one, or a YAML spec with the same keys) as a mapping."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise InputError(f"model config {path} does not exist; give a config.json (or the model directory)")
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        if p.suffix in (".yaml", ".yml"):
            import yaml
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (ValueError, Exception) as e:  # yaml.YAMLError and json errors alike: name the file
        raise InputError(f"model config {p}: not readable as {'YAML' if p.suffix in ('.yaml', '.yml') else 'JSON'}"
                         f" ({type(e).__name__}); give a transformers config.json") from e
    if not isinstance(data, dict):
        raise InputError(f"model config {p}: expected a JSON object of config keys")
    return data
