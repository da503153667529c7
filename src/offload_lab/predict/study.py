"""The study's pod predicted from hardware: the free factors fitted on named published figures, every other
published speed and capacity figure predicted, E9 (two B300, every weight in VRAM) predicted, and the community
page's home rigs checked against an upper bound.

Free factors (:class:`~offload_lab.predict.physics.Factors`), held the same for every pod:

- ``routing_skew``: fitted on the agent-turn table's one-stream median (186 tok/s).
- ``layer_overhead_us``: fitted on the eight-stream median (31 tok/s): launches and all-reduces per layer and step.
- ``compute_efficiency``: fitted on the fresh 128K-token TTFT (18.33 s).
- ``link_efficiency``: not free: the measured pinned host-to-device rate of the catalog's link over its peak
  (PCIe Gen5 x16: 51.5 of 63 GB/s, FreeToken's measurement on an RTX PRO 6000); 1.0 where no measurement exists.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from scipy.optimize import brentq

from offload_lab.core.errors import InputError
from offload_lab.predict.catalog import Catalog, load_catalog
from offload_lab.predict.physics import Factors, Predictor, Serving
from offload_lab.predict.pod import PodInput, from_stack, measured_link_efficiency, model_shape, pod_spec

STUDY_STACK = "configs/stacks/study-pod.yaml"
E9_STACK = "configs/stacks/study-b300.yaml"
TRANSCRIPTION = "configs/published/study.yaml"
# The agent-turn table's context (published E13: "context 88,000 tokens growing by 3,500 a turn").
AGENT_CONTEXT = 88000
# Suffix and reply tokens of a long-context request: the campaign's (configs/campaigns/study-pod.yaml, regimes
# shared_prefix_* and private_context_*: suffix_tokens 512, output_tokens 400), not published.
SUFFIX_TOKENS = 512
REPLY_TOKENS = 400
CACHED_USERS = 4  # published E4/E5: "4 users on one cached 256K-token prefix"
KV_CONTEXTS = 5  # published E6/E13: "Five independent 128K contexts"
CACHED_TAIL_NOTE = (
    "p95 of a closed loop: the unluckiest user's request arrives just after an engine step began that prefills the "
    "other three users' suffixes (each prefill step copies every host expert over the link), waits for it, then has "
    "its own (physics.Predictor.prefill_tail_s, no free parameter); the campaign's request count is not published, "
    "so the p95 is taken as that worst arrival; four requests that arrive together share one step, "
    "which alone would miss the published p95 by more than the factor 1.5")
FIT_ON = {"routing_skew": "agent_turns_1_median_tok_s", "layer_overhead_us": "agent_turns_8_median_tok_s",
          "compute_efficiency": "ttft_128k_s"}


@dataclass(frozen=True)
class Fig:
    name: str
    published: float
    unit: str
    words: str
    predict: Callable[[Predictor], float]
    pod: str = "pod 3"
    note: str = ""


def _ttft(new: int, cached: int = 0, requests: int = 1) -> Callable[[Predictor], float]:
    return lambda p: p.prefill_s(new, cached, requests)["ttft_s"]


def _tpot(streams: int, context: int) -> Callable[[Predictor], float]:
    return lambda p: p.step_ms(streams, context)["tpot_ms"]


def _rate(streams: int, context: int) -> Callable[[Predictor], float]:
    return lambda p: p.tok_s(streams, context)


def _private_tokens() -> int:
    """Tokens one private 128K stream holds at its longest: its context, suffix and reply."""
    return 131072 + SUFFIX_TOKENS + REPLY_TOKENS


def kv_share_note(share: float, estimate: float, max_model_len: int) -> str:
    """Why no KV capacity meets both published KV figures. vLLM's estimate is blocks / blocks a max_model_len request
    needs and its kv_cache_usage is used blocks / blocks, so for a cache whose blocks grow with a request's length
    (full attention, MLA, a sparse-attention indexer, compressed caches) share x estimate = N * L / max_model_len
    whatever the capacity. Only a per-request constant that the estimate counts and a decoding request does not hold
    can lower it: vLLM counts a sliding-window group at its window plus the tokens in flight."""
    implied = KV_CONTEXTS * _private_tokens() / (share * estimate)
    ours = KV_CONTEXTS * _private_tokens() / max_model_len
    return (f"not predictable from one capacity: share x estimate = {KV_CONTEXTS} x {_private_tokens():,} / "
            f"max_model_len for a KV cache growing with length, whatever the capacity. The published {share:g} x "
            f"{estimate:g} = {share * estimate:.2f} needs max_model_len ~{implied:,.0f} tokens; the stack's "
            f"{max_model_len:,} gives {ours:.2f}. Unpublished, each could close it: a longer max_model_len "
            f"(DeepSeek-V4's config allows 1,048,576), fewer than {KV_CONTEXTS} contexts held at the sampled peak "
            f"(vLLM counts an idle stream's cached blocks as free), or sliding-window layers that the estimate counts "
            f"at window + in-flight tokens while decoding holds only the window (DeepSeek-V4.1's layer layout is not "
            f"published). The capacity is predicted from memory, not fitted to either figure")


def published_figures(root: Path | None = None) -> list[Fig]:
    """Every published speed and capacity figure of the study's pod, read from the transcription."""
    from offload_lab.published.transcription import load_transcription

    t = load_transcription((Path(root) if root else Path.cwd()) / TRANSCRIPTION)
    v = {f.key: f for f in t.figures}

    def num(key: str) -> float:
        if key not in v or not isinstance(v[key].value, (int, float)):
            raise InputError(f"{TRANSCRIPTION}: lacks the published number {key!r}")
        return float(v[key].value)

    figs: list[Fig] = []
    agent = t.tables["agent_turns"]
    for streams, median, _p5 in agent.rows:
        figs.append(Fig(f"agent_turns_{int(streams)}_median_tok_s", float(median), "tok/s per stream",
                        f"{agent.published}: {int(streams)} streams, median", _rate(int(streams), AGENT_CONTEXT)))
    ctx = 262144
    figs += [
        Fig("tpot_4k_ms", num("tpot_4k_ms"), "ms", v["tpot_4k_ms"].published, _tpot(1, 4096 + REPLY_TOKENS // 2),
            "pod 2"),
        Fig("tpot_256k_ms", num("tpot_256k_ms"), "ms", v["tpot_256k_ms"].published, _tpot(1, ctx), "pod 2"),
        Fig("ttft_128k_s", num("ttft_128k_s"), "s", v["ttft_128k_s"].published, _ttft(131072), "pod 2"),
        Fig("ttft_260k_s", num("prefill_ttft_s"), "s", v["prefill_ttft_s"].published, _ttft(260000), "pod 2"),
        Fig("cached_256k_4_users_ttft_p95_s", num("shared_256k_ttft_p95_s"), "s", v["shared_256k_ttft_p95_s"].published,
            lambda p: p.prefill_tail_s(SUFFIX_TOKENS, ctx, CACHED_USERS), "pod 2", CACHED_TAIL_NOTE),
        Fig("cached_256k_4_users_tpot_ms", num("shared_256k_tpot_ms"), "ms", v["shared_256k_tpot_ms"].published,
            _tpot(4, ctx + SUFFIX_TOKENS), "pod 2"),
        Fig("kv_share_five_128k", num("private_128k_kv_max"), "share of the KV cache",
            v["private_128k_kv_max"].published,
            lambda p: KV_CONTEXTS * _private_tokens() / max(1, p.kv_capacity_tokens())),
        Fig("vllm_full_length_requests", num("vllm_full_length_requests"), "requests",
            v["vllm_full_length_requests"].published, lambda p: p.kv_capacity_tokens() / ctx),
        Fig("per_gpu_all_on_gpu_gib", num("per_gpu_all_on_gpu_gib"), "GiB", v["per_gpu_all_on_gpu_gib"].published,
            lambda p: dataclasses.replace(p, serving=dataclasses.replace(p.serving, host_experts=0))
            .weights_per_gpu_gib(), "E1"),
        Fig("per_gpu_gen30_gib", num("per_gpu_gen30_gib"), "GiB", v["per_gpu_gen30_gib"].published,
            lambda p: p.weights_per_gpu_gib(), "E1"),
    ]
    return figs


def _with(p: Predictor, **kw: float) -> Predictor:
    return dataclasses.replace(p, factors=dataclasses.replace(p.factors, **kw))


def _solve(fn: Callable[[float], float], lo: float, hi: float) -> float:
    """The root of an increasing-or-decreasing ``fn`` in [lo, hi], or the end nearer to one."""
    a, b = fn(lo), fn(hi)
    if a * b > 0:
        return lo if abs(a) < abs(b) else hi
    return float(brentq(fn, lo, hi, xtol=1e-7))


def fit_factors(p: Predictor, figs: list[Fig]) -> Factors:
    """Solve each free factor on its named figure (brentq on the physics). Decode does not bind on compute, so the
    skew and the per-layer overhead are solved together on the one- and eight-stream medians (for each overhead the
    skew that gives the one-stream median), then the compute efficiency on the 128K TTFT."""
    by = {f.name: f for f in figs}
    f1, f8 = by[FIT_ON["routing_skew"]], by[FIT_ON["layer_overhead_us"]]

    def skew_for(q: Predictor) -> float:
        return _solve(lambda s: f1.predict(_with(q, routing_skew=s)) - f1.published, 0.0, 4.0)

    def miss8(ov: float) -> float:
        q = _with(p, layer_overhead_us=ov)
        return f8.predict(_with(q, routing_skew=skew_for(q))) - f8.published

    overhead = _solve(miss8, 0.0, 500.0)
    p = _with(p, layer_overhead_us=overhead)
    p = _with(p, routing_skew=skew_for(p))
    f2 = by[FIT_ON["compute_efficiency"]]
    h = lambda e: f2.predict(_with(p, compute_efficiency=e)) - f2.published  # noqa: E731
    eff = 1.0 if h(1.0) > 0 else brentq(h, 1e-3, 1.0, xtol=1e-8)
    return dataclasses.replace(p.factors, compute_efficiency=eff)


def study_predictor(cat: Catalog | None = None, root: Path | None = None) -> tuple[PodInput, Predictor]:
    cat = cat or load_catalog()
    base = Path(root) if root else Path.cwd()
    pin = from_stack(base / STUDY_STACK, cat, root=base)
    eff = measured_link_efficiency(cat, pin.pod.link) or 1.0
    return pin, Predictor(pin.shape, pin.pod, pin.serving, Factors(link_efficiency=eff))


def calibrate(cat: Catalog | None = None, root: Path | None = None) -> dict[str, Any]:
    """Fit the free factors on the study's pod and predict every other published figure."""
    pin, p = study_predictor(cat, root)
    figs = published_figures(root)
    factors = fit_factors(p, figs)
    p = dataclasses.replace(p, factors=factors)
    fitted = set(FIT_ON.values())
    rows = []
    for f in figs:
        pred = float(f.predict(p))
        rows.append({"name": f.name, "published": f.published, "predicted": round(pred, 4), "fitted": f.name in fitted,
                     "unit": f.unit, "ratio": round(pred / f.published, 4), "measured_on": f.pod, "words": f.words,
                     "note": f.note})
    by = {r["name"]: r for r in rows}
    if "kv_share_five_128k" in by and "vllm_full_length_requests" in by:
        by["kv_share_five_128k"]["note"] = kv_share_note(by["kv_share_five_128k"]["published"],
                                                         by["vllm_full_length_requests"]["published"],
                                                         pin.max_model_len or 262144)
    errs = [abs(r["ratio"] - 1) for r in rows if not r["fitted"]]
    worst = max((max(r["ratio"], 1 / r["ratio"]) for r in rows if not r["fitted"]), default=1.0)
    return {
        "pod": pin.name, "factors": dataclasses.asdict(factors),
        "factor_sources": {
            "routing_skew": f"fitted on {FIT_ON['routing_skew']}",
            "layer_overhead_us": f"fitted on {FIT_ON['layer_overhead_us']}",
            "compute_efficiency": f"fitted on {FIT_ON['compute_efficiency']}",
            "link_efficiency": "not free: the catalog's measured link rate over its peak (" + pin.pod.link + ")"},
        "figures": rows,
        "summary": {"predicted_figures": len(errs), "median_abs_error": round(statistics.median(errs), 4) if errs else 0,
                    "worst_factor": round(worst, 4)},
        "not_predicted": [
            "agent-turn p5 rates: the physics gives an expected step time, not its spread",
            "four agents' 168 tok/s in total: the server's total over a run, a different quantity from the per-stream "
            "medians (published-derived.md)",
            "E7's pod-to-pod ratio (1.17 to 1.51): the topology (NODE against SYS) is not in the physics"],
        "provenance": pin.provenance,
        "predictor": p,
    }


def predict_e9(factors: Factors, cat: Catalog | None = None, root: Path | None = None) -> dict[str, Any]:
    """E9, designed and not run: the same stack on two B300, every weight in VRAM. A prediction, no measurement."""
    cat = cat or load_catalog()
    base = Path(root) if root else Path.cwd()
    pin = from_stack(base / E9_STACK, cat, root=base)
    p = Predictor(pin.shape, pin.pod, pin.serving, dataclasses.replace(factors, link_efficiency=1.0))
    streams = [1, 2, 3, 4, 6, 8]
    return {"pod": pin.name, "label": "predicted (E9 was designed and not run: no measurement behind it)",
            "agent_turns_tok_s": {str(s): round(float(p.tok_s(s, AGENT_CONTEXT)), 1) for s in streams},
            "tpot_4k_ms": round(float(p.step_ms(1, 4096)["tpot_ms"]), 2),
            "ttft_128k_s": round(float(p.prefill_s(131072)["ttft_s"]), 2),
            "ttft_260k_s": round(float(p.prefill_s(260000)["ttft_s"]), 2),
            "kv_capacity_tokens": p.kv_capacity_tokens(),
            "fits": p.fits(), "price": {"per_hour": pin.price_per_hour, "currency": pin.currency}}


# The community page's home rigs (configs/published/study.yaml, table home_rigs) as hardware: which catalog entries,
# and what the page says of each (bits of the experts, where they are). Host DRAM: the rig's memory as the page
# names it; channels are the platform's (Ryzen 9 9950X3D: 2 DDR5 channels; EPYC 7402: 8 DDR4 channels).
HOME_RIGS = [
    {"build": "Mac Studio M3 Ultra 512 GB", "gpu": "apple-m3-ultra", "count": 1, "link": "unified-memory",
     "host_memory": None, "channels": None, "spec_tokens": 1},
    {"build": "Ryzen 9 9950X3D + RTX 5090 + 128 GB DDR5", "gpu": "rtx-5090", "count": 1, "link": "pcie-gen5-x16",
     "host_memory": "ddr5-5600", "channels": 2, "spec_tokens": 0},
    {"build": "2× Tesla V100 32 GB + EPYC 7402", "gpu": "v100-sxm2-32gb", "count": 2, "link": "pcie-gen3-x16",
     "host_memory": "ddr4-3200", "channels": 8, "spec_tokens": 0},
]
UPPER_BOUND_BITS = 2.0  # the fewest bits per weight any of the page's rigs names ("experts 2-3 bit", "2-bit")


def home_rig_bounds(factors: Factors, cat: Catalog | None = None, root: Path | None = None) -> list[dict[str, Any]]:
    """An upper bound on each home rig's single-stream decode: every weight at the fewest bits any rig uses, peak
    rates, host experts read at the faster of the link and the host's DRAM (a CPU can compute them where they are),
    the fitted routing concentration, no per-layer overhead, compute never binding."""
    from offload_lab.published.transcription import load_transcription

    cat = cat or load_catalog()
    base = Path(root) if root else Path.cwd()
    t = load_transcription(base / TRANSCRIPTION)
    measured = {r[0]: float(r[2]) for r in t.tables["home_rigs"].rows}
    stack_cfg = base / "configs/checkpoints/synthetic-dsv41-flash-exl3.yaml"
    shape, _, _ = model_shape(stack_cfg, "dsv41-flash")
    b = UPPER_BOUND_BITS
    shape = dataclasses.replace(shape, expert_bytes=shape.expert_params * b / 8,
                                dense_bytes=shape.dense_params * b / 8)
    out = []
    for rig in HOME_RIGS:
        pod, _ = pod_spec(cat, rig["gpu"], rig["count"], rig["link"], None, rig["host_memory"], rig["channels"])
        if pod.host_memory_gbps:
            pod = dataclasses.replace(pod, link_gbps=max(pod.link_gbps, pod.host_memory_gbps / rig["count"]),
                                      host_memory_gbps=None)
        from offload_lab.predict.pod import host_experts_needed
        serving = Serving(tp=rig["count"], spec_tokens=rig["spec_tokens"], acceptance=1.0 if rig["spec_tokens"] else 0,
                          gpu_memory_utilization=1.0, reserve_gib=0.0)
        host = 0 if pod.unified else host_experts_needed(shape, pod, rig["count"], 1.0, 0.0)
        serving = dataclasses.replace(serving, host_experts=host)
        p = Predictor(shape, pod, serving, dataclasses.replace(factors, link_efficiency=1.0, compute_efficiency=1.0,
                                                               layer_overhead_us=0.0))
        bound = float(p.tok_s(1, 4096))
        m = measured.get(rig["build"])
        out.append({"build": rig["build"], "measured_tok_s": m, "upper_bound_tok_s": round(bound, 1),
                    "holds": bool(m is None or bound >= m), "host_experts": host,
                    "label": "upper bound (predicted)"})
    return out


def report(cat: Catalog | None = None, root: Path | None = None) -> dict[str, Any]:
    cal = calibrate(cat, root)
    p: Predictor = cal.pop("predictor")
    factors = p.factors
    cal["e9"] = predict_e9(factors, cat, root)
    cal["home_rigs"] = home_rig_bounds(factors, cat, root)
    return cal


__all__ = ["calibrate", "report", "predict_e9", "home_rig_bounds", "published_figures", "FIT_ON", "math"]
