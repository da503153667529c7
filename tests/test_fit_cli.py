"""The CLI: audit, plan make|check|show, memory-math, checkpoint synth, each with --json; exit codes."""

from __future__ import annotations

import json
import shutil

import pytest
from fit_helpers import http_root, tiny_model  # noqa: F401

from offload_lab.cli import main as cli
from offload_lab.fit import routing


# The weights alone against --usable-gib (these tests check the per-GPU weight arithmetic on a tiny model; the KV cache
# and the activations reserve that "fits" keeps free by default are tested in test_hfmodel.py).
WEIGHTS_ONLY = ("--reserve-gib", "0", "--context", "0")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_audit_json_local_and_http(capsys, tiny_model, http_root):
    code, out, _ = _run(capsys, "audit", str(tiny_model), "--tp", "1", "--usable-gib", "1", *WEIGHTS_ONLY, "--json")
    assert code == 0
    local = json.loads(out)
    assert local["architecture"] == "qwen3_moe" and local["memory"]["without_plan"]["fits"] is True
    assert local["routed_experts"]["experts"] == 128 and local["kv"]["kind"] in ("gqa", "mha")
    root, server = http_root
    shutil.copytree(tiny_model, root / "tiny")
    code, out, _ = _run(capsys, "audit", f"{server.url}/tiny", "--tp", "2", "--usable-gib", "0.01", "--json")
    remote = json.loads(out)
    assert code == 1  # does not fit: exit 1, and says so
    assert remote["memory"]["without_plan"]["fits"] is False
    assert remote["checkpoint"]["fingerprint"] == local["checkpoint"]["fingerprint"]
    assert remote["checkpoint"]["requests"] == 1


def test_plan_make_check_show_and_audit_with_plan(capsys, tiny_model, tmp_path):
    plan = tmp_path / "plan.json"
    code, out, _ = _run(capsys, "plan", "make", str(tiny_model), "--generator", "budget-fit", "--usable-gib", "0.04",
                        *WEIGHTS_ONLY, "--host-category", "embedding", "--out", str(plan), "--json")
    assert code == 0
    made = json.loads(out)
    assert made["memory"]["fits"] is True and made["host_experts"] > 0
    assert made["host_tensors"] == ["model.embed_tokens.weight"]
    code, out, _ = _run(capsys, "plan", "check", str(plan), str(tiny_model), "--json")
    assert code == 0 and json.loads(out) == {"plan": str(plan), "ok": True, "problems": []}
    code, out, _ = _run(capsys, "audit", str(tiny_model), "--tp", "1", "--usable-gib", "0.04", *WEIGHTS_ONLY,
                        "--with-plan", str(plan))
    assert code == 0 and "with plan" in out and "fits" in out
    code, out, _ = _run(capsys, "plan", "show", str(plan), "--json")
    assert code == 0 and json.loads(out)["generator"] == "budget-fit"


def test_plan_make_activation_aware_with_counts_and_prediction(capsys, tiny_model, tmp_path):
    counts = routing.synthetic_counts([0, 1, 2, 3], 32, 4, 200, seed=0)
    counts_path = counts.save(tmp_path / "counts.json")
    plan = tmp_path / "aa.json"
    code, out, _ = _run(capsys, "plan", "make", str(tiny_model), "--generator", "activation-aware", "--fraction",
                        "0.25", "--counts", str(counts_path), "--out", str(plan), "--json")
    assert code == 0 and json.loads(out)["host_experts"] == 32
    code, out, _ = _run(capsys, "plan", "show", str(plan), "--checkpoint", str(tiny_model), "--counts",
                        str(counts_path), "--hbm-gbps", "100", "--link-gbps", "10", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["predicted"]["tpot_lower_bound_ms"] > 0
    assert shown["predicted"]["host_share_of_routed_traffic"] < 0.25  # the coldest quarter carries less


def test_plan_check_exits_2_naming_the_problem(capsys, tiny_model, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "offload-lab-plan", "version": 1, "host_experts": {"9": [0], "0": [40]},
                               "host_tensors": ["no.such.tensor"]}))
    code, out, err = _run(capsys, "plan", "check", str(bad), str(tiny_model))
    assert code == 2
    assert "layer 9 has no routed experts" in err and "layer 0 has no expert 40" in err
    assert "no.such.tensor does not exist" in err
    code, _, err = _run(capsys, "audit", str(tiny_model), "--tp", "1", "--usable-gib", "1", "--plan", str(bad))
    assert code == 2 and "does not fit this checkpoint" in err
    assert "--plan is deprecated, use --with-plan" in err  # the old spelling still reads the plan
    (tmp_path / "broken.json").write_text("{")
    code, _, err = _run(capsys, "plan", "show", str(tmp_path / "broken.json"))
    assert code == 2 and "broken.json: not valid JSON" in err


