"""Pod model files (``configs/pods/*.yaml``): the schema, and the rules that turn published figures into behaviour.

The rules are stated in the file's header and implemented here, one function each: TPOT from the number of running
requests and the context (:meth:`PodModel.tpot_ms`), the per-request jitter (:meth:`PodModel.rate_sigma`), TTFT from
the new and cached tokens (:meth:`PodModel.ttft_s`), the KV capacity (:meth:`PodModel.kv_capacity_tokens`) and the
boot outcome from what the server was given (:func:`boot_rule`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from offload_lab.core import inputs
from offload_lab.core.errors import InputError
from offload_lab.core.places import kind_of

# z of the 5th percentile of a normal: p5 = median * exp(-1.645 sigma) for a log-normal rate.
Z_P5 = 1.6449


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentTable(_Strict):
    provenance: str
    streams: list[int] = Field(min_length=2)
    median_tok_s: list[float] = Field(min_length=2)
    p5_tok_s: list[float] = Field(min_length=2)

    @model_validator(mode="after")
    def _aligned(self) -> "AgentTable":
        if not len(self.streams) == len(self.median_tok_s) == len(self.p5_tok_s):
            raise ValueError("streams, median_tok_s and p5_tok_s must have one entry per row")
        if self.streams != sorted(set(self.streams)) or self.streams[0] < 1:
            raise ValueError("streams must be increasing and at least 1")
        if any(p <= 0 or p > m for m, p in zip(self.median_tok_s, self.p5_tok_s)):
            raise ValueError("every p5 must be positive and at most its median")
        return self


class Reference(_Strict):
    tokens: int = Field(ge=1)
    provenance: str


class Curve(_Strict):
    provenance: str
    context_tokens: list[int] = Field(min_length=2, max_length=2)
    tpot_ms: list[float] = Field(min_length=2, max_length=2)


class Decode(_Strict):
    agent_turns: AgentTable
    agent_reference_context: Reference
    tpot_vs_context: Curve


class Fresh(_Strict):
    provenance: str
    prompt_tokens: list[int] = Field(min_length=2, max_length=2)
    ttft_s: list[float] = Field(min_length=2, max_length=2)


class Cached(_Strict):
    provenance: str
    cached_tokens: int = Field(ge=1)
    new_tokens: int = Field(ge=1)
    ttft_s: float = Field(gt=0)


class Prefill(_Strict):
    fresh: Fresh
    cached: Cached
    ttft_jitter_sigma: float = Field(0.0, ge=0, le=1)


class KVCache(_Strict):
    provenance: str
    contexts: int = Field(ge=1)
    tokens_per_context: int = Field(ge=1)
    share_used: float = Field(gt=0, le=1)
    vllm_estimate_full_requests: float | None = None


class Memory(_Strict):
    provenance: str
    all_on_gpu_gib: float
    usable_gib: float
    with_plan_gib: float


class BootWhen(_Strict):
    flags: dict[str, str] = Field(default_factory=dict, description="flag (snake_case) -> value as text")
    env_unset: list[str] = Field(default_factory=list)
    plan_env: str | None = None
    plan_format: str = Field("offload-lab", description="the format the pod's offload part reads the plan in")
    plan_ok: bool | None = None


class BootRule(_Strict):
    name: str
    provenance: str
    when: BootWhen
    outcome: Literal["oom_load", "init_failure", "died_first_request", "exited"]
    log: list[str] = Field(min_length=1)


class Prediction(_Strict):
    """Set on a pod model derived from hardware figures (``offload-lab pod predict``): every figure in it is a
    prediction, none a measurement, and a rehearsal on it says so."""

    label: str = Field(min_length=3, description="what the figures are, in words: predicted, from what")
    hardware: dict[str, Any] = Field(default_factory=dict)
    model: str = ""
    factors: dict[str, float] = Field(default_factory=dict)
    factor_sources: dict[str, str] = Field(default_factory=dict)
    provenance: dict[str, str] = Field(default_factory=dict)


class PodModel(_Strict):
    name: str
    description: str = ""
    source: str
    seed: int = 0
    decode: Decode
    prefill: Prefill
    kv_cache: KVCache
    natural_reply_tokens: int = Field(16, ge=1)
    memory: Memory | None = None
    boots: list[BootRule] = Field(default_factory=list)
    leaves_out: list[str] = Field(min_length=1, description="what the model does not emulate, in words")
    prediction: Prediction | None = Field(None, description="present when the file was derived from hardware")

    @property
    def is_prediction(self) -> bool:
        return self.prediction is not None

    # --- decode ------------------------------------------------------------------------------------------------

    def base_tpot_ms(self, streams: float) -> float:
        """TPOT at the agent table's context for ``streams`` running requests: linear in TPOT between rows."""
        t = self.decode.agent_turns
        xs = [float(s) for s in t.streams]
        ys = [1000.0 / m for m in t.median_tok_s]
        return _interp(max(1.0, float(streams)), xs, ys, extrapolate=True)

    def context_factor(self, context_tokens: int) -> float:
        c = self.decode.tpot_vs_context
        ref = self.decode.agent_reference_context.tokens
        at = _interp(float(context_tokens), [float(x) for x in c.context_tokens], c.tpot_ms)
        return at / _interp(float(ref), [float(x) for x in c.context_tokens], c.tpot_ms)

    def tpot_ms(self, streams: float, context_tokens: int) -> float:
        return self.base_tpot_ms(streams) * self.context_factor(context_tokens)

    def rate_sigma(self, streams: float) -> float:
        """Log-normal sigma of a request's rate: its p5 over its median is the table's."""
        t = self.decode.agent_turns
        sig = [math.log(m / p) / Z_P5 for m, p in zip(t.median_tok_s, t.p5_tok_s)]
        return _interp(max(1.0, float(streams)), [float(s) for s in t.streams], sig)

    # --- prefill -----------------------------------------------------------------------------------------------

    def prefill_coefficients(self) -> tuple[float, float]:
        """(a, b) of TTFT = a*n + b*n^2 through the two fresh-prompt points."""
        (n1, n2), (t1, t2) = self.prefill.fresh.prompt_tokens, self.prefill.fresh.ttft_s
        b = (t2 / n2 - t1 / n1) / (n2 - n1)
        return t1 / n1 - b * n1, b

    def cached_read_s_per_token(self) -> float:
        """Seconds per cached token, so that the cached row's request takes its published TTFT."""
        c = self.prefill.cached
        rest = self._prefill_s(c.new_tokens, c.cached_tokens)
        return max(0.0, (c.ttft_s - rest) / c.cached_tokens)

    def _prefill_s(self, new: int, cached: int) -> float:
        a, b = self.prefill_coefficients()
        return a * new + b * ((cached + new) ** 2 - cached ** 2)

    def ttft_s(self, new_tokens: int, cached_tokens: int = 0) -> float:
        return self.cached_read_s_per_token() * cached_tokens + self._prefill_s(new_tokens, cached_tokens)

    # --- KV cache ------------------------------------------------------------------------------------------------

    def kv_capacity_tokens(self) -> int:
        k = self.kv_cache
        return int(k.contexts * k.tokens_per_context / k.share_used)

    def derived(self) -> dict[str, Any]:
        """The constants the rules derive from the published figures (for manifests and docs)."""
        a, b = self.prefill_coefficients()
        return {
            "prefill_a_s_per_token": a, "prefill_b_s_per_token2": b,
            "cached_read_s_per_token": self.cached_read_s_per_token(),
            "kv_capacity_tokens": self.kv_capacity_tokens(),
            "tpot_ms_by_streams": {s: self.base_tpot_ms(s) for s in self.decode.agent_turns.streams},
            "rate_sigma_by_streams": {s: self.rate_sigma(s) for s in self.decode.agent_turns.streams},
            "context_factor_4k_256k": [self.context_factor(4096), self.context_factor(262144)],
        }


