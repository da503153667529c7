"""Secrets never reach what we write or print (issue 14): credentials planted in a URL, in a stack file's env and
args, and in the environment passed through by `env_from`; commands that write runs; every written file grepped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offload_lab.cli import main as cli
from offload_lab.core import runs
from offload_lab.core.redact import redact_args, redact_record, redact_text, redact_url

from pod_helpers import fake_stack

ROOT = Path(__file__).resolve().parents[1]
SECRET = "hunter2-s3cr3t-XYZ"


def _files_holding(folder: Path, secret: str = SECRET) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_redaction_of_urls_text_args_and_records():
    url = f"https://user:{SECRET}@api.example.com:8443/v1/models?api_key={SECRET}&limit=3"
    clean = redact_url(url)
    assert SECRET not in clean and clean.startswith("https://***@api.example.com:8443/v1/models?")
    assert "limit=3" in clean
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert SECRET not in redact_text(f"no server answers at http://u:{SECRET}@h:9 (refused)")
    assert redact_args(["--api-key", SECRET, "--token=" + SECRET, "--port", "8"]) == [
        "--api-key", "***", "--token=***", "--port", "8"]
    record = {"server": {"url": f"http://{SECRET}@h"}, "cmd": ["x", "--api-key", SECRET], "n": 3}
    assert SECRET not in json.dumps(redact_record(record)) and redact_record(record)["n"] == 3


def test_a_run_records_urls_and_commands_without_credentials(tmp_path):
    run = runs.new_run(tmp_path, "c", "e", {"base_url": f"http://user:{SECRET}@127.0.0.1:9"},
                       server={"url": f"http://user:{SECRET}@127.0.0.1:9"})
    run.write_json("boot.json", {"command": ["python", "-m", "vllm", "--api-key", SECRET]})
    run.update(note=f"reached http://k:{SECRET}@host/")
    run.finish("failed", error=f"no server answers at http://user:{SECRET}@127.0.0.1:9")
    assert _files_holding(tmp_path) == []
    m = runs.load_manifest(run.path)
    assert m["server"]["url"] == "http://***@127.0.0.1:9" and runs.verify_run(run.path) == []


@pytest.mark.parametrize("where", ["env", "args"])
def test_a_secret_written_in_a_stack_file_is_refused_and_never_printed(tmp_path, where, capsys):
    f = fake_stack(tmp_path)
    spec = yaml.safe_load(f.read_text())
    if where == "env":
        spec["server"]["env"]["HF_TOKEN"] = SECRET
        words = "HF_TOKEN looks like a secret"
    else:
        spec["server"]["args"] = ["--api-key", SECRET]
        words = "--api-key takes a secret"
    f.write_text(yaml.safe_dump(spec))
    assert cli.main(["stack", "check", str(f)]) == 2
    assert cli.main(["serve", "--stack", str(f), "--data-dir", str(tmp_path / "data")]) == 2
    out = capsys.readouterr()
    assert words in out.err and "env_from" in out.err
    assert SECRET not in out.out + out.err
    assert not (tmp_path / "data").exists()


def test_stack_file_host_and_port_in_args_are_refused(tmp_path, capsys):
    f = fake_stack(tmp_path, args=["--host", "0.0.0.0"])
    assert cli.main(["stack", "check", str(f)]) == 2
    assert "--host is set by offload-lab" in capsys.readouterr().err


def test_env_from_passes_a_secret_to_the_server_and_records_only_its_name(tmp_path):
    f = fake_stack(tmp_path, env_from=["OFFLOAD_TEST_API_KEY"])
    check = subprocess.run([sys.executable, "-m", "offload_lab.cli.main", "stack", "check", str(f), "--json"],
                           capture_output=True, text=True, env={**os.environ, "OFFLOAD_TEST_API_KEY": SECRET})
    assert check.returncode == 0 and SECRET not in check.stdout + check.stderr
    assert json.loads(check.stdout)["env_from"] == ["OFFLOAD_TEST_API_KEY"]
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "offload_lab.cli.main", "serve", "--stack", str(f), "--data-dir",
                             str(data), "--campaign", "t"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "OFFLOAD_TEST_API_KEY": SECRET})
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "server ready at" in line:
                break
        assert any("server ready at" in ln for ln in lines), "".join(lines)
        (boot_dir,) = list((data / "t" / "boots").iterdir())
        server_pid = json.loads((boot_dir / "boot.json").read_text())["pid"]
        # The server got the value (its /proc environ holds it) ...
        assert SECRET.encode() in Path(f"/proc/{server_pid}/environ").read_bytes()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(lines) + out
    # ... and nothing written holds it; the manifest names the variable.
    assert _files_holding(data) == [] and SECRET not in "".join(lines) + out
    assert runs.load_manifest(boot_dir)["server_env_from"] == ["OFFLOAD_TEST_API_KEY"]


def test_env_from_unset_is_an_input_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OFFLOAD_TEST_API_KEY", raising=False)
    f = fake_stack(tmp_path, env_from=["OFFLOAD_TEST_API_KEY"])
    assert cli.main(["serve", "--stack", str(f), "--data-dir", str(tmp_path / "data")]) == 2
    assert "OFFLOAD_TEST_API_KEY" in capsys.readouterr().err


def test_campaign_run_with_credentials_in_url_leaks_them_nowhere(tmp_path):
    data = tmp_path / "data"
    p = subprocess.run([sys.executable, "-m", "offload_lab.cli.main", "campaign", "run",
                        str(ROOT / "configs/campaigns/embedded.yaml"), "--url", f"http://user:{SECRET}@127.0.0.1:9",
                        # The experiments on the campaign's one server: one on a variant of its own is refused
                        # with --url before anything runs.
                        "--only", "context,concurrency", "--data-dir", str(data)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 3 and "http://***@127.0.0.1:9" in p.stderr
    assert SECRET not in p.stdout + p.stderr
    assert (data / "embedded" / "ledger.jsonl").is_file() and _files_holding(data) == []


def test_quality_endpoint_with_credentials_is_refused_at_the_flag(capsys):
    assert cli.main(["quality", "run", "--endpoint", f"http://user:{SECRET}@127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "--api-key-env" in err and SECRET not in err
