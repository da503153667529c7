"""Time acceleration of an emulated pod (``campaign rehearse --time-scale S``), and its exact inverse.

An emulated pod may serve its waits faster than the real pod would, but only where the client's clock still resolves
them. Each wait is mapped by ``served = w`` when ``w <= floor``, else ``floor + (w - floor) / S``: a wait is never
served shorter than its floor, and the map is monotone and affine above the floor, so

- the inverse, ``pod = m`` when ``m <= floor``, else ``floor + (m - floor) * S``, turns a measured wait back into pod
  time exactly (up to the client's own error times S, which the floor keeps small against the wait);
- it commutes with medians and percentiles (monotone), and with a request's mean TPOT (affine above the floor).

Two floors: the TTFT's (prefill waits, seconds) and the TPOT's (milliseconds), both set from the load generator's
measured clock error (``campaigns.rehearse.clock_floors``). The record (:meth:`TimeScale.record`) is written into
the rehearsal's record, every run's manifest (``time_scale``) and the emulated server's boot log; a measurement is
converted back once, by whoever reads it against the pod, from the record of the run it comes from.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_KEY = "time_scale"  # the record's key in a run's manifest
# Waits above their floor are served this many times faster in a rehearsal. 20 brings study-pod.yaml as written from
# about 85-90 minutes here to under 20 (docs/rehearsal.md); `--time-scale 1` is real time. Here, not in the rehearsal,
# so that the command line's help reads it without importing the rehearsal (pandas and the report).
DEFAULT_TIME_SCALE = 20.0


class TimeScale(BaseModel):
    model_config = ConfigDict(extra="forbid")

    factor: float = Field(1.0, ge=1.0, description="S: waits above their floor are served (w - floor) / S longer "
                                                   "than the floor; 1 is real time")
    ttft_floor_s: float = Field(0.0, ge=0.0, description="TTFTs at or under this are served in real time")
    tpot_floor_ms: float | None = Field(None, ge=0.0, description="TPOTs at or under this are served in real time; "
                                                                  "None: decode is never accelerated")
    why: str = ""
    floor_source: dict[str, Any] = Field(default_factory=dict)

    @property
    def accelerated(self) -> bool:
        return self.factor > 1.0

    def _serve(self, w: float, floor: float | None) -> float:
        if floor is None or self.factor == 1.0 or w <= floor:
            return w
        return floor + (w - floor) / self.factor

    def _pod(self, m: float, floor: float | None) -> float:
        if floor is None or self.factor == 1.0 or m <= floor:
            return m
        return floor + (m - floor) * self.factor

    # served (by the emulator)
    def serve_ttft_s(self, ttft_s: float) -> float:
        return self._serve(ttft_s, self.ttft_floor_s)

    def serve_tpot_ms(self, tpot_ms: float) -> float:
        return self._serve(tpot_ms, self.tpot_floor_ms)

    # back to pod time (by whoever compares a measurement with the pod)
    def pod_ttft_s(self, measured_s: float) -> float:
        return self._pod(measured_s, self.ttft_floor_s)

    def pod_tpot_ms(self, measured_ms: float) -> float:
        return self._pod(measured_ms, self.tpot_floor_ms)

    def pod_tok_s(self, measured_tok_s: float, streams: float = 1.0, tokens: int | None = None) -> float:
        """A rate of ``streams`` streams' tokens (per stream: 1), back through its TPOT. ``tokens``: the reply's
        length when the rate is the load generator's per-request ``n / decode_s`` (n tokens over n - 1 TPOTs):
        an error of n/(n-1) in the TPOT would be multiplied by the factor on the way back."""
        if not measured_tok_s or measured_tok_s != measured_tok_s:
            return measured_tok_s
        k = tokens / (tokens - 1) if tokens and tokens > 1 else 1.0
        return streams * 1000.0 * k / self.pod_tpot_ms(streams * 1000.0 * k / measured_tok_s)

    def to_pod(self, value: float, kind: str, streams: float = 1.0, tokens: int | None = None) -> float:
        """``kind``: ttft_s, tpot_ms or tok_s (what the measurement is); anything else is not a duration."""
        if value is None or value != value:
            return value
        if kind == "tok_s":
            return self.pod_tok_s(float(value), streams, tokens)
        return {"ttft_s": self.pod_ttft_s, "tpot_ms": self.pod_tpot_ms}.get(kind, lambda v: v)(float(value))

    def record(self) -> dict[str, Any]:
        return {**self.model_dump(), "accelerated": self.accelerated,
                "rule": "served = w if w <= floor else floor + (w - floor) / factor; pod = m if m <= floor else "
                        "floor + (m - floor) * factor (TTFT with ttft_floor_s, TPOT with tpot_floor_ms)"}

    def server_args(self) -> list[str]:
        args = ["--time-scale", f"{self.factor:g}", "--ttft-floor-s", repr(self.ttft_floor_s)]
        if self.tpot_floor_ms is not None:
            args += ["--tpot-floor-ms", repr(self.tpot_floor_ms)]
        return args


REAL_TIME = TimeScale()


def of_manifest(manifest: dict[str, Any]) -> TimeScale:
    """The time scale a run's manifest records (real time when it records none)."""
    rec = manifest.get(MANIFEST_KEY)
    if not isinstance(rec, dict):
        return REAL_TIME
    return TimeScale(**{k: rec[k] for k in TimeScale.model_fields if k in rec})


class _Scaled:
    """A pod model's pace as the accelerated emulator serves it (for the model's seconds of what ran here)."""

    def __init__(self, model: Any, scale: TimeScale):
        self.model, self.scale = model, scale

    def ttft_s(self, new_tokens: int, cached_tokens: int = 0) -> float:
        return self.scale.serve_ttft_s(self.model.ttft_s(new_tokens, cached_tokens))

    def tpot_ms(self, streams: float, context_tokens: int) -> float:
        return self.scale.serve_tpot_ms(self.model.tpot_ms(streams, context_tokens))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def served_pace(model: Any, scale: TimeScale) -> Any:
    return model if not scale.accelerated else _Scaled(model, scale)
