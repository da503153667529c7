"""Header-only synthetic checkpoints at full scale: the audit, the memory model and the plan generators run against a
763B-parameter layout here, without a single real weight.

A :class:`SyntheticSpec` (YAML, ``configs/checkpoints/*.yaml``) names the layout: naming scheme, layers, experts,
dimensions, how experts and the other linear layers are stored (BF16, FP8 with 128x128 block scales, or EXL3
trellis/suh/svh at a given bit width), and any Engram lookup tables. :func:`write_checkpoint` writes real safetensors
files whose headers are exact and whose data is a hole: each shard is ``8 + header`` bytes written and then extended
with ``truncate`` to its full size, so the file system stores it sparse (a 300 GiB checkpoint takes a few MB of disk)
and reads of the data return zeros. Shards come with ``model.safetensors.index.json`` and a ``config.json`` marked
``offload_lab_synthetic`` so that no one mistakes it for a model. A Hugging Face ``config.json`` needs no spec:
:func:`offload_lab.fit.hfmodel.write_synthetic` writes transformers' own model of it through :func:`write_tensors`.

Synthetic layouts are illustrations: dimensions that the model's publisher has not stated are assumptions, marked as
such in the spec file, and no number derived from them is the real model's.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from offload_lab.fit.checkpoint import CONFIG_NAME, DTYPE_BITS, INDEX_NAME
from offload_lab.core import inputs
from offload_lab.core.errors import InputError

Format = Literal["bf16", "f16", "f32", "fp8", "exl3"]
_FLOAT_DTYPES = {"bf16": "BF16", "f16": "F16", "f32": "F32"}


class EngramTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="tensor name, e.g. engram.0.weight")
    rows: int = Field(gt=0)
    dim: int = Field(gt=0)
    bits: Literal[4, 8, 16] = 8


class SyntheticSpec(BaseModel):
    """A checkpoint layout. Field names follow Hugging Face's config.json where one exists."""

    model_config = ConfigDict(extra="forbid")

    name: str
    naming: Literal["deepseek_v4", "deepseek_v3", "qwen3_moe", "qwen2_moe"]
    num_hidden_layers: int = Field(ge=1)
    first_k_dense_replace: int = Field(0, ge=0, description="leading dense (non-MoE) layers")
    num_hash_layers: int = Field(0, ge=0, description="leading MoE layers routed by token id (DeepSeek-V4)")
    num_experts: int = Field(ge=1)
    num_experts_per_tok: int = Field(ge=1)
    n_shared_experts: int = Field(0, ge=0)
    hidden_size: int = Field(gt=0)
    moe_intermediate_size: int = Field(gt=0)
    intermediate_size: int = Field(0, ge=0, description="dense layers' MLP width")
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    attention: Literal["mla", "gqa"]
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    expert_format: Format = "bf16"
    expert_bits: float | None = Field(None, description="EXL3 bits per weight of routed experts")
    dense_format: Format = "bf16"
    dense_bits: float | None = Field(None, description="EXL3 bits of the other linear layers")
    norm_dtype: Literal["bf16", "f16", "f32"] = "bf16"
    embedding_dtype: Literal["bf16", "f16", "f32"] = "bf16"
    router_dtype: Literal["bf16", "f16", "f32"] = "f32"
    engram_tables: list[EngramTable] = Field(default_factory=list)
    shards: int = Field(1, ge=1, le=100_000)
    max_position_embeddings: int = 163840
    torch_dtype: str = "bfloat16"

    @model_validator(mode="after")
    def _consistent(self) -> SyntheticSpec:
        if self.attention == "mla":
            for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, f) is None:
                    raise ValueError(f"{f}: required for MLA attention")
        else:
            for f in ("num_key_value_heads", "head_dim"):
                if getattr(self, f) is None:
                    raise ValueError(f"{f}: required for GQA attention")
        for fmt, bits, what in ((self.expert_format, self.expert_bits, "expert_bits"),
                                (self.dense_format, self.dense_bits, "dense_bits")):
            if fmt == "exl3":
                if bits is None or not 1 <= bits <= 8:
                    raise ValueError(f"{what}: EXL3 needs a bit width between 1 and 8")
                if self.hidden_size % 16 or self.moe_intermediate_size % 16:
                    raise ValueError("hidden_size: EXL3 tiles are 16x16, so dimensions must be multiples of 16")
        if self.first_k_dense_replace and not self.intermediate_size:
            raise ValueError("intermediate_size: dense layers need an MLP width")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError("num_experts_per_tok: more than num_experts")
        return self


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.ceil(math.prod(self.shape) * DTYPE_BITS[self.dtype] / 8)


