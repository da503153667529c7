"""A pod to predict: the hardware from the catalog, the model's sizes from its config, the serving choices from a
stack file's flags and plan (or from the command line), and the price with its currency."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offload_lab.core.errors import InputError
from offload_lab.predict.catalog import Catalog, load_catalog
from offload_lab.predict.physics import GiB, PodSpec, Serving
from offload_lab.predict.shape import Shape, read_config, shape_from_config
from offload_lab.fit.kvbudget import DEFAULT_RESERVE_GIB  # the fit layer's stated reserve, one default

# The model family whose attention the study's summary leaves unpublished. Assumed, with sources, so that the physics
# can read the KV cache as the serving engine would: DeepSeek-V4's attention is sparse like DeepSeek-V3.2's (vLLM's
# DSA dimensions for DeepseekV32ForCausalLM: index_topk 2048, index_head_dim 128, index_n_heads 64), and vLLM keeps
# its KV cache in the fp8_ds_mla layout (vllm/models/deepseek_v4/attention.py: "DeepseekV4 fp8_ds_mla layout only
# supports fp8 kv-cache"; 512 fp8 latent values, 16 bytes of scales and 64 bf16 rope values: 656 bytes per layer).
FAMILY_ASSUMPTIONS: dict[str, dict[str, Any]] = {
    "deepseek_v4": {
        "config": {"index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64},
        "kv_bytes_per_layer": 656,
        "spec_acceptance": 0.85,
        "provenance": (
            "assumed for the DeepSeek-V4 family (its config is not published here): sparse attention with "
            "DeepSeek-V3.2's indexer dimensions (index_topk 2048, index_head_dim 128, index_n_heads 64, as vLLM's "
            "DSA dimensions for DeepseekV32ForCausalLM), KV cache in vLLM's fp8_ds_mla layout (656 bytes per token "
            "and layer); MTP acceptance 0.85, the low end of DeepSeek-V3's technical report (\"the acceptance rate "
            "of the second token prediction ranges between 85% and 90%\")"),
    },
}
DEFAULT_SPEC_ACCEPTANCE = 0.7  # a draft model's or MTP's acceptance when the model's family gives none: our choice
MIN_KV_SHARE = 0.1  # a plan leaves at least this share of the usable memory to the KV cache: our choice


@dataclass
class PodInput:
    """A pod as predict reads it, with where each part came from."""

    name: str
    shape: Shape
    pod: PodSpec
    serving: Serving
    price_per_hour: float | None = None
    currency: str | None = None
    max_model_len: int | None = None
    provenance: dict[str, str] = field(default_factory=dict)


def _family(cfg: dict[str, Any]) -> str | None:
    naming = str(cfg.get("naming") or cfg.get("model_type") or "")
    return "deepseek_v4" if naming.startswith("deepseek_v4") else None


def model_shape(config_path: Path | str, name: str | None = None) -> tuple[Shape, dict[str, Any], str | None]:
    cfg = read_config(config_path)
    fam = _family(cfg)
    extra = FAMILY_ASSUMPTIONS.get(fam or "", {})
    shape = shape_from_config({**cfg, **extra.get("config", {})}, name or Path(config_path).stem, str(config_path))
    if "kv_bytes_per_layer" in extra:
        shape = dataclasses.replace(shape, kv_bytes_per_token=float(extra["kv_bytes_per_layer"] * shape.layers))
    return shape, extra, fam


def pod_spec(cat: Catalog, gpu: str, count: int, link: str | None = None, host_ram_gib: float | None = None,
             host_memory: str | None = None, channels: int | None = None) -> tuple[PodSpec, dict[str, str]]:
    if count < 1:
        raise InputError(f"--gpus {count}: at least one GPU")
    key, g = cat.gpu(gpu)
    link_name = link or g.host_link
    lk = cat.link(link_name)
    hbm = g.hbm_gbps.value
    mem = g.usable_gib.value if g.usable_gib else (g.memory_gb.value or 0) * 1e9 / GiB
    bf16 = g.bf16_tflops.value or (g.fp8_tflops.value or 0) / 2 or (g.fp4_tflops.value or 0) / 4 or None
    if not hbm or not mem:
        raise InputError(f"GPU {key}: the catalog lacks its memory or bandwidth; add them with --hardware")
    prov = {"gpu": f"{key}: {g.name}; memory {g.memory_gb.source}; bandwidth {g.hbm_gbps.source}"}
    if bf16 is None:
        # no printed tensor rate (Apple): decode is memory-bound; prefill then uses the memory rate's roofline
        bf16 = hbm / 1000 * 100
        prov["compute"] = ("no tensor throughput in the catalog: taken as 100 FLOPs per byte of memory bandwidth "
                           "(our choice); prefill predictions for this GPU are rough")
    host_gbps = None
    if host_memory:
        hm = cat.host(host_memory)
        host_gbps = (hm.gbps_per_channel.value or 0) * (channels or 1)
        prov["host_memory"] = f"{host_memory} x {channels or 1} channels: {hm.gbps_per_channel.source}"
    unified = lk.unified
    link_gbps = lk.gbps.value or 0.0
    prov["link"] = f"{link_name}: {lk.gbps.source}" + (f"; measured {lk.measured_gbps.source}" if lk.measured_gbps else "")
    spec = PodSpec(gpu=key, count=count, hbm_gbps=hbm, memory_gib=mem, peak_tflops=bf16,
                   peak_fp8_tflops=g.fp8_tflops.value, link=link_name, link_gbps=link_gbps,
                   host_memory_gbps=host_gbps, host_ram_gib=host_ram_gib, unified=unified)
    return spec, prov


def measured_link_efficiency(cat: Catalog, link: str) -> float | None:
    lk = cat.link(link)
    if lk.measured_gbps and lk.measured_gbps.value and lk.gbps.value:
        return lk.measured_gbps.value / lk.gbps.value
    return None


def default_chunk(pod: PodSpec) -> int:
    """vLLM's default max_num_batched_tokens for the OpenAI server (vllm/engine/arg_utils.py, get_batch_defaults):
    8192 on GPUs with at least 70 GiB that are not A100s, else 2048."""
    return 8192 if pod.memory_gib >= 70 and not pod.gpu.startswith("a100") else 2048


def host_experts_needed(shape: Shape, pod: PodSpec, tp: int, util: float, reserve_gib: float) -> int:
    """The fewest routed experts on host for the rest to fit each GPU with ``MIN_KV_SHARE`` left for the KV cache."""
    budget = pod.memory_gib * util * (1 - MIN_KV_SHARE) - reserve_gib
    total = shape.moe_layers * shape.experts
    per_gpu_all = (total * shape.expert_bytes + shape.dense_bytes) / tp / GiB
    if per_gpu_all <= budget:
        return 0
    if not shape.expert_bytes:
        return total
    over = (per_gpu_all - budget) * GiB * tp / shape.expert_bytes
    return min(total, int(over) + 1)


def _fraction_from_make(make: list[str]) -> float | None:
    for i, a in enumerate(make):
        if a == "--fraction" and i + 1 < len(make):
            try:
                return float(make[i + 1])
            except ValueError:
                return None
    return None


def from_stack(path: Path | str, cat: Catalog | None = None, model: Path | str | None = None,
               root: Path | None = None) -> PodInput:
    from offload_lab.server.stack import load_stack

    cat = cat or load_catalog()
    st = load_stack(path)
    sp = st.spec
    base = Path(root) if root else Path.cwd()
    if sp.pod is None or not sp.pod.accelerator:
        raise InputError(f"stack {path}: names no pod (pod: accelerator, count); give the pod on the command line "
                         "instead (offload-lab pod predict --config CONFIG --gpu GPU --gpus N ...)")
    cfg_path = Path(model) if model else None
    if cfg_path is None:
        local = base / sp.model.path / "config.json"
        if local.is_file():
            cfg_path = local
        elif sp.plans and sp.plans.dry_run_checkpoint:
            cfg_path = base / sp.plans.dry_run_checkpoint
        else:
            raise InputError(f"stack {path}: the model's config.json is not at {local}; give it with --config")
    shape, extra, fam = model_shape(cfg_path, sp.model.served_name)
    pod, prov = pod_spec(cat, sp.pod.accelerator, sp.pod.count)
    flags = sp.server.flags
    tp = flags.tensor_parallel_size or 1
    util = flags.gpu_memory_utilization or 0.9
    spec = flags.speculative_config or {}
    n_spec = int(spec.get("num_speculative_tokens", 0) or 0) if isinstance(spec, dict) else 0
    acc = extra.get("spec_acceptance", DEFAULT_SPEC_ACCEPTANCE) if n_spec else 0.0
    host = 0
    plan_note = "no plan: every expert on the GPUs"
    if sp.plans and sp.plans.use:
        entry = sp.plans.files.get(sp.plans.use)
        frac = _fraction_from_make(list(entry.make)) if entry and entry.make else None
        if frac is not None:
            host = int(round(frac * shape.experts * shape.moe_layers))
            plan_note = f"plan {sp.plans.use}: {frac:.0%} of every layer's experts on host ({host:,})"
        else:
            host = host_experts_needed(shape, pod, tp, util, DEFAULT_RESERVE_GIB)
            plan_note = f"plan {sp.plans.use}: its size is not readable here; the fewest that fit ({host:,})"
    kv_b = None
    if flags.kv_cache_dtype and str(flags.kv_cache_dtype).startswith("fp8") and "kv_bytes_per_layer" not in extra:
        kv_b = 1.0
    serving = Serving(tp=tp, host_experts=host, spec_tokens=n_spec, acceptance=acc,
                      chunk_tokens=flags.max_num_batched_tokens or default_chunk(pod),
                      gpu_memory_utilization=util, reserve_gib=DEFAULT_RESERVE_GIB, kv_dtype_bytes=kv_b)
    prov.update({"model": f"{cfg_path}" + (f"; {extra['provenance']}" if extra else ""), "plan": plan_note,
                 "serving": f"stack {path} flags: tensor_parallel_size {tp}, gpu_memory_utilization {util}, "
                            f"speculative tokens {n_spec}, prefill chunk {serving.chunk_tokens}"})
    price = sp.price
    return PodInput(name=sp.name, shape=shape, pod=pod, serving=serving,
                    price_per_hour=price.per_hour if price else None, currency=price.currency if price else None,
                    max_model_len=flags.max_model_len or shape.max_context, provenance=prov)


_PRICE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]{3})?\s*$")


def parse_price(text: str | None, currency: str | None = None) -> tuple[float | None, str | None]:
    """'2.50 USD' or '2.50' with --currency; a clear error otherwise."""
    if text is None:
        return None, currency.upper() if currency else None
    m = _PRICE.match(str(text))
    if not m:
        raise InputError(f"--price {text!r}: give an hourly price such as '2.50 USD' (or 2.50 with --currency USD)")
    cur = (m.group(2) or currency or "")
    if not cur:
        raise InputError(f"--price {text!r}: name its currency ('2.50 USD' or --currency USD)")
    return float(m.group(1)), cur.upper()


def from_description(config: Path | str, gpu: str, count: int, cat: Catalog | None = None, *,
                     link: str | None = None, host_ram_gib: float | None = None, host_memory: str | None = None,
                     channels: int | None = None, price: str | None = None, currency: str | None = None,
                     tp: int | None = None, spec_tokens: int = 0, util: float = 0.9,
                     max_model_len: int | None = None) -> PodInput:
    cat = cat or load_catalog()
    shape, extra, _ = model_shape(config)
    pod, prov = pod_spec(cat, gpu, count, link, host_ram_gib, host_memory, channels)
    tp = tp or count
    host = host_experts_needed(shape, pod, tp, util, DEFAULT_RESERVE_GIB)
    serving = Serving(tp=tp, host_experts=host, spec_tokens=spec_tokens,
                      acceptance=extra.get("spec_acceptance", DEFAULT_SPEC_ACCEPTANCE) if spec_tokens else 0.0,
                      chunk_tokens=default_chunk(pod), gpu_memory_utilization=util, reserve_gib=DEFAULT_RESERVE_GIB)
    per_hour, cur = parse_price(price, currency)
    prov.update({"model": str(config) + (f"; {extra['provenance']}" if extra else ""),
                 "plan": (f"the fewest experts on host for the rest to fit with {MIN_KV_SHARE:.0%} of memory left to "
                          f"the KV cache: {host:,}") if host else "every expert fits on the GPUs",
                 "serving": f"tensor parallel {tp}, gpu_memory_utilization {util}, speculative tokens {spec_tokens}"})
    return PodInput(name=f"{count}x-{pod.gpu}", shape=shape, pod=pod, serving=serving, price_per_hour=per_hour,
                    currency=cur, max_model_len=max_model_len or shape.max_context, provenance=prov)
