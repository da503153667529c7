"""Plan files (read, write, check against a checkpoint, bad files), the generators, and the predicted cost."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from fit_helpers import write_named

from offload_lab.fit import checkpoint
from offload_lab.fit import memory
from offload_lab.fit import plan as planmod
from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.fit.memory import GiB, HostSet, MemoryModel, Parallelism
from offload_lab.fit.routing import RoutingCounts

LAYERS, EXPERTS, TOP_K = 3, 8, 2
EXPERT = 3 * 8 * 16 * 2  # gate, up, down of 8 x 16 in BF16


def _ckpt(tmp_path, layer_offset: int = 0):
    specs = [("model.embed_tokens.weight", "BF16", (32, 16)), ("lm_head.weight", "BF16", (32, 16)),
             ("model.norm.weight", "BF16", (16,))]
    for n in range(layer_offset, layer_offset + LAYERS):
        specs += [(f"model.layers.{n}.self_attn.o_proj.weight", "BF16", (16, 16)),
                  (f"model.layers.{n}.mlp.gate.weight", "F32", (EXPERTS, 16))]
        for e in range(EXPERTS):
            for proj, shape in (("gate_proj", (8, 16)), ("up_proj", (8, 16)), ("down_proj", (16, 8))):
                specs.append((f"model.layers.{n}.mlp.experts.{e}.{proj}.weight", "BF16", shape))
    ckpt = checkpoint.read_checkpoint(write_named(tmp_path / f"c{layer_offset}", specs,
                                                  {"model_type": "qwen3_moe", "num_hidden_layers": 99}))
    return ckpt, checkpoint.classify(ckpt)


def _counts(layers=range(LAYERS), tokens=100, seed=0) -> RoutingCounts:
    rng = np.random.default_rng(seed)
    counts = np.zeros((len(layers), EXPERTS), dtype=np.int64)
    for j in range(len(layers)):
        p = rng.dirichlet(np.ones(EXPERTS) * 0.5)
        for _ in range(tokens):
            counts[j, rng.choice(EXPERTS, TOP_K, replace=False, p=p)] += 1
    return RoutingCounts("test", list(layers), EXPERTS, TOP_K, tokens, counts)


# ----------------------------------------------------------------------------------------------------------------
# Generators


def test_uniform_spreads_the_share_evenly(tmp_path):
    _, cls = _ckpt(tmp_path)
    model = MemoryModel(cls, Parallelism(tp=1))
    mask = planmod.gen_uniform(model, fraction=0.3)  # round(0.3 * 24) = 7 over 3 layers: 3, 2, 2 in some order
    per_layer = np.bincount([model.experts.keys[i][0] for i in np.flatnonzero(mask)], minlength=LAYERS)
    assert mask.sum() == 7 and sorted(per_layer) == [2, 2, 3]
    counts = _counts()
    cold = planmod.gen_uniform(model, count=6, counts=counts, within="coldest")
    p = counts.probabilities()
    for layer in range(LAYERS):
        chosen = {model.experts.keys[i][1] for i in np.flatnonzero(cold) if model.experts.keys[i][0] == layer}
        assert len(chosen) == 2
        assert max(p[layer, list(chosen)]) <= min(np.delete(p[layer], list(chosen)))


def test_layer_order_takes_whole_layers_from_the_first(tmp_path):
    _, cls = _ckpt(tmp_path)
    model = MemoryModel(cls, Parallelism(tp=1))
    mask = planmod.gen_layer_order(model, count=10)
    assert [model.experts.keys[i] for i in np.flatnonzero(mask)] == [(0, e) for e in range(8)] + [(1, 0), (1, 1)]


def test_activation_aware_takes_the_globally_coldest_and_beats_the_others(tmp_path):
    _, cls = _ckpt(tmp_path)
    model = MemoryModel(cls, Parallelism(tp=1))
    counts = _counts()
    p = counts.probabilities().reshape(-1)  # keys are (layer, expert) sorted, same order
    mask = planmod.gen_activation_aware(model, counts, count=9)
    assert max(p[mask]) <= min(p[~mask])
    best = planmod.predict(model, _host(model, mask), counts)["host_bytes_per_token"]
    for other in (planmod.gen_uniform(model, count=9), planmod.gen_layer_order(model, count=9)):
        assert best <= planmod.predict(model, _host(model, other), counts)["host_bytes_per_token"]
    capped = planmod.gen_activation_aware(model, counts, count=9, max_layer_fraction=0.375)
    per_layer = np.bincount([model.experts.keys[i][0] for i in np.flatnonzero(capped)], minlength=LAYERS)
    assert per_layer.max() <= 3 and capped.sum() == 9
    with pytest.raises(InputError, match=r"per-layer cap"):
        planmod.gen_activation_aware(model, counts, count=12, max_layer_fraction=0.25)


def _host(model: MemoryModel, mask: np.ndarray) -> HostSet:
    return HostSet(frozenset(model.experts.keys[int(i)] for i in np.flatnonzero(mask)))


def test_budget_fit_moves_the_fewest_experts_that_make_every_gpu_fit(tmp_path):
    _, cls = _ckpt(tmp_path)
    for par in (Parallelism(tp=2), Parallelism(tp=2, ep=True)):
        model = MemoryModel(cls, par)
        full = model.report().per_gpu_bytes
        usable_gib = (full - 2.5 * EXPERT) / GiB  # needs 5 experts' halves under TP
        mask = planmod.gen_budget_fit(model, usable_gib, 0.0)
        assert model.report(_host(model, mask), usable_gib=usable_gib).fits
        for i in np.flatnonzero(mask):  # minimal: putting any one back breaks the fit
            fewer = mask.copy()
            fewer[i] = False
            assert not model.report(_host(model, fewer), usable_gib=usable_gib).fits
    model = MemoryModel(cls, Parallelism(tp=1))
    assert not planmod.gen_budget_fit(model, 1.0, 0.0).any()  # already fits: nothing moves
    with pytest.raises(InputError, match=r"no plan fits.*GPU 0 still needs"):
        planmod.gen_budget_fit(model, 1e-6, 0.0)
    # With counts, the coldest go first.
    counts = _counts()
    full = model.report().per_gpu_bytes
    mask = planmod.gen_budget_fit(model, (full - 4 * EXPERT) / GiB, 0.0, counts=counts)
    p = counts.probabilities().reshape(-1)
    assert mask.sum() == 4 and max(p[mask]) <= min(p[~mask])


def test_generation_scales_to_15360_experts(tmp_path):
    # A stand-in table at the study model's size: 40 layers x 384 experts. Behaviour only, no timing asserted.
    _, cls = _ckpt(tmp_path)
    model = MemoryModel(cls, Parallelism(tp=2))
    keys = [(layer, e) for layer in range(40) for e in range(384)]
    model.experts.keys = keys
    model.experts.index = {k: i for i, k in enumerate(keys)}
    model.experts.bytes = np.full(len(keys), 13_315_584, dtype=np.int64)
    model.experts.rank_bytes = np.full((len(keys), 2), 13_315_584 / 2)
    from offload_lab.fit.routing import synthetic_counts

    counts = synthetic_counts(list(range(40)), 384, 6, 512, seed=3)
    assert planmod.gen_uniform(model, fraction=0.3).sum() == 4608
    assert planmod.gen_activation_aware(model, counts, fraction=0.3).sum() == 4608


# ----------------------------------------------------------------------------------------------------------------
# Prediction


def test_predicted_host_bytes_and_tpot_bound_follow_the_documented_formula(tmp_path):
    _, cls = _ckpt(tmp_path)
    model = MemoryModel(cls, Parallelism(tp=1))
    counts = _counts()
    p = counts.probabilities()
    host = HostSet(frozenset({(0, 1), (2, 5)}))
    bw = planmod.Bandwidth(hbm_gbps=100.0, link_gbps=10.0)
    pr = planmod.predict(model, host, counts, bw)
    assert pr["host_bytes_per_token"] == pytest.approx((p[0, 1] + p[2, 5]) * EXPERT)
    assert pr["routed_bytes_per_token"] == pytest.approx(TOP_K * LAYERS * EXPERT)
    assert pr["gpu_hit_rate"] == pytest.approx(1 - (p[0, 1] + p[2, 5]) / (TOP_K * LAYERS))
    fixed = 3 * (16 * 16 * 2 + EXPERTS * 16 * 4) + 16 * 2 + 32 * 16 * 2  # o_proj, routers, norm, lm_head
    t = fixed / 100e9
    for layer in range(LAYERS):
        h = sum(p[layer, e] * EXPERT for e in range(EXPERTS) if (layer, e) in host.experts)
        r = sum(p[layer, e] * EXPERT for e in range(EXPERTS) if (layer, e) not in host.experts)
        t += max(r / 100e9, h / 10e9)
    assert pr["tpot_lower_bound_ms"] == pytest.approx(t * 1e3)
    # Two tokens per step share experts: per-token host bytes fall, per-step rise.
    pr2 = planmod.predict(model, host, counts, bw, batch=2)
    u = 1 - (1 - p) ** 2
    assert pr2["host_bytes_per_token_per_gpu_max"] == pytest.approx((u[0, 1] + u[2, 5]) * EXPERT / 2)


def test_counts_must_cover_the_checkpoints_layers(tmp_path):
    _, cls = _ckpt(tmp_path, layer_offset=3)  # MoE layers 3, 4, 5 (as DeepSeek-V3 numbers them)
    model = MemoryModel(cls, Parallelism(tp=1))
    with pytest.raises(InputError, match=r"no layer 3"):
        planmod.gen_activation_aware(model, _counts(), count=2)
    assert planmod.gen_activation_aware(model, _counts(layers=[3, 4, 5]), count=2).sum() == 2


# ----------------------------------------------------------------------------------------------------------------
# Files: round trip, check, bad files


def _plan(tmp_path, **fields):
    ckpt, cls = _ckpt(tmp_path)
    model = MemoryModel(cls, Parallelism(tp=1))
    mask = planmod.gen_activation_aware(model, _counts(), count=5)
    counts_path = _counts().save(tmp_path / "counts.json")
    p = planmod.make_plan(model, ckpt, "activation-aware", mask, ["model.embed_tokens.weight"], {"count": 5},
                          counts=_counts(), counts_path=counts_path)
    for k, v in fields.items():
        setattr(p, k, v)
    return p, ckpt, cls


def test_round_trip_and_check_ok(tmp_path):
    p, ckpt, cls = _plan(tmp_path)
    path = planmod.write_plan(p, tmp_path / "plan.json")
    back = planmod.read_plan(path)
    assert back == p
    assert back.statistics.sha256 == runs.sha256_file(tmp_path / "counts.json")
    assert back.checkpoint.fingerprint == ckpt.fingerprint()
    assert planmod.check_plan(back, cls, ckpt) == []
    assert len(back.experts()) == 5 and back.host_tensors == ["model.embed_tokens.weight"]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["host_experts"].update({"7": [1]}), r"layer 7 has no routed experts"),
    (lambda d: d["host_experts"].update({"1": [8]}), r"layer 1 has no expert 8"),
    (lambda d: d["host_tensors"].append("model.layers.0.nothing.weight"), r"model.layers.0.nothing.weight does not "),
    (lambda d: d["host_tensors"].append("model.layers.0.mlp.experts.3.up_proj.weight"),
     r"is a routed expert's tensor \(layer 0, expert 3\)"),
    (lambda d: d["host_tensors"].append("model.embed_tokens.weight"), r"model.embed_tokens.weight is listed twice"),
])
def test_check_names_what_is_wrong(tmp_path, mutate, message):
    p, ckpt, cls = _plan(tmp_path)
    d = json.loads(p.model_dump_json())
    mutate(d)
    bad = planmod.PlanFile.model_validate(d)
    errors = [x.message for x in planmod.check_plan(bad, cls, ckpt) if x.level == "error"]
    assert any(re.search(message, e) for e in errors), errors


def test_different_checkpoint_is_a_warning(tmp_path):
    p, ckpt, cls = _plan(tmp_path)
    p.checkpoint.fingerprint = "0" * 64
    (problem,) = planmod.check_plan(p, cls, ckpt)
    assert problem.level == "warning" and "different tensor layout" in problem.message


@pytest.mark.parametrize("text, message", [
    ("{not json", r"not valid JSON"),
    ("[1, 2]", r"expected a JSON object"),
    ('{"format": "other", "version": 1}', r"field 'format' must be 'offload-lab-plan'"),
    ('{"format": "offload-lab-plan", "version": 2}', r"field 'version'"),
    ('{"format": "offload-lab-plan", "version": 1, "hosts": {}}', r"field 'hosts': Extra inputs"),
    ('{"format": "offload-lab-plan", "version": 1, "host_experts": {"x": [1]}}', r"layer key 'x' is not a layer number"),
    ('{"format": "offload-lab-plan", "version": 1, "host_experts": {"1": [-1]}}', r"negative expert ids"),
    ('{"format": "offload-lab-plan", "version": 1, "host_experts": {"1": [1], "1": [2]}}', r"'1' appears twice"),
    ('{"format": "offload-lab-plan", "version": 1, "host_experts": {"1": [2, 2]}}', r"layer 1 lists expert 2 twice"),
])
def test_bad_plan_files_are_input_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad-plan.json"
    path.write_text(text)
    with pytest.raises(InputError, match=rf"bad-plan.json.*{message}|{message}.*bad-plan.json"):
        planmod.read_plan(path)


def test_missing_plan_file(tmp_path):
    with pytest.raises(InputError, match=r"nope.json does not exist"):
        planmod.read_plan(tmp_path / "nope.json")


def test_host_categories_expand_to_named_tensors(tmp_path):
    _, cls = _ckpt(tmp_path)
    assert planmod.host_tensors_for(cls, ["embedding"], ["lm_head.weight"]) == ["model.embed_tokens.weight",
                                                                                "lm_head.weight"]
    with pytest.raises(InputError, match=r"--host-tensor x does not exist"):
        planmod.host_tensors_for(cls, [], ["x"])
    assert memory.HostSet().experts == frozenset()
