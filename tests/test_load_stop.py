"""The stop rule, per level or over a window, against the token source's injected faults (issue 14): it trips where
it should and not before; each fault is classified, and the quick verdict agrees with the full parse."""

from __future__ import annotations

import httpx
import pytest

from offload_lab.bench import clock_check
from offload_lab.core import procs, runs
from offload_lab.load import sweep as concurrency
from offload_lab.load import client as load
from offload_lab.load import closed_loop, workloads
from offload_lab.load.endpoint import Endpoint


@pytest.fixture()
def source():
    proc, url = clock_check.start_source(rate_tok_s=1000.0, ttft_ms=1.0)
    yield url
    procs.terminate_group(proc, 5)


def _faults(url: str, *faults: dict) -> None:
    r = httpx.post(url + "/x/faults", json={"faults": list(faults), "reset": True}, timeout=5)
    assert r.status_code == 200, r.text


def _sweep(tmp_path, url, rule, streams, per_stream):
    """One level per stream count, each with its own requests per stream (levels of a sweep share the rule)."""
    run = runs.new_run(tmp_path, "t", "concurrency")
    stop = closed_loop.StopState(rule)
    stopped = None
    with run.events("events.jsonl") as log:
        for n, k in zip(streams, per_stream):
            spec = workloads.WorkloadSpec(regime="short", prompt_tokens=8, output_tokens=4, block_size=16)
            work = workloads.prepare(spec, url, "token-source", n, k, salt=f"{run.run_id}/{n}")
            result = load.run_sync(closed_loop.run_level(url, work, stop, log, None, workers=1))
            log.append(concurrency.level_event(result))
            if result.stopped:
                stopped = result.stopped
                break
    events = runs.read_events(run.file("events.jsonl"))
    return stopped, [e for e in events if e["kind"] == "level"], [e for e in events if e["kind"] == "request"]


# Level 1: one stream, 60 good requests (0..59). Level 2: two streams of 30 (60..119), with injected HTTP 500s.
RULE = dict(max_error_rate=0.05, min_errors=2, max_consecutive_failures=5)
THREE_FAILURES = {"kind": "http500", "start": 64, "every": 8, "count": 3}  # 64, 72, 80: 3 of 60 at level 2


def test_per_level_rule_trips_on_the_failing_level(tmp_path, source):
    _faults(source, THREE_FAILURES)
    stopped, levels, reqs = _sweep(tmp_path, source, closed_loop.StopRule(**RULE), [1, 2], [60, 30])
    assert stopped and "at 2 stream(s)" in stopped
    assert levels[0]["stopped"] is None  # not before: level 1 was clean
    assert levels[1]["stopped"].startswith("error rate 2/")  # at the second error, 2 of about 13
    assert sum(1 for e in reqs if e["level"] == 2 and not e["ok"]) == 2


def test_sweep_wide_rule_hides_the_same_failing_level(tmp_path, source):
    """The old rule: 60 good requests at one stream dilute the failing level's errors below 5% (3 in 120)."""
    _faults(source, THREE_FAILURES)
    stopped, _levels, reqs = _sweep(tmp_path, source, closed_loop.StopRule(**RULE, scope="sweep"), [1, 2], [60, 30])
    assert stopped is None and len(reqs) == 120


def test_per_level_rule_does_not_trip_below_its_rate(tmp_path, source):
    _faults(source, {"kind": "http500", "start": 64, "every": 36, "count": 2})  # 2 errors, the second at 41 of 60
    stopped, _levels, reqs = _sweep(tmp_path, source, closed_loop.StopRule(**RULE), [1, 2], [60, 30])
    assert stopped is None and sum(1 for e in reqs if not e["ok"]) == 2


def test_window_rule_counts_only_the_last_requests():
    rule = closed_loop.StopRule(max_error_rate=0.1, min_errors=2, max_consecutive_failures=99, scope="window",
                                window=10)
    state = closed_loop.StopState(rule)
    state.begin_level(1)
    outcomes = [False] + [True] * 10 + [False]  # two errors eleven apart: never two in one window of ten
    assert all(state.record(ok) is None for ok in outcomes)
    assert state.record(False) and "in the last 10 requests" in state.reason


def test_window_needs_its_size():
    with pytest.raises(ValueError, match="window"):
        closed_loop.StopRule(scope="window")


def test_replay_takes_the_final_verdicts():
    state = closed_loop.StopState(closed_loop.StopRule(**RULE))
    state.begin_level(4)
    for _ in range(5):
        state.record(True)
    # It trips at the fourth outcome (the second error), as it would have live.
    assert state.replay_level([True, False, True, False, True]) == "error rate 2/4 at 4 stream(s) is above 5% with " \
                                                                   "at least 2 errors"


@pytest.mark.parametrize("fault,kind", [
    ({"kind": "http500"}, "http_status"),
    ({"kind": "error_event", "after": 2}, "stream_error"),
    ({"kind": "disconnect", "after": 2}, "stream_error"),
])
def test_each_fault_is_classified_and_the_quick_verdict_agrees(source, fault, kind):
    _faults(source, fault)

    async def one():
        async with Endpoint(source).async_session() as client:
            rec, reads = await load.stream_raw(client, source, "/v1/completions",
                                               load.completion_payload("m", "x", 6), 6)
            quick = load.quick_ok(rec, reads)
            return quick, load.finish_record(rec, reads)

    quick, rec = load.run_sync(one())
    assert rec.error_kind == kind and quick is False


def test_a_stall_past_the_read_timeout_is_a_timeout(source):
    _faults(source, {"kind": "stall", "after": 2, "stall_s": 1.0})
    endpoint = Endpoint(source, read_timeout_s=0.3)

    async def one():
        async with endpoint.async_session() as client:
            return await load.stream_request(client, endpoint, "/v1/completions",
                                             load.completion_payload("m", "x", 6), 6)

    assert load.run_sync(one()).error_kind == "timeout"


def test_short_output_is_caught_by_the_quick_verdict(source):
    async def one():
        async with Endpoint(source).async_session() as client:
            rec, reads = await load.stream_raw(client, source, "/v1/completions",
                                               load.completion_payload("m", "x", 5), 9)
            return load.quick_ok(rec, reads), load.finish_record(rec, reads)

    quick, rec = load.run_sync(one())
    assert quick is False and rec.error_kind == "short_output"
