"""`serve` never leaves a server behind (issue 14): killed with SIGKILL, its vLLM (here the fake one, with a child
process standing in for vLLM's engine core) is stopped by the watchdog and the boot run is marked stopped; SIGINT,
SIGTERM and SIGHUP all stop it the same way, with the reason recorded; the parent-death signal alone stops a child
whose parent is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from offload_lab.core import runs

from pod_helpers import fake_stack

# A server module that starts a grandchild (as vLLM starts its engine core), records its pid, then runs the fake
# vLLM. The grandchild is in the server's process group, out of reach of the first process's parent-death signal.
ENGINE = textwrap.dedent("""
    import os, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(os.environ["ENGINE_PID_FILE"], "w").write(str(child.pid))
    import fake_vllm
    fake_vllm.main()
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead, only not reaped yet
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def _start_serve(tmp_path: Path) -> tuple[subprocess.Popen, Path, list[int]]:
    stack_file = fake_stack(tmp_path, env={"ENGINE_PID_FILE": str(tmp_path / "engine.pid")})
    (tmp_path / "fakecode" / "fake_engine.py").write_text(ENGINE)
    stack_file.write_text(stack_file.read_text().replace("module: fake_vllm", "module: fake_engine"))
    cmd = [sys.executable, "-m", "offload_lab.cli.main", "serve", "--stack", str(stack_file),
           "--data-dir", str(tmp_path / "data"), "--campaign", "t"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "server ready at" in line:
            break
    assert any("server ready at" in ln for ln in lines), "".join(lines)
    (boot_dir,) = list((tmp_path / "data" / "t" / "boots").iterdir())
    server_pid = json.loads((boot_dir / "boot.json").read_text())["pid"]
    engine_pid = int((tmp_path / "engine.pid").read_text())
    return proc, boot_dir, [server_pid, engine_pid]


def _cleanup(pids: list[int]) -> None:
    for p in pids:
        if _alive(p):
            os.kill(p, signal.SIGKILL)


def test_serve_killed_with_sigkill_takes_its_server_with_it(tmp_path):
    proc, boot_dir, pids = _start_serve(tmp_path)
    try:
        assert all(_alive(p) for p in pids)
        proc.kill()  # SIGKILL: no handler runs, nothing of offload-lab can clean up
        proc.wait(timeout=30)
        assert _wait_gone(pids) == [], "the server or its engine outlived serve"
        deadline = time.monotonic() + 30
        while runs.load_manifest(boot_dir)["outcome"] == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        _cleanup(pids)
    m = runs.load_manifest(boot_dir)
    assert m["outcome"] == "stopped" and "died without stopping its server" in m["error"]
    boot = json.loads((boot_dir / "boot.json").read_text())
    assert boot["outcome"] == "ready" and boot["stopped"]["by"] == "watchdog"
    assert runs.verify_run(boot_dir) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_stop_signals_stop_serve_alike_and_record_the_reason(tmp_path, sig):
    proc, boot_dir, pids = _start_serve(tmp_path)
    try:
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert _wait_gone(pids, 10) == []
    finally:
        _cleanup(pids)
    reason = f"stopped by {sig.name}"
    assert reason in out
    boot = json.loads((boot_dir / "boot.json").read_text())
    assert boot["stopped"] == {**boot["stopped"], "reason": reason, "by": "offload-lab"}
    m = runs.load_manifest(boot_dir)
    assert m["outcome"] == "ok" and m["stop_reason"] == reason
    assert m["process"]["pid"] == proc.pid and runs.verify_run(boot_dir) == []


PARENT = textwrap.dedent("""
    import os, subprocess, sys
    from offload_lab.server.watchdog import child_setup
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                             preexec_fn=child_setup(os.getpid()))
    print(child.pid, flush=True)
    import time; time.sleep(600)
""")


def test_parent_death_signal_alone_stops_a_child_in_its_own_session(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        assert _alive(child)
        parent.kill()
        parent.wait(timeout=10)
        assert _wait_gone([child], 10) == []
    finally:
        _cleanup([child])