def _interp(x: float, xs: list[float], ys: list[float], extrapolate: bool = False) -> float:
    """Piecewise linear; flat outside the points, or extended from the last segment above them."""
    if x <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    if not extrapolate:
        return ys[-1]
    (x0, y0), (x1, y1) = (xs[-2], ys[-2]), (xs[-1], ys[-1])
    return y1 + (y1 - y0) * (x - x1) / (x1 - x0)


def load_pod_model(path: Path | str) -> PodModel:
    path = Path(path)
    if kind_of(path) is None:  # anything else there is named for what it is by read_yaml
        raise InputError(f"pod model {path} does not exist; the published one is configs/pods/study-published.yaml")
    data = inputs.read_yaml(path, "pod model")
    try:
        return PodModel.model_validate(data)
    except ValidationError as e:
        raise inputs.pydantic_input_error(e, f"pod model {path}") from e


# --- boots ---------------------------------------------------------------------------------------------------------

def boot_rule(model: PodModel, flags: dict[str, str], env: dict[str, str],
              plan_check: Any) -> tuple[BootRule | None, str | None]:
    """The first boot rule whose conditions all hold, and the plan's problem if a plan condition was checked.

    ``plan_check(path, format) -> str | None`` returns what is wrong with the plan file at ``path`` (None: it fits)."""
    for rule in model.boots:
        w = rule.when
        if any(flags.get(k) != v for k, v in w.flags.items()):
            continue
        if any(env.get(name) for name in w.env_unset):
            continue
        problem = None
        if w.plan_env is not None:
            path = env.get(w.plan_env)
            problem = plan_check(path, w.plan_format) if path else f"${w.plan_env} is not set"
            if w.plan_ok is not None and (problem is None) != w.plan_ok:
                continue
        return rule, problem
    return None, None