def load_spec(path: Path | str) -> SyntheticSpec:
    path = Path(path)
    raw = inputs.read_yaml(path, "synthetic checkpoint spec")
    try:
        return SyntheticSpec.model_validate(raw)
    except ValidationError as e:
        details = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'spec'}: {err['msg']}" for err in e.errors())
        raise InputError(f"synthetic checkpoint spec {path}: {details}") from e


# ----------------------------------------------------------------------------------------------------------------
# Tensor lists


def _linear(name: str, out_dim: int, in_dim: int, fmt: Format, bits: float | None) -> Iterator[TensorSpec]:
    """The tensors one linear layer of shape [out, in] is stored as."""
    if fmt in _FLOAT_DTYPES:
        yield TensorSpec(f"{name}.weight", _FLOAT_DTYPES[fmt], (out_dim, in_dim))
    elif fmt == "fp8":
        # DeepSeek's FP8 checkpoints: e4m3 weights with one fp32 inverse scale per 128x128 block.
        yield TensorSpec(f"{name}.weight", "F8_E4M3", (out_dim, in_dim))
        yield TensorSpec(f"{name}.weight_scale_inv", "F32", (math.ceil(out_dim / 128), math.ceil(in_dim / 128)))
    else:
        # exllamav3 (modules/quant/exl3.py): int16 trellis [in/16, out/16, 16*K] plus fp16 input/output sign vectors.
        k = int(round(bits or 0))
        yield TensorSpec(f"{name}.trellis", "I16", (math.ceil(in_dim / 16), math.ceil(out_dim / 16), 16 * k))
        yield TensorSpec(f"{name}.suh", "F16", (in_dim,))
        yield TensorSpec(f"{name}.svh", "F16", (out_dim,))


def _names(spec: SyntheticSpec) -> dict[str, str]:
    if spec.naming == "deepseek_v4":
        return {"layer": "layers.{n}", "attn": "attn", "mlp": "ffn", "embed": "embed.weight", "head": "head.weight",
                "norm": "norm.weight", "in_norm": "attn_norm", "post_norm": "ffn_norm",
                "gate": "w1", "up": "w3", "down": "w2", "shared": "shared_experts"}
    return {"layer": "model.layers.{n}", "attn": "self_attn", "mlp": "mlp", "embed": "model.embed_tokens.weight",
            "head": "lm_head.weight", "norm": "model.norm.weight", "in_norm": "input_layernorm",
            "post_norm": "post_attention_layernorm", "gate": "gate_proj", "up": "up_proj", "down": "down_proj",
            "shared": "shared_expert" if spec.naming == "qwen2_moe" else "shared_experts"}


def _attention(spec: SyntheticSpec, p: str, nm: dict[str, str]) -> Iterator[TensorSpec]:
    h, heads, fmt, bits = spec.hidden_size, spec.num_attention_heads, spec.dense_format, spec.dense_bits
    norm = _FLOAT_DTYPES[spec.norm_dtype]
    a = f"{p}.{nm['attn']}"
    if spec.attention == "gqa":
        hd, kv = spec.head_dim or 0, spec.num_key_value_heads or 0
        yield from _linear(f"{a}.q_proj", heads * hd, h, fmt, bits)
        yield from _linear(f"{a}.k_proj", kv * hd, h, fmt, bits)
        yield from _linear(f"{a}.v_proj", kv * hd, h, fmt, bits)
        yield from _linear(f"{a}.o_proj", h, heads * hd, fmt, bits)
        if spec.naming == "qwen3_moe":
            yield TensorSpec(f"{a}.q_norm.weight", norm, (hd,))
            yield TensorSpec(f"{a}.k_norm.weight", norm, (hd,))
        return
    nope, rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0
    v, kvr = spec.v_head_dim or 0, spec.kv_lora_rank or 0
    native = spec.naming == "deepseek_v4"
    if spec.q_lora_rank:
        yield from _linear(f"{a}.{'wq_a' if native else 'q_a_proj'}", spec.q_lora_rank, h, fmt, bits)
        yield TensorSpec(f"{a}.{'q_norm' if native else 'q_a_layernorm'}.weight", norm, (spec.q_lora_rank,))
        yield from _linear(f"{a}.{'wq_b' if native else 'q_b_proj'}", heads * (nope + rope), spec.q_lora_rank, fmt,
                           bits)
    else:
        yield from _linear(f"{a}.{'wq' if native else 'q_proj'}", heads * (nope + rope), h, fmt, bits)
    yield from _linear(f"{a}.{'wkv_a' if native else 'kv_a_proj_with_mqa'}", kvr + rope, h, fmt, bits)
    yield TensorSpec(f"{a}.{'kv_norm' if native else 'kv_a_layernorm'}.weight", norm, (kvr,))
    yield from _linear(f"{a}.{'wkv_b' if native else 'kv_b_proj'}", heads * (nope + v), kvr, fmt, bits)
    yield from _linear(f"{a}.{'wo' if native else 'o_proj'}", h, heads * v, fmt, bits)


