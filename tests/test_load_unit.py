"""The load generator's mechanics, against the calibrated token source (a real HTTP server in its own process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from offload_lab.bench import clock_check
from offload_lab.core import procs, runs
from offload_lab.core.errors import ServerError
from offload_lab.load import sweep as concurrency
from offload_lab.load import client as load
from offload_lab.load import closed_loop, workloads


# Timings held to a tolerance: run alone, after the rest of the suite (Makefile, `make test`).
pytestmark = pytest.mark.timing

@pytest.fixture()
def source():
    proc, url = clock_check.start_source(rate_tok_s=200.0, ttft_ms=5.0)
    yield proc, url
    procs.terminate_group(proc, 5)


def test_stop_rule_needs_the_rate_and_the_minimum_count():
    state = closed_loop.StopState(closed_loop.StopRule(max_error_rate=0.05, min_errors=2, max_consecutive_failures=9))
    assert state.record(False) is None  # one error in one request: the rate is passed, the count is not
    for _ in range(10):
        assert state.record(True) is None
    reason = state.record(False)
    assert reason and "2/12" in reason


def test_consecutive_failures_trip_the_breaker():
    state = closed_loop.StopState(closed_loop.StopRule(max_error_rate=1.0, min_errors=100, max_consecutive_failures=3))
    assert [state.record(False) for _ in range(3)][-1].startswith("3 requests failed in a row")


def test_achieved_concurrency_is_time_weighted():
    changes = [(0, +1), (0, +1), (50, -1), (100, -1)]
    assert closed_loop.achieved_concurrency(changes, (0, 100)) == pytest.approx(1.5)
    assert closed_loop.achieved_concurrency(changes, (0, 50)) == pytest.approx(2.0)


def test_sweep_verdict_counts_levels_up_to_the_first_miss():
    import pandas as pd

    levels = pd.DataFrame({"streams": [1, 2, 4, 8], "tok_s_median": [90.0, 45.0, 41.0, 30.0],
                           "tok_s_p5": [80.0, 40.0, 38.0, 20.0], "holds_bar": [True, True, True, False]})
    v = concurrency.sweep_verdict(levels, 40.0, 0.10)
    assert v["held_bar_up_to_streams"] == 4 and v["first_level_below_bar"] == 8
    assert v["provisioning_streams"] == 2  # 41 < 44: the margin is not met at 4
    assert v["p5_by_streams"][8] == 20.0


def test_sweep_against_the_source_measures_its_rate(tmp_path, source):
    _, url = source
    run = runs.new_run(tmp_path, "t", "concurrency")
    params = concurrency.SweepParams(
        workload=workloads.WorkloadSpec(regime="short", prompt_tokens=16, output_tokens=20, block_size=16),
        streams=[1, 4], requests_per_stream=3, bar_tok_s=40.0)
    verdict = concurrency.run_sweep(run, url, params, progress=None)
    levels = concurrency.summarize_run(run.path)
    assert levels["streams"].tolist() == [1, 4]
    assert levels["errors"].tolist() == [0, 0]
    assert levels.loc[1, "achieved_concurrency"] == pytest.approx(4.0, rel=0.2)
    # The source sends a token every 5 ms: TPOT is measured as that (loose: a loaded CI machine delays wake-ups).
    assert levels["tpot_median_ms"].tolist() == pytest.approx([5.0, 5.0], rel=0.3)
    assert verdict["held_bar_up_to_streams"] == 4
    events = runs.read_events(run.file("events.jsonl"))
    reqs = [e for e in events if e["kind"] == "request"]
    assert len(reqs) == 3 + 12 and all(e["output_tokens"] == 20 for e in reqs)
    assert all(len(e["server_sent_ns"]) == 20 for e in reqs)
    # Every token arrives after the source sent it: one clock, and the client never stamps early.
    assert all(a >= s for e in reqs for a, s in zip(e["token_times_ns"], e["server_sent_ns"]))


def test_a_server_that_dies_mid_sweep_stops_it_and_keeps_the_data(tmp_path, source):
    proc, url = source
    run = runs.new_run(tmp_path, "t", "concurrency")
    params = concurrency.SweepParams(
        workload=workloads.WorkloadSpec(regime="short", prompt_tokens=16, output_tokens=8, block_size=16),
        streams=[1, 2, 2], requests_per_stream=2,
        stop_rule=closed_loop.StopRule(max_error_rate=0.05, min_errors=2, max_consecutive_failures=3))
    killed = {"done": False}

    def progress(msg: str) -> None:
        if not killed["done"]:  # after the first level, the server goes away before the second is prepared
            procs.terminate_group(proc, 5)
            killed["done"] = True

    with pytest.raises(concurrency.SweepStopped, match="stop rule ended the sweep"):
        concurrency.run_sweep(run, url, params, progress=progress)
    run.finish("stopped", error="server died")
    events = runs.read_events(run.file("events.jsonl"))
    assert sum(1 for e in events if e["kind"] == "request" and e["ok"]) == 2  # level 1 kept
    assert "the server is gone" in json.loads(run.file("sweep.json").read_text())["stopped"]
    assert concurrency.summarize_run(run.path)["streams"].tolist() == [1]
    assert runs.load_manifest(run.path)["outcome"] == "stopped"


def test_unreachable_server_exits_non_zero_within_seconds(tmp_path):
    port = procs.free_port()
    out = subprocess.run([sys.executable, "-m", "offload_lab.cli.main", "bench", "--url", f"http://127.0.0.1:{port}",
                          "--regime", "short", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert f"no OpenAI-compatible server answers at http://127.0.0.1:{port}" in out.stderr
    (run_dir,) = list((tmp_path / "bench" / "concurrency").iterdir())
    assert runs.load_manifest(run_dir)["outcome"] == "failed"


def test_bad_streams_flag_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "offload_lab.cli.main", "bench", "--url", "http://127.0.0.1:9",
                          "--regime", "short", "--streams", "1,two", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "argument --streams: '1,two'" in out.stderr


def test_clock_check_times_every_token(tmp_path):
    run = runs.new_run(tmp_path, "t", "clock_check")
    summary = clock_check.run_clock_check(run, [1, 4], rate_tok_s=100.0, ttft_ms=5.0, tokens=10,
                                          requests_per_stream=2, progress=None)
    assert summary["streams"].tolist() == [1, 4]
    assert (summary["tokens_timed"] > 0).all()
    assert (summary["token_error_ms_p50"] >= 0).all()
    assert summary["tpot_median_ms"].tolist() == pytest.approx([10.0, 10.0], rel=0.3)


def test_a_stream_error_event_is_classified(source):
    _, url = source
    rec = load.run_one(url, "/v1/nothing-here", {"stream": True})
    assert rec.error_kind == "http_status" and rec.status == 404


def test_short_output_is_a_failure_with_partial_tokens_kept(source):
    _, url = source
    rec = load.run_one(url, "/v1/completions", load.completion_payload("m", "x", 5), expected_tokens=9)
    assert rec.error_kind == "short_output" and rec.output_tokens == 5 and len(rec.token_times_ns) == 5


def test_check_reachable_names_the_url():
    with pytest.raises(ServerError, match="127.0.0.1:9"):
        load.check_reachable("http://127.0.0.1:9", timeout_s=2)


def test_a_server_that_dies_during_a_level_is_classified_and_stops_the_sweep(tmp_path):
    """Killed while streams are in flight: partial tokens kept, failures classified, the breaker trips."""
    import threading

    proc, url = clock_check.start_source(rate_tok_s=20.0, ttft_ms=5.0)
    run = runs.new_run(tmp_path, "t", "concurrency")
    params = concurrency.SweepParams(
        workload=workloads.WorkloadSpec(regime="short", prompt_tokens=16, output_tokens=400, block_size=16),
        streams=[2], requests_per_stream=3,
        stop_rule=closed_loop.StopRule(max_error_rate=0.05, min_errors=2, max_consecutive_failures=3))
    # The fork server that starts each level's journal writer is up before the clock starts (its first start
    # imports the load client, seconds on a busy host, which would leave the level no time before the kill).
    from multiprocessing import forkserver

    from offload_lab.load import workers
    workers._context()
    forkserver.ensure_running()
    timer = threading.Timer(1.5, lambda: procs.terminate_group(proc, 5))
    timer.start()
    try:
        with pytest.raises(concurrency.SweepStopped):
            concurrency.run_sweep(run, url, params, progress=None)
    finally:
        timer.cancel()
        procs.terminate_group(proc, 5)
    reqs = [e for e in runs.read_events(run.file("events.jsonl")) if e["kind"] == "request"]
    assert reqs and all(not e["ok"] for e in reqs)
    assert {e["error_kind"] for e in reqs} <= {"connect", "stream_error", "short_output"}
    assert any(len(e["token_times_ns"]) > 0 for e in reqs)  # what arrived before the death is kept


def test_a_chunk_carrying_several_tokens_counts_as_that_many():
    """Speculative decoding sends several tokens in one chunk; the server's continuous usage says how many."""
    def chunk(text: str, done: int) -> bytes:
        body = {"choices": [{"index": 0, "text": text, "finish_reason": None}],
                "usage": {"prompt_tokens": 4, "completion_tokens": done}}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    reads = [(100, chunk(" a", 1)), (200, chunk(" b c d", 4) + chunk(" e", 5)), (300, b"data: [DONE]\n\n")]
    rec = load.RequestRecord("r", "/v1/completions", t_sent_ns=0)
    load._parse_events(rec, load.sse_events(reads))
    assert rec.chunk_tokens == [1, 3, 1] and rec.output_tokens == 5
    assert rec.token_times_ns == [100, 200, 200]
    assert rec.tpot_ms == pytest.approx((200 - 100) / 1e6 / 4)


def test_an_event_split_across_reads_is_stamped_when_it_completes():
    reads = [(10, b'data: {"choices": [{"index": 0, "te'), (20, b'xt": "x"}], "usage": {"completion_tokens": 1}}\n\n')]
    events = load.sse_events(reads)
    assert len(events) == 1 and events[0][0] == 20
