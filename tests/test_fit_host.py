"""Issue 12 for fit: host RAM with and without the pinned allocator's rounding, the TPOT bound for the study's plan
on its pod, and the dsv41 host-plan.json round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fit_helpers import tiny_model  # noqa: F401

from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError
from offload_lab.fit import checkpoint, host_ram, hostplan, memory, predict
from offload_lab.fit import plan as planmod
from offload_lab.fit.memory import GiB, HostSet, MemoryModel, Parallelism

# ----------------------------------------------------------------------------------------------------------------
# Host RAM


def test_pow2_rounding_as_the_caching_host_allocator_does():
    assert [host_ram.pow2_ceil(n) for n in (0, 1, 4096, 4097)] == [0, 1, 4096, 8192]
    g = int(4.5 * GiB)
    assert host_ram.pinned_size(g) == 8 * GiB  # vLLM PR #58185: a 4.5 GiB w13_weight takes 8 GiB
    assert host_ram.pinned_size(g, rounding=False) == g
    assert host_ram.pinned_size(g, max_round_bytes=2**20) == g  # pinned_max_round_threshold_mb:1


def _model(tiny_model, tp=2) -> tuple[MemoryModel, checkpoint.Classification]:
    ckpt = checkpoint.read_checkpoint(tiny_model)
    cls = checkpoint.classify(ckpt)
    return MemoryModel(cls, Parallelism(tp=tp), ckpt.config), cls


def test_host_ram_of_a_plan_exact_and_rounded_against_the_hosts_ram(tiny_model):
    model, cls = _model(tiny_model)
    mask = planmod.gen_uniform(model, 0.3)
    hs = HostSet(frozenset(model.experts.keys[i] for i in np.flatnonzero(mask)),
                 frozenset(planmod.host_tensors_for(cls, ["embedding"])))
    ram = host_ram.host_ram(model, hs)
    expert_bytes = float((model.experts.bytes * mask).sum())
    embed = sum(it.nbytes for it in cls.items if it.category == "embedding")
    assert ram.exact_bytes == pytest.approx(expert_bytes + embed, abs=16)  # every rank's share, one host
    assert ram.exact_bytes < ram.rounded_bytes < 2 * ram.exact_bytes
    layers = len({layer for layer, _ in hs.experts})
    assert ram.blocks == 2 * (2 * layers + 1)  # per rank: w13 and w2 per layer, plus the embedding
    assert host_ram.host_ram(model, hs, granularity="expert").blocks == 2 * (len(hs.experts) + 1)
    between = (ram.exact_bytes + ram.rounded_bytes) / 2 / GiB
    d = host_ram.host_ram(model, hs, host_ram_gib=between).to_dict()
    assert d["fits_exact"] is True and d["fits_rounded"] is False and d["fits"] is False  # pow2 is the default
    assert host_ram.host_ram(model, hs, host_ram_gib=between, rounding=False).fits is True
    assert host_ram.host_ram(model, HostSet()).to_dict()["exact_gib"] == 0
    with pytest.raises(InputError, match=r"--host-ram-gib nan"):
        host_ram.host_ram(model, hs, host_ram_gib=float("nan"))


def test_audit_fails_when_the_host_ram_does_not_hold_the_plan(tmp_path, tiny_model, capsys):
    plan = tmp_path / "p.json"
    assert cli.main(["plan", "make", str(tiny_model), "--generator", "uniform", "--fraction", "0.3", "--tp", "2",
                     "--out", str(plan)]) == 0
    capsys.readouterr()
    base = ["audit", str(tiny_model), "--tp", "2", "--usable-gib", "1", "--reserve-gib", "0", "--context", "0",
            "--with-plan", str(plan), "--json"]
    assert cli.main(base) == 0
    r = json.loads(capsys.readouterr().out)
    h = r["host_ram"]["with_plan"]
    assert h["rounded_gib"] > h["exact_gib"] > 0 and h["fits"] is None and r["fits"] is True
    tight = (h["exact_gib"] + h["rounded_gib"]) / 2
    assert cli.main(base + ["--host-ram-gib", f"{tight:.9f}"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert r["fits"] is False and r["memory"]["with_plan"]["fits"] is True
    assert r["host_ram"]["with_plan"]["fits_exact"] is True and r["host_ram"]["with_plan"]["fits_rounded"] is False
    assert cli.main(base + ["--host-ram-gib", f"{tight:.9f}", "--pinned", "exact"]) == 0
    capsys.readouterr()
    assert cli.main(base[:-1] + ["--host-ram-gib", f"{tight:.9f}"]) == 1
    out = capsys.readouterr().out
    assert "host RAM:" in out and "power-of-two" in out and "does NOT fit" in out


# ----------------------------------------------------------------------------------------------------------------
# The TPOT lower bound on the study's pod


def test_study_gen30_bound_and_more_experts_on_host():
    rows = predict.study_pod_bounds()
    by = {(r["plan"], r["link"]): r for r in rows}
    gen30 = by[("gen30", "raw Gen5 x16")]
    assert predict.STUDY_LAYOUT.expert_bytes == pytest.approx(13.32e6, rel=1e-3)  # the anchor's 13.32 MB
    assert gen30["host_experts"] == 4608 and gen30["experts"] == 15360
    assert gen30["host_bytes_per_step_per_gpu"] == pytest.approx(479.4e6, rel=1e-3)
    assert gen30["tpot_lower_bound_ms"] == pytest.approx(7.61, abs=0.01)
    assert by[("gen30", "measured pinned H2D on a PRO 6000")]["tpot_lower_bound_ms"] == pytest.approx(9.31, abs=0.01)
    assert gen30["routing"] == "uniform" and any("MTP" in x for x in gen30["leaves_out"])
    for link in predict.STUDY_LINK_GBPS:  # more experts on host: a higher bound, as the study found throughput lower
        bounds = [by[(p, link)]["tpot_lower_bound_ms"] for p in ("gen30", "40% on host", "50% on host")]
        assert bounds == sorted(bounds) and bounds[0] < bounds[1]
    for batch in (2, 4):
        b = predict.study_pod_bounds(batch=batch)[0]
        assert b["step_lower_bound_ms"] > gen30["step_lower_bound_ms"] and b["batch"] == batch
    with pytest.raises(InputError, match=r"15,360 routed experts"):
        predict.uniform_bound(predict.STUDY_LAYOUT, 20000, predict.Bandwidth(1792.0, 63.0))


def test_uniform_bound_agrees_with_predict_under_uniform_routing(tiny_model):
    model, _ = _model(tiny_model, tp=1)
    mask = planmod.gen_uniform(model, 0.25)
    hs = HostSet(frozenset(model.experts.keys[i] for i in np.flatnonzero(mask)))
    bw = predict.Bandwidth(100.0, 10.0)
    top_k = 4
    pr = predict.uniform_predict(model, hs, top_k, bw)
    layers, experts = len(model.experts.layers), len(model.experts.keys) // len(model.experts.layers)
    layout = predict.ExpertLayout(layers, experts, top_k, float(model.experts.bytes[0]), tp=1)
    dense = pr["tpot_lower_bound_ms"]  # predict adds the per-token dense weights; the layout bound leaves them out
    ub = predict.uniform_bound(layout, int(mask.sum()), bw)
    assert pr["routing"] == "uniform" and ub["tpot_lower_bound_ms"] < dense
    fixed = sum(r for c, r in model.report(hs).ranks[0].device_bytes.items() if c in predict.PER_TOKEN_CATEGORIES)
    ub2 = predict.uniform_bound(layout, int(mask.sum()), bw, dense_bytes_per_gpu=fixed)
    assert ub2["tpot_lower_bound_ms"] == pytest.approx(dense, rel=1e-6)


# ----------------------------------------------------------------------------------------------------------------
# dsv41 host-plan.json


def test_export_import_round_trip_through_the_cli(tmp_path, tiny_model, capsys):
    plan, exported, back = tmp_path / "p.json", tmp_path / "host-plan.json", tmp_path / "back.json"
    assert cli.main(["plan", "make", str(tiny_model), "--generator", "uniform", "--fraction", "0.25",
                     "--host-category", "embedding", "--out", str(plan)]) == 0
    assert cli.main(["plan", "export", str(plan), "--format", "dsv41-host-plan", "--out", str(exported)]) == 0
    out = capsys.readouterr().out
    assert "not carried (the format has no place for it): host_tensors: model.embed_tokens.weight" in out
    mapping = json.loads(exported.read_text())
    assert all(k.startswith("model.layers.") and k.endswith(".ffn.experts") for k in mapping)
    assert cli.main(["plan", "import", str(exported), "--format", "dsv41-host-plan", "--checkpoint",
                     str(tiny_model), "--out", str(back)]) == 0
    original, imported = planmod.read_plan(plan), planmod.read_plan(back)
    assert imported.host_experts == original.host_experts
    assert imported.checkpoint.fingerprint == original.checkpoint.fingerprint
    assert imported.generator.name == "imported"
    assert hostplan.to_host_plan(imported)[0] == mapping  # and again: a fixed point
    assert cli.main(["plan", "export", str(plan), "--format", "dsv41-host-plan", "--out", str(exported)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err


def test_the_published_pack_plan_reads_and_writes_back(tmp_path):
    # what pack/prepare_pack.py writes: every expert of every one of the 40 layers on host
    theirs = {f"model.layers.{i}.ffn.experts": list(range(384)) for i in range(40)}
    path = tmp_path / "host-plan.json"
    path.write_text(json.dumps(theirs))
    p = hostplan.from_host_plan(hostplan.read_host_plan(path), moe_layers=list(range(40)), experts_per_layer=384)
    assert sum(len(v) for v in p.host_experts.values()) == 15360
    hostplan.write_host_plan(hostplan.to_host_plan(p)[0], tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == json.dumps(theirs)
    prefixed = hostplan.from_host_plan({"language_model.model.layers.7.ffn.experts": [2],
                                        "model.layers.8.ffn.experts": []})
    assert prefixed.host_experts == {"7": [2]}


@pytest.mark.parametrize("bad, message", [
    ([1, 2], r"a host plan is a JSON object"),
    ({"model.layers.x.ffn.experts": [1]}, r"does not name a MoE layer"),
    ({"model.layers.01.ffn.experts": [1]}, r"does not name a MoE layer"),
    ({"model.layers.1.ffn.experts": ["1"]}, r"strs, not integer expert ids"),
    ({"model.layers.1.ffn.experts": [True]}, r"booleans"),
    ({"model.layers.1.ffn.experts": [1], "lm.model.layers.1.ffn.experts": [2]}, r"layer 1 appears twice"),
    ({"model.layers.1.ffn.experts": [384]}, r"expert id 384 is out of range"),
    ({"model.layers.1.ffn.experts": [3, 3]}, r"lists expert 3 twice"),
    ({"model.layers.50.ffn.experts": [3]}, r"layer 50 is not a MoE layer"),
])
def test_bad_host_plans_are_refused(bad, message):
    with pytest.raises(InputError, match=message):
        hostplan.from_host_plan(bad, moe_layers=list(range(40)), experts_per_layer=384)


def test_memory_reexports_keep_working():
    assert memory.memory_math is not None and memory.parse_count("1B") == 1e9