def test_activation_aware_without_counts_is_an_input_error(capsys, tiny_model, tmp_path):
    code, _, err = _run(capsys, "plan", "make", str(tiny_model), "--generator", "activation-aware", "--fraction",
                        "0.3", "--out", str(tmp_path / "x.json"))
    assert code == 2 and "needs routing counts" in err


def test_memory_math_json_rows(capsys):
    code, out, _ = _run(capsys, "memory-math", "--params", "763.2B", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 6
    assert all(set(r) == {"format", "bits_per_weight", "weight_gb", "smallest_memory_gb", "ladder", "ladder_unit"}
               for r in rows)
    assert {r["ladder"] for r in rows} == {"offload-lab"}
    q4 = next(r for r in rows if r["format"] == "Q4_K_M")
    assert q4["weight_gb"] == pytest.approx(763.2 * 4.89 / 8)
    code, _, err = _run(capsys, "memory-math", "--params", "many")
    assert code == 2 and "--params 'many': not a parameter count" in err
    code, out, _ = _run(capsys, "memory-math", "--params", "763.2B")
    assert code == 0 and "ladder offload-lab (GiB)" in out
    code, out, _ = _run(capsys, "memory-math", "--params", "763.2B", "--ladder", "community-page")
    assert code == 0 and "printed rows are for 748,600,000,000 parameters" in out  # another count: not compared


def test_memory_math_reproduces_the_community_pages_table(capsys):
    """The page's table, transcribed: every weight within 0.5% of the printed one, every smallest memory equal, and
    both printed with the difference."""
    code, out, _ = _run(capsys, "memory-math", "--params", "748.6e9", "--ladder", "community-page", "--json")
    rows = {r["format"]: r for r in json.loads(out)}
    assert code == 0 and len(rows) == 7 and "native release format" in rows
    for r in rows.values():
        assert r["smallest_memory_agrees"] is True and r["smallest_memory_gb"] == r["printed_smallest_memory_gb"]
        if r["bits_per_weight"] is not None:
            assert abs(r["weight_difference_pct"]) < 0.5 and r["weight_within_tolerance"] is True
            assert r["weight_difference_gb"] == pytest.approx(r["weight_gb"] - r["printed_weight_gb"])
    assert rows["Q4_K_M"]["printed_weight_gb"] == 458.0 and rows["Q4_K_M"]["smallest_memory_gb"] == 512
    assert rows["Q5_K_M"]["smallest_memory_gb"] == 1024
    code, out, _ = _run(capsys, "memory-math", "--params", "748.6B", "--ladder", "community-page")
    assert code == 0 and "458.0" in out and "457.6" in out and "-0.4 GB" in out and "DIFFERS" not in out


def test_checkpoint_synth(capsys, repo_root, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: small\nnaming: qwen3_moe\nnum_hidden_layers: 2\nnum_experts: 8\nnum_experts_per_tok: 2\n"
                    "hidden_size: 64\nmoe_intermediate_size: 32\nvocab_size: 128\nattention: gqa\n"
                    "num_attention_heads: 4\nnum_key_value_heads: 2\nhead_dim: 16\nshards: 3\n")
    code, out, _ = _run(capsys, "checkpoint", "synth", str(spec), "--out", str(tmp_path / "ck"), "--json")
    info = json.loads(out)
    assert code == 0 and info["shards"] == 3 and info["tensors"] > 0
    code, out, _ = _run(capsys, "audit", str(tmp_path / "ck"), "--tp", "2", "--usable-gib", "1", *WEIGHTS_ONLY,
                        "--json")
    assert code == 0 and json.loads(out)["routed_experts"]["experts"] == 16


def test_help_explains_every_new_subcommand(capsys):
    for argv in (["audit", "--help"], ["plan", "make", "--help"], ["plan", "check", "--help"],
                 ["plan", "show", "--help"], ["memory-math", "--help"], ["checkpoint", "synth", "--help"],
                 ["routing", "collect", "--help"]):
        try:  # main() returns argparse's exit code; older versions let SystemExit out
            code = cli.main(argv)
        except SystemExit as e:
            code = e.code
        assert code == 0
        out = capsys.readouterr().out
        assert "--json" in out or "--help" in out
