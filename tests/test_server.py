"""Integration tests against the real vLLM CPU server serving the tiny MoE."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from offload_lab.load import client as load
from offload_lab.load import prompts
from offload_lab.core import runs
from offload_lab.server import stack
from offload_lab.core.errors import ServerError

pytestmark = pytest.mark.server


def test_completion_is_timed_from_the_servers_usage(embedded_server):
    payload = load.completion_payload(embedded_server.model_name, "hello world", 24)
    rec = load.run_one(embedded_server.url, "/v1/completions", payload, expected_tokens=24)
    assert rec.ok, rec.error
    assert rec.output_tokens == 24 == rec.completion_tokens
    assert sum(rec.chunk_tokens) == 24
    assert rec.t_sent_ns < rec.t_first_token_ns <= rec.t_last_token_ns <= rec.t_end_ns
    assert rec.token_times_ns == sorted(rec.token_times_ns)
    assert rec.ttft_s > 0 and rec.tpot_ms > 0
    assert len(rec.itl_ms) == len(rec.token_times_ns) - 1


def test_chat_role_chunk_is_not_the_first_token(embedded_server):
    payload = load.chat_payload(embedded_server.model_name, [{"role": "user", "content": "hi"}], 8)
    rec = load.run_one(embedded_server.url, "/v1/chat/completions", payload, expected_tokens=8)
    assert rec.ok, rec.error
    # The role-only chunk is recorded apart; it may share a read with the first token when the prefill is quick.
    assert rec.t_role_ns is not None and rec.t_role_ns <= rec.t_first_token_ns
    assert rec.text and rec.chunk_tokens[0] >= 1
    assert rec.output_tokens == 8


def test_prompts_have_the_exact_token_count_the_server_counts(embedded_server):
    with httpx.Client(timeout=30) as http:
        tok = prompts.Tokenizer(embedded_server.url, embedded_server.model_name, http)
        for n in (5, 100, 777):
            text = prompts.exact_prompt(tok, n, salt=f"t{n}")
            assert tok.count(text) == n
            tag = f"[{prompts.salt_tag(f't{n}')}]"
            # The prompt starts with its salt's tag (cut short when the prompt is shorter than the tag).
            assert text.startswith(tag) or tag.startswith(text)


def test_unreachable_server_fails_fast_with_a_clear_message():
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="no OpenAI-compatible server answers at http://127.0.0.1:9"):
        load.check_reachable("http://127.0.0.1:9")
    assert time.monotonic() - t0 < 30  # a bound on hanging, not a speed claim


def _stack_copy(tmp_path: Path, repo_root: Path, extra_args: list[str]) -> Path:
    data = yaml.safe_load((repo_root / "configs/stacks/embedded.yaml").read_text())
    data["server"]["args"] = list(data["server"]["args"]) + extra_args
    data["server"]["ready_timeout_s"] = 300
    f = tmp_path / "stack.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def test_a_bad_flag_is_a_classified_boot_with_its_log_kept(tmp_path, repo_root):
    st = stack.load_stack(_stack_copy(tmp_path, repo_root, ["--no-such-flag"]), root=repo_root)
    with pytest.raises(ServerError, match="exited"):
        stack.start_server(st, tmp_path / "data", "t")
    (boot_dir,) = list((tmp_path / "data" / "t" / "boots").iterdir())
    boot = json.loads((boot_dir / "boot.json").read_text())
    assert boot["outcome"] == "exited"
    assert "no-such-flag" in boot["log_tail"]
    assert "no-such-flag" in (boot_dir / "server.log").read_text()
    manifest = runs.load_manifest(boot_dir)
    assert manifest["outcome"] == "failed" and runs.verify_run(boot_dir) == []


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_serve_cli_starts_and_stops_leaving_no_process(tmp_path, repo_root):
    """`offload-lab serve` as a user runs it: ready, Ctrl-C, and nothing of the server left running."""
    cmd = [sys.executable, "-m", "offload_lab.cli.main", "serve", "--stack", str(repo_root / "configs/stacks/embedded.yaml"),
           "--data-dir", str(tmp_path / "data"), "--campaign", "t"]
    proc = subprocess.Popen(cmd, cwd=repo_root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "server ready at" in line:
                break
        assert any("server ready at" in ln for ln in lines), "".join(lines)
        url = next(ln for ln in lines if "server ready at" in ln).split()[3]
        assert httpx.get(url + "/health", timeout=10).status_code == 200
        (boot_dir,) = list((tmp_path / "data" / "t" / "boots").iterdir())
        boot = json.loads((boot_dir / "boot.json").read_text())
        server_pid = boot.get("pid")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, "".join(lines) + out
    assert "server stopped" in out
    assert server_pid and not _group_alive(server_pid)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=5)
    manifest = runs.load_manifest(boot_dir)
    assert manifest["outcome"] == "ok"
    assert json.loads((boot_dir / "boot.json").read_text())["stop"]["group_left"] is False
