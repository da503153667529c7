"""Progress through every long step (issue 23): the one small API any layer reports through (core.progress), the
campaign display's plain lines (timestamped, a "still running" line whenever it would fall silent, with the counts
so far), a server boot's phases read from its log, and `serve` showing its boot."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offload_lab.campaigns import progress
from offload_lab.core import progress as core_progress
from offload_lab.server import boots

from pod_helpers import fake_stack

STAMP = r"\d\d:\d\d:\d\d "

# Lines a vLLM 0.32 CPU boot printed (data/embedded/boots/*/server.log), in their order, with a few between.
VLLM_LOG = [
    "(APIServer pid=18167) INFO 12-01 23:15:32 [api_utils.py:286] non-default args: {'host': '127.0.0.1'}",
    "(EngineCore pid=18179) INFO 12-01 23:15:42 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config:",
    "(Worker pid=18190) INFO 12-01 23:15:55 [cpu_model_runner.py:68] Starting to load model /models/tiny...",
    "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 10.11it/s]",
    "(Worker pid=18190) INFO 12-01 23:15:57 [cpu_model_runner.py:87] Warming up model for the compilation...",
    "(EngineCore pid=18179) INFO 12-01 23:16:44 [kv_cache_utils.py:2327] CPU KV cache size: 262,144 tokens",
    "(EngineCore pid=18179) INFO 12-01 23:16:45 [core.py:402] init engine (profile, create kv cache, warmup model) "
    "took 48.12 s",
    "(APIServer pid=18167) INFO 12-01 23:16:46 [entry.py:140] Starting vLLM server on http://127.0.0.1:54347",
    "(APIServer pid=18167) INFO:     Application startup complete.",
]


def test_a_boots_phase_is_the_last_step_its_log_reached() -> None:
    assert boots.boot_phase("") == boots.BOOT_STARTING
    seen = [boots.boot_phase("\n".join(VLLM_LOG[:i + 1])) for i in range(len(VLLM_LOG))]
    assert seen[0] == "reading the model's configuration"
    assert seen[4] == "warming up (compiling the model)" and seen[5] == "allocating the KV cache"
    assert seen[-1] == "answering /health"
    # every line moves the boot on or keeps it where it was: no phase comes back after a later one
    order = [w for _, w in boots.BOOT_PHASES]
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen)


def test_without_a_sink_counts_and_phases_are_lines_the_display_reads(capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core_progress, "PRINT_EVERY_S", 3600.0)
    c = core_progress.counting("regime short", 3, "levels")
    c.add()  # within PRINT_EVERY_S of the first line: not printed
    c.add(2)  # the last: always printed
    core_progress.phase("audit", "timing the plans")
    core_progress.end("audit", "plans timed")
    out = capsys.readouterr().out.splitlines()
    assert out == ["regime short: 0/3 levels", "regime short: 3/3 levels", "audit: now timing the plans",
                   "audit: done (plans timed)"]
    # ... which the campaign display turns back into its steps
    buf = io.StringIO()
    with progress.Progress("json", file=buf) as p:
        p.experiment("concurrency", 2)
        p.write("\n".join(out[:3]) + "\nthe notebook's own output\n")
        assert p._steps["regime short"].done == 3 and p._steps["audit"].text == "timing the plans"
        p.write(out[3] + "\n")
        assert "audit" not in p._steps
    kinds = [json.loads(e)["event"] for e in buf.getvalue().splitlines()]
    assert kinds == ["experiment", "count", "count", "phase", "end"]


def test_a_sink_receives_this_process_progress(capsys: pytest.CaptureFixture[str]) -> None:
    buf = io.StringIO()
    with progress.Progress("json", file=buf) as p, core_progress.to(p):
        core_progress.phase("server boot", "loading the weights")
        core_progress.end("server boot", "ready after 3 s")
    assert capsys.readouterr().out == ""  # nothing on stdout while a sink is installed
    events = [json.loads(e) for e in buf.getvalue().splitlines()]
    assert [(e["event"], e["label"], e["text"]) for e in events] == [
        ("phase", "server boot", "loading the weights"), ("end", "server boot", "ready after 3 s")]


def test_plain_lines_are_timestamped_and_never_silent_while_something_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_EVERY_S", 0.2)
    buf = io.StringIO()
    with progress.Progress("quiet", campaign="demo", experiments=1, file=buf) as p:
        p.experiment("context", 3, detail="notebooks/context.ipynb")
        p.cell(2, "runner.run_experiment(...)")
        p.count("context requests", 5, 12, "requests")
        deadline = time.monotonic() + 30
        while "still running" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        p.cell(2, "runner.run_experiment(...)", finished=True)
        p.done("ok")
        p.summary(notes=["ledger session s1"])
    lines = buf.getvalue().splitlines()
    assert all(re.match(STAMP, ln) for ln in lines), lines
    still = next(ln for ln in lines if "still running" in ln)
    # what runs, which cell, and every count so far
    assert "context" in still and "cell 2" in still and "context requests: 5/12 requests" in still
    # one summary, last, with the notes under it
    assert sum("summary:" in ln for ln in lines) == 1 and lines[-1].endswith("ledger session s1")


def test_serve_shows_its_boot_before_it_is_ready(tmp_path: Path) -> None:
    stack_file = fake_stack(tmp_path)
    cmd = [sys.executable, "-m", "offload_lab.cli.main", "serve", "--stack", str(stack_file),
           "--data-dir", str(tmp_path / "data"), "--campaign", "t"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "server ready at" in line:
                break
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines)
    assert "server ready at" in text, text
    boot = [ln for ln in lines if "server boot" in ln]
    assert boot and re.match(STAMP, boot[0]) and boots.BOOT_STARTING in boot[0]
    assert any("ready after" in ln for ln in boot)


def test_a_label_counted_again_from_the_start_is_a_new_step() -> None:
    """Each regime's sweep counts "level 1 streams" again: the second count starts a step of its own."""
    buf = io.StringIO()
    with progress.Progress("quiet", file=buf) as p:
        p.experiment("concurrency", 2)
        for _ in range(2):
            p.count("level 1 streams", 0, 3, "requests")
            p.count("level 1 streams", 3, 3, "requests")
    lines = [ln[len("00:00:00 "):] for ln in buf.getvalue().splitlines()]
    assert lines.count("  level 1 streams: 0/3 requests") == 2
    assert sum(ln.startswith("  level 1 streams: 3/3 requests in") for ln in lines) == 2
