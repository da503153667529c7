"""`offload-lab pod predict` and `pod model check` (issue 32): the hardware catalog, a model's sizes checked against
transformers' own model, the study's pod predicted from hardware beside its published figures, E9, the home rigs'
upper bound, the answer for a team, and the pod model file the emulated pod reads."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import yaml

from offload_lab.cli.main import main
from offload_lab.core.errors import InputError
from offload_lab.emulate.podmodel import check_pod_model, load_pod_model
from offload_lab.predict.catalog import load_catalog
from offload_lab.predict.shape import read_config, shape_from_config

ROOT = Path(__file__).resolve().parents[1]
QWEN = ROOT / "tests" / "fixtures" / "configs" / "qwen3-30b-a3b.json"  # Qwen/Qwen3-30B-A3B's config.json, verbatim
STUDY_STACK = ROOT / "configs" / "stacks" / "study-pod.yaml"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.fixture(scope="module")
def study_json():
    import contextlib
    import io
    import os

    here = os.getcwd()
    os.chdir(ROOT)
    try:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["pod", "predict", "--stack", str(STUDY_STACK.relative_to(ROOT)), "--json"]) == 0
    finally:
        os.chdir(here)
    return json.loads(buf.getvalue())


def test_the_catalog_has_every_named_gpu_each_figure_with_its_source():
    cat = load_catalog()
    for name in ("rtx-pro-6000-blackwell", "h100-sxm", "h100-pcie", "h200", "b200", "b300", "l40s", "a100-sxm-80gb",
                 "rtx-5090", "rtx-4090", "v100-sxm2-32gb", "apple-m3-ultra"):
        _, g = cat.gpu(name)
        for fig in (g.memory_gb, g.hbm_gbps, g.bf16_tflops, g.fp8_tflops, g.fp4_tflops):
            assert len(fig.source) > 10
        assert g.hbm_gbps.value and g.memory_gb.value
        cat.link(g.host_link)
    assert cat.gpu("RTXPRO6000")[0] == "rtx-pro-6000-blackwell"  # SkyPilot's name, as stack files give it
    with pytest.raises(InputError, match="ambiguous"):
        cat.gpu("h100")
    with pytest.raises(InputError, match="not in the hardware catalog"):
        cat.gpu("tpu-v9")


def test_a_user_file_extends_and_overrides_the_catalog(tmp_path):
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump({"gpus": {"my-gpu": {
        "name": "My GPU", "memory_gb": {"value": 64, "source": "my vendor's datasheet"},
        "hbm_gbps": {"value": 2000, "source": "my vendor's datasheet"},
        "bf16_tflops": {"value": 400, "source": "my vendor's datasheet"},
        "fp8_tflops": {"value": None, "source": "none"}, "fp4_tflops": {"value": None, "source": "none"},
        "host_link": "pcie-gen5-x16"}}}))
    cat = load_catalog(f)
    assert cat.gpu("my-gpu")[1].hbm_gbps.value == 2000
    assert cat.gpu("h200")[1].memory_gb.value == 141
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: {x: {name: X}}\n")
    with pytest.raises(InputError, match="bad.yaml"):
        load_catalog(bad)


def test_the_model_sizes_match_transformers_own_model():
    """Parameter counts from the config, against the model transformers builds from the same config (no weights)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = read_config(QWEN)
    shape = shape_from_config(cfg, "qwen3-30b-a3b")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg))
    counts = {"experts": 0, "router": 0, "embed": 0, "rest": 0}
    for name, p in model.named_parameters():
        n = p.numel()
        if ".experts." in name or name.endswith(".experts.gate_up_proj") or name.endswith(".experts.down_proj"):
            counts["experts"] += n
        elif ".mlp.gate." in name or name.endswith(".mlp.gate.weight"):
            counts["router"] += n
        elif "embed_tokens" in name:
            counts["embed"] += n
        elif "norm" not in name:
            counts["rest"] += n
    assert counts["experts"] == pytest.approx(shape.moe_layers * shape.experts * shape.expert_params, rel=1e-9)
    assert counts["router"] == pytest.approx(shape.moe_layers * shape.experts * cfg["hidden_size"], rel=1e-9)
    # attention projections and the output head are what every token reads besides its experts
    assert counts["rest"] == pytest.approx(shape.dense_params, rel=1e-9)
    # Qwen's model card: 30.5B parameters in all, 3.3B activated
    total = counts["experts"] + counts["router"] + counts["embed"] + counts["rest"]
    assert total == pytest.approx(30.5e9, rel=0.01)
    # (the card counts the embedding table as activated; the physics reads one row of it per token, so leaves it out)
    assert shape.active_params + counts["embed"] == pytest.approx(3.3e9, rel=0.02)


