"""The audit notebook through the campaign runner: a verified run directory with the data files the paper cites."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from fit_helpers import tiny_model  # noqa: F401
from test_routing import _torch_python

from offload_lab.experiments.audit import runner as audit
from offload_lab.campaigns import runner as campaign
from offload_lab.core import runs

SMALL_SPEC = """name: small-exl3
naming: deepseek_v4
num_hidden_layers: 4
num_hash_layers: 1
num_experts: 16
num_experts_per_tok: 2
n_shared_experts: 1
hidden_size: 256
moe_intermediate_size: 128
vocab_size: 512
attention: mla
num_attention_heads: 4
q_lora_rank: 64
kv_lora_rank: 32
qk_nope_head_dim: 16
qk_rope_head_dim: 16
v_head_dim: 16
expert_format: exl3
expert_bits: 3
dense_format: bf16
engram_tables:
  - {name: engram.0.weight, rows: 4096, dim: 256, bits: 4}
shards: 6
"""


@pytest.mark.slow
@pytest.mark.skipif(_torch_python() is None, reason="no Python with torch and transformers (make server-env)")
def test_audit_notebook_writes_a_verified_run(tmp_path, repo_root, tiny_model):
    spec = tmp_path / "small.yaml"
    spec.write_text(SMALL_SPEC)
    params = {"tiny_model_dir": str(tiny_model), "synthetic_spec": str(spec), "tp": 2, "usable_gib": 0.002,
              "reserve_gib": 0.0, "host_fraction": 0.25, "host_categories": ["engram", "embedding"],
              "hbm_gbps": 1000.0, "link_gbps": 50.0, "benchmark_repeats": 1, "plan_repeats": 1,
              "host_ram_gib": 0.0001}
    f = tmp_path / "campaign.yaml"
    f.write_text(yaml.safe_dump({"name": "fit", "experiments": [
        {"experiment": "audit", "notebook": str(repo_root / "notebooks/audit.ipynb"), "needs_server": False,
         "parameters": params}]}))
    result = campaign.run_campaign(f, data_root=tmp_path / "data", log=lambda s: None)
    (run_dir,) = result.runs
    assert runs.verify_run(run_dir) == []
    m = runs.load_manifest(run_dir)
    # The manifest records the validated parameters: those given, and every default.
    assert m["outcome"] == "ok" and m["parameters"] == audit.AuditParams(**params).model_dump()
    expected = {"tiny_audit.json", "synthetic_audit.json", "fit.csv", "generators.csv", "benchmarks.csv",
                "events.jsonl", "routing_counts_calibration.json", "routing_counts_heldout.json",
                "routing_counts_shifted.json", "plans/tiny-activation-aware.json", "plans/synthetic-uniform.json",
                "figures/audit_fit.svg", "figures/plan_traffic.svg"}  # its own figures, drawn by the notebook
    assert expected <= set(m["files"])
    gens = pd.read_csv(run_dir / "generators.csv")
    assert set(gens["plan"]) >= {"uniform", "layer-order", "budget-fit", "activation-aware"}
    assert gens["host_experts"].nunique() == 1  # every generator at the same host share
    aa = gens.set_index("plan").loc["activation-aware"]
    assert aa["host_bytes_per_token_calibration"] == gens["host_bytes_per_token_calibration"].min()
    # Summaries are recomputed from the raw events.
    pd.testing.assert_frame_equal(audit.summarize_run(run_dir), pd.read_csv(run_dir / "benchmarks.csv"),
                                  check_dtype=False)
    bench = pd.read_csv(run_dir / "benchmarks.csv").set_index("benchmark")
    assert bench.loc["audit_http_over_local", "value"] > 0
    assert bench.loc["plan_activation-aware", "experts"] == 4 * 16
    syn = json.loads((run_dir / "synthetic_audit.json").read_text())
    assert syn["memory"]["tp_none"]["fits"] is False and syn["routed_experts"]["experts"] == 64
    fit = pd.read_csv(run_dir / "fit.csv")
    assert set(fit["checkpoint"]) == {"tiny", "synthetic"}
    # Host RAM in the fit: the plans' pinned buffers, exact and rounded, against a host too small for them.
    planned = fit[(fit["checkpoint"] == "synthetic") & (fit["host_experts"] > 0)]
    assert (planned["host_ram_rounded_gib"] >= planned["host_ram_exact_gib"]).all()
    assert not planned["host_fits"].astype(bool).any() and not planned["fits"].astype(bool).any()
    assert syn["host_ram"]["tp_uniform"]["fits_rounded"] is False
