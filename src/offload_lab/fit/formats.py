"""Bytes of a model's tensors in the formats people serve it in, per tensor category.

A format applies to the linear weights (2D, or 3D fused experts) of the categories it is given for; vectors (norms,
biases) and the router stay at the model's dtype, as llama.cpp (``tensor_allows_quantization``: 1D tensors and
``ffn_gate_inp`` are never quantized) and vLLM's FP8/AWQ/GPTQ loaders keep them. ``in`` is a weight's last dimension
(its input features), ``out`` the one before it; a fused expert tensor is ``E`` such matrices.

==================  =========================================================================================
format              bytes of one [out, in] weight
==================  =========================================================================================
bf16, fp16, fp32    out x in x 2 (4)
fp8                 out x in (e4m3) + ceil(out/128) x ceil(in/128) x 4: one fp32 scale per 128x128 block
                    (DeepSeek-V3's ``weight_block_size: [128, 128]``, ``weight_scale_inv``)
mxfp4               llama.cpp's MXFP4 block: 32 weights in 17 bytes (4.25 bits; gguf-py ``GGML_QUANT_SIZES``), the
                    OCP MX layout gpt-oss ships its experts in (4-bit values, one E8M0 scale per 32)
exl3:B              out x in x B / 8 of trellis + (in + out) x 2 of fp16 sign vectors (``suh``, ``svh``), any B
awq:G, gptq:G       int4 AWQ/GPTQ, group size G (default 128): out x in / 2 + (in / G) x out x 2 (fp16 scales)
                    + (in / G) x out / 2 (4-bit zero points)
gguf:TYPE           a GGML type (Q4_0, Q8_0, Q4_K, Q6_K, IQ4_XS, ...): its block size and bytes per block from
                    gguf-py's ``GGML_QUANT_SIZES`` (llama.cpp's own table)
gguf:Q4_K_M, ...    a llama.cpp file type: the per-tensor choices of ``llama_tensor_get_type`` (see
                    :func:`gguf_recipe_type`), each type's bytes as above
==================  =========================================================================================
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from offload_lab.core.errors import InputError

FLOAT_BYTES = {"bf16": 2, "fp16": 2, "f16": 2, "fp32": 4, "f32": 4}
FP8_BLOCK = 128
DEFAULT_GROUP = 128
# llama.cpp file types whose per-tensor mix gguf_recipe_type knows, with their default (most tensors') type.
RECIPES = {"Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K", "Q4_K_S": "Q4_K", "Q6_K": "Q6_K", "Q8_0": "Q8_0",
           "MXFP4_MOE": "MXFP4"}
FORMAT_HELP = "bf16, fp16, fp32, fp8, mxfp4, exl3:BITS, awq[:GROUP], gptq[:GROUP], gguf:TYPE (Q4_K, Q8_0...) or " \
              "gguf:Q4_K_M (and Q5_K_M, Q4_K_S, Q6_K, Q8_0, MXFP4_MOE)"


@dataclass(frozen=True)
class Format:
    kind: str  # float | fp8 | mxfp4 | exl3 | int4 | gguf | recipe
    name: str
    bits: float | None = None  # exl3
    group: int | None = None  # awq/gptq
    float_bytes: int | None = None


def parse_format(text: str) -> Format:
    t = text.strip()
    low = t.lower()
    if low in FLOAT_BYTES:
        return Format("float", low, float_bytes=FLOAT_BYTES[low])
    if low == "fp8":
        return Format("fp8", "fp8")
    if low == "mxfp4":
        return Format("mxfp4", "mxfp4")
    head, _, arg = low.partition(":")
    if head == "exl3":
        try:
            bits = float(arg)
        except ValueError:
            bits = -1.0
        if not 1 <= bits <= 8:
            raise InputError(f"format {text!r}: EXL3 needs bits per weight between 1 and 8, e.g. exl3:3.0")
        return Format("exl3", f"exl3:{bits:g}", bits=bits)
    if head in ("awq", "gptq"):
        group = int(arg) if arg.isdigit() and int(arg) > 0 else (DEFAULT_GROUP if not arg else -1)
        if group < 1:
            raise InputError(f"format {text!r}: give a group size, e.g. {head}:128")
        return Format("int4", f"{head}:{group}", group=group)
    if head == "gguf" and arg:
        name = arg.upper()
        if name in RECIPES:
            return Format("recipe", f"gguf:{name}")
        _ggml_size(name, text)
        return Format("gguf", f"gguf:{name}")
    raise InputError(f"format {text!r}: not one offload-lab sizes; give {FORMAT_HELP}")


def _ggml_size(name: str, what: str) -> tuple[int, int]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType[name]]
    except KeyError:
        raise InputError(f"format {what!r}: {name} is not a GGML type gguf-py knows") from None


def _ggml_bytes(name: str, shape: tuple[int, ...]) -> int:
    block, size = _ggml_size(name, name)
    n = math.prod(shape)
    return math.ceil(n / block) * size


def weight_bytes(fmt: Format, shape: tuple[int, ...], role: dict[str, Any] | None = None) -> int:
    """Bytes of one linear weight (2D [out, in], or 3D [E, out, in]) in ``fmt``."""
    *lead, out, inn = shape
    e = math.prod(lead) if lead else 1
    if fmt.kind == "float":
        return e * out * inn * (fmt.float_bytes or 2)
    if fmt.kind == "fp8":
        return e * (out * inn + math.ceil(out / FP8_BLOCK) * math.ceil(inn / FP8_BLOCK) * 4)
    if fmt.kind == "mxfp4":
        return _ggml_bytes("MXFP4", shape)
    if fmt.kind == "exl3":
        return e * (math.ceil(out * inn * (fmt.bits or 0) / 8) + (inn + out) * 2)
    if fmt.kind == "int4":
        groups = math.ceil(inn / (fmt.group or DEFAULT_GROUP))
        return e * (math.ceil(out * inn / 2) + groups * out * 2 + math.ceil(groups * out / 2))
    if fmt.kind == "gguf":
        return _ggml_bytes(_fallback(fmt.name.split(":", 1)[1], inn), shape)
    if fmt.kind == "recipe":
        return _ggml_bytes(_fallback(gguf_recipe_type(fmt.name.split(":", 1)[1], role or {}), inn), shape)
    raise InputError(f"format {fmt.name}: unknown kind")  # pragma: no cover


def _fallback(ggml: str, ncols: int) -> str:
    """llama.cpp's ``tensor_type_fallback``: a row length its block does not divide takes a 32-block type."""
    block, _ = _ggml_size(ggml, ggml)
    if ncols % block == 0:
        return ggml
    alt = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "IQ4_XS": "IQ4_NL"}.get(
        ggml, "F16")
    return alt if ncols % _ggml_size(alt, alt)[0] == 0 else "F16"


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def gguf_recipe_type(recipe: str, role: dict[str, Any]) -> str:
    """The GGML type llama.cpp's ``llama_tensor_get_type`` picks for one tensor of a file type (ggml-org/llama.cpp
    src/llama-quant.cpp @007dbbf3, ``llama_tensor_get_type_impl``), for the recipes in :data:`RECIPES`. ``role``:
    ``kind`` (output, attn_v, attn_k, attn_output, ffn_down, other), ``layer``, ``layers``, ``n_expert``, and
    ``i_attn_v``/``n_attn_v`` (the attn_v tensors' running index and count)."""
    default = RECIPES[recipe]
    kind = role.get("kind", "other")
    n_expert = role.get("n_expert", 1)
    if recipe == "MXFP4_MOE":
        if kind == "output":
            return "Q8_0"
        return "MXFP4" if role.get("routed") else "Q8_0"
    if kind == "output":
        return "Q8_0" if default == "Q8_0" else "Q6_K"
    if recipe in ("Q6_K", "Q8_0"):
        return default
    if kind == "attn_v":
        t = default
        if recipe in ("Q4_K_M", "Q5_K_M") and _use_more_bits(role.get("i_attn_v", 0), role.get("n_attn_v", 1)):
            t = "Q6_K"
        elif recipe == "Q4_K_S" and role.get("i_attn_v", 0) < 4:
            t = "Q5_K"
        return "Q8_0" if n_expert == 8 else t
    if kind == "attn_k":
        return "Q8_0" if n_expert == 8 else default
    if kind == "ffn_down":
        i, n = role.get("layer", 0), role.get("layers", 1)
        if recipe in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i, n):
            return "Q6_K"
        if recipe == "Q4_K_S" and i < n // 8:
            return "Q5_K"
        return default
    if kind == "attn_output" and n_expert == 8 and recipe in ("Q4_K_M", "Q4_K_S"):
        return "Q5_K"
    return default