def _mlp(prefix: str, nm: dict[str, str], h: int, inter: int, fmt: Format, bits: float | None) -> Iterator[TensorSpec]:
    yield from _linear(f"{prefix}.{nm['gate']}", inter, h, fmt, bits)
    yield from _linear(f"{prefix}.{nm['up']}", inter, h, fmt, bits)
    yield from _linear(f"{prefix}.{nm['down']}", h, inter, fmt, bits)


def tensor_specs(spec: SyntheticSpec) -> list[TensorSpec]:
    """Every tensor of the layout, in checkpoint order (embedding, layers, final norm, head, Engram tables)."""
    nm = _names(spec)
    h = spec.hidden_size
    norm = _FLOAT_DTYPES[spec.norm_dtype]
    out: list[TensorSpec] = [TensorSpec(nm["embed"], _FLOAT_DTYPES[spec.embedding_dtype], (spec.vocab_size, h))]
    for n in range(spec.num_hidden_layers):
        p = nm["layer"].format(n=n)
        out.append(TensorSpec(f"{p}.{nm['in_norm']}.weight", norm, (h,)))
        out.extend(_attention(spec, p, nm))
        out.append(TensorSpec(f"{p}.{nm['post_norm']}.weight", norm, (h,)))
        mlp = f"{p}.{nm['mlp']}"
        if n < spec.first_k_dense_replace:
            out.extend(_mlp(mlp, nm, h, spec.intermediate_size, spec.dense_format, spec.dense_bits))
            continue
        moe_index = n - spec.first_k_dense_replace
        router = _FLOAT_DTYPES[spec.router_dtype]
        out.append(TensorSpec(f"{mlp}.gate.weight", router, (spec.num_experts, h)))
        if spec.naming == "deepseek_v4" and moe_index < spec.num_hash_layers:
            out.append(TensorSpec(f"{mlp}.gate.tid2eid", "I32", (spec.vocab_size, spec.num_experts_per_tok)))
        elif spec.naming == "deepseek_v4":
            out.append(TensorSpec(f"{mlp}.gate.bias", router, (spec.num_experts,)))
        elif spec.naming == "deepseek_v3":
            out.append(TensorSpec(f"{mlp}.gate.e_score_correction_bias", router, (spec.num_experts,)))
        if spec.n_shared_experts:
            shared = f"{mlp}.{nm['shared']}"
            out.extend(_mlp(shared, nm, h, spec.moe_intermediate_size * spec.n_shared_experts,
                            spec.dense_format, spec.dense_bits))
            if spec.naming == "qwen2_moe":
                out.append(TensorSpec(f"{mlp}.shared_expert_gate.weight", _FLOAT_DTYPES[spec.norm_dtype], (1, h)))
        for e in range(spec.num_experts):
            out.extend(_mlp(f"{mlp}.experts.{e}", nm, h, spec.moe_intermediate_size, spec.expert_format,
                            spec.expert_bits))
    out.append(TensorSpec(nm["norm"], norm, (h,)))
    if not spec.tie_word_embeddings:
        out.append(TensorSpec(nm["head"], _FLOAT_DTYPES[spec.embedding_dtype], (spec.vocab_size, h)))
    for table in spec.engram_tables:
        # Packed below 8 bits: two int4 values per byte, as the study's int4 Engram tables.
        out.append(TensorSpec(table.name, "U8" if table.bits <= 8 else "BF16",
                              (table.rows, math.ceil(table.dim * min(table.bits, 8) / 8) if table.bits <= 8
                               else table.dim)))
    return out


def parameter_count(spec: SyntheticSpec) -> int:
    """Parameters of the layout counted as the unquantized model would (out x in per linear layer)."""
    total = 0
    for t in tensor_specs(spec):
        if t.name.endswith((".weight_scale_inv", ".suh", ".svh")):
            continue
        if t.name.endswith(".trellis"):
            total += t.shape[0] * 16 * t.shape[1] * 16
        elif any(t.name == e.name for e in spec.engram_tables):
            table = next(e for e in spec.engram_tables if e.name == t.name)
            total += table.rows * table.dim
        else:
            total += math.prod(t.shape)
    return total


# ----------------------------------------------------------------------------------------------------------------
# Writing


