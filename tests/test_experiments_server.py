"""The worked example of an experiment as a unit: cached_prefix against the real embedded server, its claims
resolved from what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload_lab.campaigns import runner as campaign
from offload_lab.core import runs
from offload_lab.paper import claims, discovery

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.server
def test_cached_prefix_runs_against_the_server_and_its_claims_resolve(tmp_path, embedded_server):
    f = tmp_path / "c.yaml"
    f.write_text(json.dumps({"name": "cptest", "experiments": [{
        "experiment": "cached_prefix", "notebook": str(ROOT / "notebooks/cached_prefix.ipynb"),
        "parameters": {"prefix_tokens": 512, "suffix_tokens": 16, "output_tokens": 8, "users": 2,
                       "requests_per_user": 2}}]}))
    result = campaign.run_campaign(f, data_root=tmp_path / "data", url=embedded_server.url)
    (run_dir,) = result.runs
    m = runs.load_manifest(run_dir)
    assert m["outcome"] == "ok" and m["kind"] == "cached_prefix"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["users"] == 2 and summary["requests_ok"] >= 1
    assert summary["ttft_p95_s"] > 0 and summary["tpot_median_ms"] > 0
    reg = {k: v for k, v in discovery.claim_registry().items() if k.startswith("cached_prefix.")}
    got = claims.resolve_claims("cptest", tmp_path / "data", ROOT, registry=reg)
    assert {c.name for c in got.ok()} == set(reg)
    assert got["cached_prefix.users"].text == "2"