def test_the_study_pod_is_predicted_beside_every_published_figure(study_json):
    figs = study_json["figures"]
    assert {"name", "published", "predicted", "fitted"} <= set(figs[0])
    fitted = [f for f in figs if f["fitted"]]
    predicted = [f for f in figs if not f["fitted"]]
    assert 1 <= len(fitted) <= 3, "at most three free factors, each fitted on one named figure"
    names = {f["name"] for f in figs}
    for must in ("tpot_4k_ms", "tpot_256k_ms", "ttft_128k_s", "ttft_260k_s", "cached_256k_4_users_ttft_p95_s",
                 "kv_share_five_128k", "vllm_full_length_requests", "agent_turns_4_median_tok_s"):
        assert must in names
    errors = [abs(f["predicted"] / f["published"] - 1) for f in predicted]
    assert statistics.median(errors) <= 0.25
    within = [f for f in predicted if 1 / 1.5 <= f["predicted"] / f["published"] <= 1.5]
    assert len(within) >= len(predicted) - 1
    # a figure over the bound says why, in its own row
    for f in predicted:
        if f not in within:
            assert "not predictable" in f["note"], f
    # the published figures come from the transcription, not from this test
    pub = yaml.safe_load((ROOT / "configs" / "published" / "study.yaml").read_text())
    rows = pub["tables"]["agent_turns"]["rows"]
    by = {f["name"]: f for f in figs}
    assert [by[f"agent_turns_{int(r[0])}_median_tok_s"]["published"] for r in rows] == [r[1] for r in rows]


def test_e9_and_the_home_rigs(study_json):
    e9 = study_json["e9"]
    assert "predicted" in e9["label"] and "no measurement" in e9["label"]
    assert e9["fits"]["fits_gpu"] and e9["fits"]["host_experts"] == 0
    rates = [e9["agent_turns_tok_s"][str(s)] for s in (1, 2, 3, 4, 6, 8)]
    assert rates == sorted(rates, reverse=True)
    # an upper bound never falls below a measured speed
    rigs = study_json["home_rigs"]
    assert len(rigs) == 3
    for r in rigs:
        assert r["upper_bound_tok_s"] >= r["measured_tok_s"], r


