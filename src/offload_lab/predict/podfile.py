"""A predicted pod written as the emulated pod's model file (:class:`offload_lab.emulate.podmodel.PodModel`), so that
``offload-lab campaign rehearse --pod-model FILE`` runs on it. Every figure in it is a prediction of the physics
(:mod:`offload_lab.predict.physics`); the file's ``prediction`` block says so and names the factors and sources."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import yaml

from offload_lab.core.errors import InputError
from offload_lab.emulate.podmodel import PodModel
from offload_lab.predict.physics import Predictor
from offload_lab.predict.pod import PodInput

STREAMS = [1, 2, 3, 4, 6, 8]
# The emulator draws each request's rate from a log-normal; the physics predicts the expectation only, so the
# spread is our choice (sigma 0.1: p5 at about 85% of the median), stated in the file.
RATE_SIGMA = 0.10
SUFFIX_TOKENS = 512
PHYSICS_LEAVES_OUT = [
    "Spread: the physics predicts expected step times; every p5 in this file is the median x exp(-1.645 x 0.1), our "
    "choice, not a prediction.",
    "Routing as one Zipf exponent per layer, the same in every layer, independent between tokens and steps; the "
    "plan's host experts are taken to be the least used (a plan from routing counts); no expert cache on the GPU.",
    "Kernel efficiency inside a step: peak memory rates except the link's measured share; launches and all-reduces "
    "as one fitted time per layer; HBM and link reads overlap perfectly inside a layer.",
    "Prefill interference and queueing: a request's TTFT is its own prefill; decode is not slowed by other "
    "requests' prefills.",
    "Speculative decoding as a fixed acceptance rate; the draft's own cost is left out.",
    "Topology (NUMA, GPUs on different sockets), PCIe contention between GPUs on one root complex, host DRAM "
    "bandwidth unless given, boot and load times, errors under load.",
]


def _r(x: float, n: int = 4) -> float:
    return float(round(float(x), n))


def pod_model_dict(pin: PodInput, p: Predictor, factor_sources: dict[str, str] | None = None,
                   reference_context: int = 88000) -> dict[str, Any]:
    """The pod model file's content for ``pin`` as ``p`` predicts it."""
    max_len = int(pin.max_model_len or p.shape.max_context or 131072)
    ref = min(reference_context, max(4096, max_len // 2))
    fits = p.fits()
    if not fits["fits_gpu"]:
        raise InputError(f"pod {pin.name}: the weights each GPU keeps ({fits['weights_per_gpu_gib']} GiB) and the "
                         f"reserve do not fit its usable {fits['usable_per_gpu_gib']} GiB; move more experts to host "
                         "or add GPUs")
    cap = p.kv_capacity_tokens()
    if cap < 1024:
        raise InputError(f"pod {pin.name}: no room left for the KV cache ({cap} tokens); a pod model needs some")
    medians = [_r(p.tok_s(s, ref), 2) for s in STREAMS]
    p5 = [_r(m * math.exp(-1.6449 * RATE_SIGMA), 2) for m in medians]
    hi_ctx = max(8192, min(max_len, cap) - 1024)
    n1, n2 = max(1024, hi_ctx // 2), hi_ctx
    t1, t2 = p.prefill_s(n1)["ttft_s"], p.prefill_s(n2)["ttft_s"]
    cached_n = max(1024, hi_ctx - SUFFIX_TOKENS)
    cached_t = p.prefill_s(SUFFIX_TOKENS, cached_n)["ttft_s"]
    per_context = min(cap, max_len)
    label = (f"predicted from hardware by offload-lab pod predict: {pin.pod.count} x {pin.pod.gpu}, link "
             f"{pin.pod.link}; no measurement behind any figure")
    src = "offload-lab pod predict (physics of offload_lab.predict; factors fitted on the study's published figures)"
    no_plan = dataclasses.replace(p, serving=dataclasses.replace(p.serving, host_experts=0))
    return {
        "name": f"predicted-{pin.name}",
        "description": f"{pin.name}, predicted from hardware figures ({label})",
        "source": src,
        "seed": 20261206,
        "decode": {
            "agent_turns": {"provenance": f"predicted: tok/s per stream at a {ref:,}-token context "
                                          f"({label}); p5 is our choice (sigma {RATE_SIGMA})",
                            "streams": STREAMS, "median_tok_s": medians, "p5_tok_s": p5},
            "agent_reference_context": {"tokens": ref, "provenance": "the context the predicted table is for"},
            "tpot_vs_context": {"provenance": "predicted: one stream's TPOT at the two contexts",
                                "context_tokens": [4096, hi_ctx],
                                "tpot_ms": [_r(p.step_ms(1, 4096)["tpot_ms"]), _r(p.step_ms(1, hi_ctx)["tpot_ms"])]},
        },
        "prefill": {
            "fresh": {"provenance": "predicted: TTFT of one fresh prompt at each length", "prompt_tokens": [n1, n2],
                      "ttft_s": [_r(t1), _r(t2)]},
            "cached": {"provenance": f"predicted: TTFT of a {SUFFIX_TOKENS}-token suffix after {cached_n:,} cached tokens",
                       "cached_tokens": cached_n, "new_tokens": SUFFIX_TOKENS, "ttft_s": _r(max(cached_t, 1e-3))},
            "ttft_jitter_sigma": 0.03,
        },
        "kv_cache": {"provenance": f"predicted: {cap:,} tokens of KV cache (memory left after the weights and a "
                                   f"{p.serving.reserve_gib} GiB reserve)",
                     "contexts": 1, "tokens_per_context": per_context, "share_used": _r(per_context / cap, 6),
                     "vllm_estimate_full_requests": _r(cap / max_len, 2)},
        "natural_reply_tokens": 24,
        "memory": {"provenance": "predicted: bytes each GPU holds from the model's config and the plan",
                   "all_on_gpu_gib": _r(no_plan.weights_per_gpu_gib(), 2),
                   "usable_gib": _r(pin.pod.memory_gib, 2), "with_plan_gib": _r(p.weights_per_gpu_gib(), 2)},
        "boots": [],
        "leaves_out": PHYSICS_LEAVES_OUT,
        "prediction": {
            "label": label,
            "hardware": {k: (v if isinstance(v, (str, int, bool)) or v is None else float(v))
                         for k, v in dataclasses.asdict(pin.pod).items()},
            "model": pin.shape.source,
            "factors": {k: float(v) for k, v in dataclasses.asdict(p.factors).items()},
            "factor_sources": dict(factor_sources or {}),
            "provenance": dict(pin.provenance),
        },
    }


def to_yaml(data: dict[str, Any]) -> str:
    PodModel.model_validate(data)  # what is written is what the emulator reads
    header = ("# A pod model PREDICTED from hardware figures by `offload-lab pod predict`: no figure below was "
              "measured.\n# The emulated pod (offload_lab.emulate.server) reads it; `campaign rehearse --pod-model` "
              "runs on it and\n# says that its results are predictions. Check a hand-edited copy with "
              "`offload-lab pod model check`.\n")
    return header + yaml.safe_dump(data, sort_keys=False, width=118, allow_unicode=True)
