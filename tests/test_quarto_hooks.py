"""Quarto's project hooks (_quarto.yml pre-render and post-render) run this checkout's own offload-lab, whatever PATH
holds (issue 23): each hook is run as Quarto runs it, from the project root with a PATH that has no environment of
ours on it. `--help` stands in for the work: it proves the command resolves and parses, without rendering."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("hook", ["pre-render", "post-render"])
def test_the_hook_finds_the_checkouts_offload_lab_without_path(hook: str) -> None:
    command = yaml.safe_load((ROOT / "_quarto.yml").read_text())["project"][hook]
    args = shlex.split(command)
    assert args[0] != "offload-lab", "a bare name needs offload-lab on PATH"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "OFFLOAD_LAB_ROOT")}
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run([*args, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"offload-lab paper {args[-1]}" in done.stdout