def assign_shards(tensors: list[TensorSpec], shards: int) -> list[list[TensorSpec]]:
    """Split tensors, in order, into about ``shards`` runs of about equal bytes (a tensor is never split).

    A tensor larger than an even share (an Engram table) gets a shard of its own and the rest share the remaining
    shards, so a few huge tensors do not swallow the shard count.
    """
    total = sum(t.nbytes for t in tensors) or 1
    big = {i for i, t in enumerate(tensors) if t.nbytes >= total / shards}
    small_shards = max(1, shards - len(big))
    target = max(1.0, (total - sum(tensors[i].nbytes for i in big)) / small_shards)
    out: list[list[TensorSpec]] = []
    current: list[TensorSpec] = []
    small_cum, started = 0, 0
    for i, t in enumerate(tensors):
        if i in big:
            if current:
                out.append(current)
                current = []
            out.append([t])
            continue
        if not current:
            started += 1
        elif small_cum + t.nbytes / 2 > target * started and started < small_shards:
            out.append(current)
            current = []
            started += 1
        current.append(t)
        small_cum += t.nbytes
    if current:
        out.append(current)
    return out


def _header_bytes(tensors: list[TensorSpec]) -> tuple[bytes, int]:
    header: dict[str, Any] = {"__metadata__": {"format": "pt", "offload_lab_synthetic": "header-only"}}
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes with spaces
    return raw, offset


def write_sparse_safetensors(path: Path, tensors: list[TensorSpec]) -> int:
    """Write one file with an exact header and a data section that is a hole; returns its apparent size."""
    raw, data = _header_bytes(tensors)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        f.truncate(8 + len(raw) + data)
    return 8 + len(raw) + data


def hf_config(spec: SyntheticSpec) -> dict[str, Any]:
    """A config.json for the layout, with the keys the memory model reads (and a loud synthetic marker)."""
    cfg: dict[str, Any] = {
        "offload_lab_synthetic": {"spec": spec.name, "note": "header-only synthetic checkpoint; no weights"},
        "hidden_size": spec.hidden_size, "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads, "vocab_size": spec.vocab_size,
        "moe_intermediate_size": spec.moe_intermediate_size, "num_experts_per_tok": spec.num_experts_per_tok,
        "tie_word_embeddings": spec.tie_word_embeddings, "torch_dtype": spec.torch_dtype,
        "max_position_embeddings": spec.max_position_embeddings,
    }
    if spec.naming.startswith("qwen"):
        cfg.update({"model_type": spec.naming, "num_experts": spec.num_experts,
                    "num_key_value_heads": spec.num_key_value_heads, "head_dim": spec.head_dim,
                    "architectures": ["Qwen3MoeForCausalLM" if spec.naming == "qwen3_moe" else "Qwen2MoeForCausalLM"]})
    else:
        cfg.update({
            "model_type": spec.naming, "n_routed_experts": spec.num_experts, "n_shared_experts": spec.n_shared_experts,
            "first_k_dense_replace": spec.first_k_dense_replace, "num_hash_layers": spec.num_hash_layers,
            "intermediate_size": spec.intermediate_size,
            "q_lora_rank": spec.q_lora_rank, "kv_lora_rank": spec.kv_lora_rank,
            "qk_nope_head_dim": spec.qk_nope_head_dim, "qk_rope_head_dim": spec.qk_rope_head_dim,
            "v_head_dim": spec.v_head_dim,
        })
    if spec.expert_format == "exl3":
        cfg["quantization_config"] = {"quant_method": "exl3", "bits": spec.expert_bits,
                                      "head_bits": spec.dense_bits}
    return cfg


def write_checkpoint(spec: SyntheticSpec, out_dir: Path | str) -> dict[str, Any]:
    """Write the sparse shards, the index and config.json into ``out_dir`` (which must be empty or absent)."""
    return write_tensors(tensor_specs(spec), hf_config(spec), out_dir, spec.shards, spec.name)


def write_tensors(tensors: list[TensorSpec], config: Mapping[str, Any], out_dir: Path | str, shards: int,
                  name: str) -> dict[str, Any]:
    """Sparse shards of ``tensors``, their index and ``config`` as config.json, into a new or empty ``out_dir``."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: is a file; give a new or empty directory")
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} is not empty; write a synthetic checkpoint into a new directory")
    out.mkdir(parents=True, exist_ok=True)
    groups = assign_shards(tensors, shards)
    weight_map: dict[str, str] = {}
    apparent = 0
    for i, group in enumerate(groups, 1):
        name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        apparent += write_sparse_safetensors(out / name, group)
        weight_map.update({t.name: name for t in group})
    total = sum(t.nbytes for g in groups for t in g)
    index = {"metadata": {"total_size": total, "offload_lab_synthetic": name}, "weight_map": weight_map}
    (out / INDEX_NAME).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (out / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {"dir": str(out), "shards": len(groups), "tensors": len(weight_map), "data_bytes": total,
            "apparent_bytes": apparent, "disk_bytes": disk_usage(out)}


def disk_usage(path: Path) -> int:
    """Bytes the file system actually allocated under ``path`` (sparse holes cost nothing)."""
    return sum(os.stat(p).st_blocks * 512 for p in Path(path).rglob("*") if p.is_file())