def test_one_command_from_a_config_to_seats_and_cost_in_the_users_currency(capsys, tmp_path):
    before = set(tmp_path.iterdir())
    code = main(["pod", "predict", "--config", str(QWEN), "--gpu", "h100-sxm", "--gpus", "1", "--host-ram", "512",
                 "--link", "pcie-gen5-x16", "--price", "2.50 USD", "--seat-price", "200 USD", "--team-sizes", "30",
                 "--max-model-len", "40960", "--context", "16000", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    a = out["answer"]
    assert "predicted" in out["label"]
    assert a["verdict"].startswith("fits")
    assert [s["streams"] for s in a["streams"]] == list(range(1, 9))
    assert a["streams_kept"] >= 1
    team = a["teams"][0]
    assert team["team"] == 30 and team["currency"] == "USD" and team["pods"] >= 1
    assert team["subscriptions_per_month"] == pytest.approx(30 * 200)
    assert "figures" not in out  # the published table belongs to the study's pod only
    assert set(tmp_path.iterdir()) == before  # nothing written


def test_a_price_without_currency_or_in_another_currency_is_refused(capsys):
    assert main(["pod", "predict", "--config", str(QWEN), "--gpu", "h200", "--price", "2.5"]) == 2
    assert "currency" in capsys.readouterr().err
    assert main(["pod", "predict", "--config", str(QWEN), "--gpu", "h200", "--price", "2.5 USD",
                 "--seat-price", "180 EUR"]) == 2
    assert "one currency" in capsys.readouterr().err
    assert main(["pod", "predict", "--config", str(QWEN), "--gpu", "no-such-gpu"]) == 2


def test_the_derived_pod_model_is_what_the_emulated_pod_reads(tmp_path, capsys):
    out = tmp_path / "predicted.yaml"
    assert main(["pod", "predict", "--stack", str(STUDY_STACK.relative_to(ROOT)), "--out", str(out)]) == 0
    capsys.readouterr()
    model = load_pod_model(out)
    assert model.is_prediction and "predicted" in model.prediction.label
    _, notes = check_pod_model(out)
    assert main(["pod", "model", "check", str(out)]) == 0
    assert "predicted from hardware" in capsys.readouterr().out
    # its agent table is the prediction's (the study's one-stream median is a fitted figure)
    assert model.decode.agent_turns.median_tok_s[0] == pytest.approx(186, rel=0.01)


def test_pod_model_check_names_the_field(tmp_path, capsys):
    assert main(["pod", "model", "check", "configs/pods/study-published.yaml"]) == 0
    data = yaml.safe_load((ROOT / "configs" / "pods" / "study-published.yaml").read_text())
    data["decode"]["agent_turns"]["median_tok_s"][2] = "fast"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert main(["pod", "model", "check", str(bad)]) == 2
    assert "median_tok_s" in capsys.readouterr().err
    data = yaml.safe_load((ROOT / "configs" / "pods" / "study-published.yaml").read_text())
    data["prefill"]["fresh"]["ttft_s"] = [18.33, 500.0]
    bad.write_text(yaml.safe_dump(data))
    assert main(["pod", "model", "check", str(bad)]) == 2
    assert "prefill.fresh" in capsys.readouterr().err
    data = yaml.safe_load((ROOT / "configs" / "pods" / "study-published.yaml").read_text())
    data["memory"]["with_plan_gib"] = 120
    bad.write_text(yaml.safe_dump(data))
    assert main(["pod", "model", "check", str(bad)]) == 2
    assert "memory.with_plan_gib" in capsys.readouterr().err


def test_the_kv_share_note_is_vllms_arithmetic_and_names_what_is_unpublished(study_json):
    by = {f["name"]: f for f in study_json["figures"]}
    share, est = by["kv_share_five_128k"], by["vllm_full_length_requests"]
    # share x estimate does not depend on the capacity: 5 contexts x their tokens / max_model_len, both predicted
    stack = yaml.safe_load(STUDY_STACK.read_text())
    mml = stack["server"]["flags"]["max_model_len"]
    from offload_lab.predict.study import KV_CONTEXTS, _private_tokens
    assert share["predicted"] * est["predicted"] == pytest.approx(KV_CONTEXTS * _private_tokens() / mml, rel=1e-3)
    implied = KV_CONTEXTS * _private_tokens() / (share["published"] * est["published"])
    assert f"{implied:,.0f}" in share["note"] and "max_model_len" in share["note"]


def test_the_cached_tail_waits_for_one_prefill_step_of_the_other_users():
    from offload_lab.predict import study

    cal = study.calibrate()
    p = cal["predictor"]
    one = p.prefill_s(512, 262144, 1)["ttft_s"]
    assert p.prefill_tail_s(512, 262144, 1) == pytest.approx(one)
    tails = [p.prefill_tail_s(512, 262144, u) for u in (1, 2, 3, 4)]
    assert tails == sorted(tails) and tails[-1] > p.prefill_s(512, 262144, 4)["ttft_s"]
    row = next(f for f in cal["figures"] if f["name"] == "cached_256k_4_users_ttft_p95_s")
    assert not row["fitted"] and "no free parameter" in row["note"]


def test_compare_prediction_on_the_reference_campaign(capsys):
    from offload_lab.published.transcription import load_transcription

    assert main(["compare-prediction", "configs/campaigns/reference.yaml", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["missing"] == [] and out["figures"]
    # what it calls measured is the study's transcription, read from the reference campaign's published run
    t = load_transcription(ROOT / "configs" / "published" / "study.yaml")
    by = {f["name"]: f for f in out["figures"]}
    assert by["cached_256k_4_users_ttft_p95_s"]["measured"] == next(
        f.value for f in t.figures if f.key == "shared_256k_ttft_p95_s")
    assert by["cached_256k_4_users_ttft_p95_s"]["run"]
    assert out["summary"]["median_abs_error"] <= 0.25
    assert main(["compare-prediction", "configs/campaigns/reference.yaml"]) == 0
    text = capsys.readouterr().out
    assert "fitted" in text and "kv_share_five_128k" in text and "median error" in text


def test_compare_prediction_without_data_or_a_predictable_pod_is_refused(capsys, tmp_path):
    assert main(["compare-prediction", "configs/campaigns/reference.yaml", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no data" in err[0]
    assert main(["compare-prediction", "configs/campaigns/embedded.yaml"]) == 2
    assert "names no pod" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", [["pod", "predict"], ["pod", "model", "check"], ["compare-prediction"]])
def test_each_help_fits_one_screen(cmd, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert main([*cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and len(out.splitlines()) <= 40