# --- check ---------------------------------------------------------------------------------------------------------

def _increasing(xs: list[float]) -> bool:
    return all(b > a for a, b in zip(xs, xs[1:]))


def check_pod_model(path: Path | str) -> tuple[PodModel, list[str]]:
    """Read a pod model and apply its rules once, as the emulated pod would at its first request: an
    :class:`InputError` naming the field at fault, or the model and notes on what is valid but unusual."""
    m = load_pod_model(path)
    where = f"pod model {path}"
    notes: list[str] = []

    def bad(field: str, msg: str) -> InputError:
        return InputError(f"{where}: {field}: {msg}")

    t = m.decode.agent_turns
    if any(not (math.isfinite(v) and v > 0) for v in t.median_tok_s):
        raise bad("decode.agent_turns.median_tok_s", "every median must be a finite rate above 0 tok/s")
    c = m.decode.tpot_vs_context
    if not _increasing([float(x) for x in c.context_tokens]):
        raise bad("decode.tpot_vs_context.context_tokens", "the two contexts must increase")
    if any(not (math.isfinite(v) and v > 0) for v in c.tpot_ms):
        raise bad("decode.tpot_vs_context.tpot_ms", "both TPOTs must be finite and above 0 ms")
    f = m.prefill.fresh
    if not _increasing([float(x) for x in f.prompt_tokens]) or min(f.prompt_tokens) < 1:
        raise bad("prefill.fresh.prompt_tokens", "the two prompt lengths must be at least 1 and increase")
    if any(not (math.isfinite(v) and v > 0) for v in f.ttft_s):
        raise bad("prefill.fresh.ttft_s", "both TTFTs must be finite and above 0 s")
    a, b = m.prefill_coefficients()
    if a < 0:
        raise bad("prefill.fresh", f"the two points give a negative time per token (a = {a:.3g} s): the longer "
                                   "prompt's TTFT grows more than quadratically; check the numbers")
    if b < 0:
        notes.append(f"prefill.fresh: TTFT grows less than linearly with the prompt (b = {b:.3g}); longer prompts "
                     "are emulated as cheaper per token")
    if m.cached_read_s_per_token() == 0:
        notes.append("prefill.cached: the cached row's TTFT is below what its new tokens alone cost; cached tokens "
                     "are emulated as free")
    cap = m.kv_capacity_tokens()
    if cap < 1:
        raise bad("kv_cache", "the capacity it implies is below one token")
    if m.memory is not None and m.memory.with_plan_gib > m.memory.usable_gib:
        raise bad("memory.with_plan_gib", f"{m.memory.with_plan_gib} GiB is more than usable_gib "
                                          f"{m.memory.usable_gib}: such a pod would not boot")
    for s in t.streams:
        m.tpot_ms(s, c.context_tokens[-1])  # every rule evaluates (interpolation over the table)
    return m, notes