_ROLE = [(re.compile(r"(?:^|\.)v_proj\.weight$"), "attn_v"), (re.compile(r"(?:^|\.)k_proj\.weight$"), "attn_k"),
         (re.compile(r"(?:^|\.)o_proj\.weight$"), "attn_output"), (re.compile(r"down_proj(?:\.weight)?$"), "ffn_down")]


def apply(items: list[Any], shapes: dict[str, tuple[int, ...]], model_dtype_bytes: int, by_category: dict[str, Format],
          n_layers: int | None, n_expert: int, tied: bool) -> dict[str, int]:
    """Bytes of each tensor (by name) with ``by_category``'s formats; the rest at the model's dtype."""
    out: dict[str, int] = {}
    attn_v = [it.name for it in items if _role(it.name) == "attn_v"]
    v_index = {n: i for i, n in enumerate(attn_v)}
    for it in items:
        shape = shapes[it.name]
        fmt = by_category.get(it.category)
        if fmt is None or len(shape) < 2 or it.category == "router":
            out[it.name] = math.prod(shape) * model_dtype_bytes
            continue
        kind = "output" if it.category == "lm_head" or (tied and it.category == "embedding") else _role(it.name)
        role = {"kind": kind, "layer": it.layer or 0, "layers": n_layers or 1, "n_expert": n_expert,
                "i_attn_v": v_index.get(it.name, 0), "n_attn_v": len(attn_v) or 1,
                "routed": it.category == "routed_expert"}
        out[it.name] = weight_bytes(fmt, shape, role)
    return out


def _role(name: str) -> str:
    return next((r for pat, r in _ROLE if pat.search(name)), "other")


def parse_assignments(items: list[str] | None, weights: str | None) -> dict[str, Format]:
    """``--weights FMT`` (every category's linear weights) and ``--format-for CATEGORY=FMT`` over it."""
    from offload_lab.fit.classify import CATEGORIES

    out: dict[str, Format] = {}
    if weights:
        fmt = parse_format(weights)
        out = {c: fmt for c in CATEGORIES if c != "router"}
    for item in items or []:
        cat, _, f = item.partition("=")
        if cat not in CATEGORIES or not f:
            raise InputError(f"--format-for {item!r}: expected CATEGORY=FORMAT with CATEGORY one of "
                             f"{', '.join(CATEGORIES)}")
        out[cat] = parse_format(f)
    return out
