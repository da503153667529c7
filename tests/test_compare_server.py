"""All four load generators side by side on the embedded vLLM server, at one level (issue 25): `offload-lab
compare` as a person runs it, few requests a window. Needs the peers' environments (`make peers-env`, which
`make test` builds)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from offload_lab.bench import compare
from offload_lab.bench.peers import PEER_ENVS
from offload_lab.core import paths

ROOT = paths.find_root()

MISSING = [env for env in PEER_ENVS.values() if not (ROOT / env / ".installed").exists()]
pytestmark = [pytest.mark.server,
              pytest.mark.skipif(bool(MISSING), reason=f"peers' environments {MISSING} absent: run `make peers-env`")]


def test_four_tools_side_by_side_with_the_server_checking_every_window(tmp_path, embedded_server):
    cmd = [sys.executable, "-m", "offload_lab.cli.main", "compare", "--url", embedded_server.url,
           "--tools", "vllm,aiperf,guidellm", "--num-prompts", "2", "--concurrency", "2", "--rounds", "2",
           "--output-tokens", "8", "--out", str(tmp_path), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    run_dir = tmp_path / "bench" / compare.EXPERIMENT / doc["run"].rsplit("/", 1)[-1]
    windows = pd.read_csv(run_dir / compare.WINDOWS)
    tools = ["ours", "vllm", "aiperf", "guidellm"]
    # Every tool ran once a round, in mirrored order, and the server saw exactly its requests and tokens, no
    # prompt token served from cache.
    assert sorted(windows["tool"].unique()) == sorted(tools)
    first = windows[windows["round"] == 0].sort_values("position")["tool"].tolist()
    second = windows[windows["round"] == 1].sort_values("position")["tool"].tolist()
    assert second == first[::-1]
    assert (windows["server_requests"] == 2).all() and (windows["server_generation_tokens"] == 16).all()
    assert (windows["server_cached_tokens"] == 0).all() and windows["checks"].isna().all()
    # Each tool's figures divided by the server's, and a verdict per peer and figure.
    for tool in tools:
        t = doc["tools"][tool]
        assert t["windows"] == 2 and not t["checks_failed"]
        assert t["ttft_ratio"] > 0 and t["tpot_ratio"] > 0
    verdicts = {(v["peer"], v["figure"]): v["verdict"] for v in doc["verdicts"]}
    assert set(verdicts) == {(p, f) for p in tools[1:] for f in ("ttft_ratio", "tpot_ratio")}
    assert set(verdicts.values()) <= {"agree", "differ"}
    assert "aiperf inter_chunk_latency" in doc["not_comparable"]
    assert doc["peer_versions"]["aiperf"] and doc["peer_versions"]["guidellm"]
    # Each peer's own output is kept beside ours.
    assert {f"round{r}_{p}.json" for r in (0, 1) for p in tools[1:]} <= {p.name for p in run_dir.iterdir()}
