"""A shortened rehearsal of the study-pod campaign, end to end: dry runs, emulated boots, every experiment through the
real runner and notebooks, the record, and the paper; the study's answer follows from the emulated measurements."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import binom

from offload_lab.campaigns import rehearse
from offload_lab.core import runs
from offload_lab.load import sweep as concurrency

pytestmark = [pytest.mark.slow, pytest.mark.timing]

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "configs" / "campaigns" / "study-pod.yaml"
SHORT = ROOT / "configs" / "rehearsals" / "study-pod-short.yaml"


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rehearsal")
    # Real time: the reference the accelerated subset below is checked against.
    return rehearse.rehearse(CAMPAIGN, data_root=tmp / "data", overrides_file=SHORT, paper_out=tmp / "paper",
                             log=lambda s: None, time_scale_factor=1)


def test_every_experiment_ok_boots_as_published_nothing_would_fail(rehearsal):
    rec = rehearsal.record
    assert rec["all_ok"] and [f for f in rehearsal.failures if f.get("level") == "error"] == []
    assert {r["experiment"]: r["outcome"] for r in rec["experiments"]} == {
        e: "ok" for e in ("context", "concurrency", "agent_turns", "cached_prefix", "quality", "capacity", "cost")}
    assert {b["boot"]: b["outcome"] for b in rec["boots"]} == {
        "all-on-gpu": "oom_load", "plan-gen30": "ready", "upstream-uva-block64": "init_failure",
        "upstream-uva-block128": "died_first_request"}
    assert all(b["as_expected"] for b in rec["boots"])
    # The dry runs found the pod stack's unpinned items (a real install refuses them without --allow-unpinned).
    assert any(f.get("level") == "unpinned" for f in rehearsal.failures)
    # Never into the pod campaign's own data; the rehearsal's name and shortening are recorded.
    assert rehearsal.campaign == "study-pod-rehearsal-short" and rec["shortened"] and rec["time_scale"] == 1
    assert rec["overrides"]["sha256"] == runs.sha256_file(SHORT)


def test_the_study_answer_follows_from_the_emulated_runs(rehearsal):
    agent = _latest(rehearsal, "agent_turns")
    levels = pd.read_csv(agent / "regimes.csv")
    verdict = concurrency.sweep_verdict(levels, 40.0, 0.10)
    assert verdict["provisioning_streams"] == 4  # 4 streams kept at the bar with the 10% margin ...
    assert levels.set_index("streams").loc[6, "tok_s_median"] < 44.0  # ... and 6 not
    cost = _latest(rehearsal, "cost")
    inputs = json.loads((cost / "inputs.json").read_text())
    values, prov = inputs["values"], inputs["provenance"]
    # The seat analysis read this rehearsal's own runs.
    assert prov["streams_per_pod"]["path"] == str(agent) and values["streams_per_pod"] == 4
    assert prov["runs"]["prefill"]["path"] == str(_latest(rehearsal, "context"))
    q, streams = values["q"], values["streams_per_pod"]
    seats = {a: max(n for n in range(1, 200) if binom.sf(streams, n, q) <= a) for a in (0.01, 0.05)}
    assert seats == {0.01: 19, 0.05: 28}
    pods = {t: min(m for m in range(1, 50) if binom.sf(streams * m, t, q) <= 0.01) for t in (100, 250)}
    assert pods == {100: 4, 250: 7}
    month = values["pod_price_per_hour"] * 24 * 365 / 12
    saving = {t: 1 - pods[t] * month / (values["seat_price_per_month"] * t) for t in pods}
    assert round(month / values["seat_price_per_month"], 1) == 15.1
    assert round(saving[100], 2) == 0.39 and round(saving[250], 2) == 0.58
    # The paper prints exactly these.
    c = {k: v["text"] for k, v in json.loads(rehearsal.paper.claims_json.read_text())["claims"].items()
         if v["status"] == "ok"}
    assert (c["agent.provisioning"], c["seats.alpha_1pct"], c["seats.alpha_5pct"]) == ("4", "19", "28")
    assert (c["pods.team_100"], c["pods.team_250"], c["cost.break_even_seats"]) == ("4", "7", "15.1")
    assert c["cost.saving_team_100"].startswith("39") and c["cost.saving_team_250"].startswith("5")
    assert math.isclose(float(c["cost.saving_team_250"].rstrip("%")), saving[250] * 100, abs_tol=0.05)
    # The volume figure beside the published one (168 tok/s of four agents on the study's pod).
    assert c["capacity.published_pod_output_tok_s"] == "168" and int(c["volume.seats_full"].replace(",", "")) > 0


def test_the_paper_says_it_is_a_rehearsal_and_names_the_pod_model(rehearsal):
    html = Path(rehearsal.paper.outputs()["html"]).read_text()
    first = html[: html.find(' id="sec-question"')]  # the first page: before the first section
    assert "A rehearsal against an emulated pod" in first and "configs/pods/study-published.yaml" in first
    import pypdf
    page1 = pypdf.PdfReader(rehearsal.paper.outputs()["pdf"]).pages[0].extract_text()
    assert "A rehearsal against an emulated pod" in page1 and "study-published.yaml" in page1


def test_the_record_predicts_the_pod_and_measures_the_client(rehearsal):
    rec = rehearsal.record
    cost = rec["cost"]
    assert cost["currency"] == "EUR" and cost["per_hour"] == 3.73
    assert cost["predicted_cost"] == pytest.approx(cost["predicted_minutes"] / 60 * 3.73)
    agent = next(r for r in rec["experiments"] if r["experiment"] == "agent_turns")
    # The full sweep (88,000-token contexts, 400-token replies, 4 turns) is more pod time than the short one.
    assert agent["model_seconds_full"] > agent["model_seconds_rehearsed"] > 0
    assert agent["predicted_minutes"] * 60 == pytest.approx(agent["seconds"] + agent["added_seconds"])
    # No time acceleration; the client's part of each TPOT is small against the emulated TPOT.
    timing = rec["timing_error"]
    assert timing["requests"] > 10 and timing["tpot_error_share_max"] < 0.02
    comp = pd.DataFrame(rec["comparison"]).set_index("figure")
    assert comp.loc["TTFT of a fresh 260000-token prompt (published: 260000), s", "emulated"] == pytest.approx(
        45.07, rel=0.1)


def test_the_campaign_fits_under_max_model_len_and_a_longer_request_is_found_before_the_pod(tmp_path):
    # The rehearsal found that study-pod.yaml asked for 262,144-token prompts plus their output under a
    # max_model_len of 262,144; the campaign now uses the study's own 260,000, and the preflight keeps it so.
    from offload_lab.campaigns import rehearse_report, runner
    import yaml

    pod = runner.load_campaign(CAMPAIGN)
    assert rehearse_report.length_problems(pod) == []
    swap = {p: p for p in rehearse.stack_files(pod)}
    longer = rehearse.derived_campaign(pod, "longer", swap, rehearse.Overrides.model_validate(
        {"campaign": "too-long", "experiments": {"context": {"context_lengths": [4096, 262144]}}}))
    f = tmp_path / "longer.yaml"
    f.write_text(yaml.safe_dump(longer))
    assert {p["step"] for p in rehearse_report.length_problems(runner.load_campaign(f, root=ROOT))} == {
        "preflight context"}
    fit = rehearse.derived_campaign(pod, "fit", swap, rehearse.Overrides())
    # The derived file: the emulated pod has no GPUs to count, quality's reference is the emulated pod too, and the
    # seats are priced by the pod's own stack file.
    assert "expect_gpus" not in fit["topology"]
    exps = {e["experiment"]: e["parameters"] for e in fit["experiments"]}
    assert exps["quality"]["reference"] is None and exps["cost"]["price_stack"] == "configs/stacks/study-pod.yaml"
    assert exps["context"]["context_lengths"][-1] == 260000 and exps["context"]["repeats"] == 3


def test_overrides_are_checked(tmp_path):
    from offload_lab.core.errors import InputError
    from offload_lab.campaigns import runner

    bad = tmp_path / "bad.yaml"
    bad.write_text("experiments: {nope: {x: 1}}\n")
    pod = runner.load_campaign(CAMPAIGN)
    with pytest.raises(InputError, match="nope"):
        rehearse.derived_campaign(pod, "x", {p: p for p in rehearse.stack_files(pod)}, rehearse.load_overrides(bad))
    bad.write_text("experimentz: {}\n")
    with pytest.raises(InputError, match="experimentz"):
        rehearse.load_overrides(bad)


def test_bad_input_exits_2_naming_it(tmp_path, capsys):
    from offload_lab.cli.main import main

    code = main(["campaign", "rehearse", str(CAMPAIGN), "--overrides", str(tmp_path / "missing.yaml"),
                 "--data-dir", str(tmp_path / "data"), "--no-paper"])
    assert code == 2 and "missing.yaml" in capsys.readouterr().err


def test_the_rehearsal_code_names_no_experiment():
    """Found, never named: what a rehearsal does with an experiment comes from the folder's ``rehearsal`` module, so
    the rehearsal's own modules hold no experiment folder's name as a string (campaign-file sections such as
    ``boots:`` and ``topology:`` are not experiments and are allowed)."""
    import ast

    from offload_lab.paper.discovery import experiment_names

    allowed = {"boots", "topology", "cost", "rehearsal", "published"}  # campaign-file keys, record and column names
    names = set(experiment_names()) - allowed
    root = Path(__file__).resolve().parents[1] / "src" / "offload_lab" / "campaigns"
    found = [(f.name, n.lineno, n.value) for f in sorted(root.glob("rehearse*.py"))
             for n in ast.walk(ast.parse(f.read_text()))
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names]
    assert found == []
    assert {"pod_seconds", "longest_requests"} <= set(dir(__import__(
        "offload_lab.experiments.context.rehearsal", fromlist=["x"])))


SCALED_SUBSET = ["context", "agent_turns", "cached_prefix", "capacity"]  # every converted kind: TTFT, TPOT, tok/s
# Tolerances of a converted figure against the real-time one ("within their jitter"). Both rehearsals draw each
# request's pace from the pod model's log-normal jitter, and the short parameters take medians and p5s of 1-16
# requests (context: one request a length), so a decode figure (TPOT, tok/s) at s streams may move by two of the
# model's per-request sigmas there (rate_sigma: 0.20 at 1-2 streams, 0.08-0.16 at 3-8), a TTFT by two of its TTFT
# sigma (0.03), never less than 10%. The client's own TPOT error (median 0.01 ms, max 0.2 ms in a scaled run here)
# comes back multiplied by the factor above the floors. Minutes add the measured remainder (kernels, prompts), noisy
# on a loaded machine: 20%.
FIGURE_TOL, MINUTES_TOL = 0.10, 0.20


def _tolerance(figure: str, model) -> float:
    import re

    if "TTFT" in figure:
        return max(FIGURE_TOL, 2 * model.prefill.ttft_jitter_sigma)
    m = re.match(r"agent turns, (\d+) stream", figure)
    return max(FIGURE_TOL, 2 * model.rate_sigma(int(m.group(1)) if m else 1))


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """The same short parameters on a subset, accelerated 20x (the default)."""
    import yaml

    tmp = tmp_path_factory.mktemp("scaled")
    over = yaml.safe_load(SHORT.read_text())
    over["campaign"] = "study-pod-rehearsal-scaled"
    over["skip"] = sorted({e for e in ("audit", "concurrency", "quality", "cost")})
    over["experiments"] = {k: v for k, v in over["experiments"].items() if k in SCALED_SUBSET}
    f = tmp / "subset.yaml"
    f.write_text(yaml.safe_dump(over))
    return rehearse.rehearse(CAMPAIGN, data_root=tmp / "data", overrides_file=f, paper=False, log=lambda s: None,
                             time_scale_factor=rehearse.DEFAULT_TIME_SCALE)


def test_an_accelerated_rehearsal_predicts_what_the_real_time_one_does(rehearsal, scaled):
    rec, ref = scaled.record, rehearsal.record
    assert rec["all_ok"], [(r["experiment"], r["outcome"]) for r in rec["experiments"]] + [
        (f.get("step"), f.get("message")) for f in scaled.failures if f.get("level") == "error"]
    # The scale is declared: the record, every run's manifest, the emulated server's boot log.
    ts = rec["time_scaling"]
    assert rec["time_scale"] == rehearse.DEFAULT_TIME_SCALE > 1 and ts["accelerated"]
    assert ts["tpot_floor_ms"] > 0 and ts["ttft_floor_s"] > 0 and ts["floor_source"]["clock_check"]
    made = [Path(r) for p in rec["parts"] for r in p["runs"]]
    print(json.dumps({"scaled": rec["comparison"], "real_time": ref["comparison"],
                      "minutes": [(r["experiment"], r["predicted_minutes"]) for r in rec["experiments"] + ref[
                          "experiments"]]}, default=str))  # the figures side by side, in the test's output
    assert made and all(runs.load_manifest(r)["time_scale"] == ts for r in made)
    boot = runs.load_manifest(made[0])["boot"]["run"]
    assert runs.load_manifest(boot)["time_scale"] == ts
    assert "time is ACCELERATED" in "".join(p.read_text() for p in Path(boot).glob("*.log"))
    # It ran faster than real time where the pod model times it ...
    secs = {r["experiment"]: r for r in rec["experiments"]}
    refs = {r["experiment"]: r for r in ref["experiments"]}
    assert secs["context"]["seconds"] < refs["context"]["seconds"] - 20  # the 260K prefill: 45 s real
    # ... and every figure set against the pod agrees with the real-time rehearsal's within the jitter.
    got = pd.DataFrame(rec["comparison"]).set_index("figure")
    want = pd.DataFrame(ref["comparison"]).set_index("figure")
    both = got.index.intersection(want.index)
    assert len(both) >= 8
    from offload_lab.emulate.podmodel import load_pod_model

    model = load_pod_model(rec["pod_model"]["path"])
    # What the acceleration touched (converted back: a time_factor other than 1) agrees with real time within the
    # jitter.
    converted = got[(got["time_factor"].fillna(1.0) - 1.0).abs() > 1e-9].index.intersection(both)
    assert len(converted) >= 8
    off = {fig: (got.loc[fig, "emulated"], want.loc[fig, "emulated"]) for fig in converted
           if got.loc[fig, "emulated"] != pytest.approx(want.loc[fig, "emulated"], rel=_tolerance(fig, model))}
    assert off == {}
    # The rest was served in real time in both (measured at or under its floor, so never scaled): their differences
    # are this machine's and the model's jitter, not the scale's (a 32-token reply's TPOT moves with one late wake-up).
    for fig in got.index.difference(converted):
        floor = ts["ttft_floor_s"] if "TTFT" in fig else ts["tpot_floor_ms"]
        v = got.loc[fig, "measured"]
        # (a tok/s is the reply's 64 tokens over 63 TPOTs)
        assert v <= floor if ("TTFT" in fig or "TPOT" in fig) else 1000 / v * 64 / 63 <= floor, fig
    assert (got["time_factor"].dropna() > 1.5).any() and (got["time_factor"].dropna() < 0.5).any()  # TTFT, tok/s
    for e in ("context", "agent_turns", "cached_prefix"):
        assert secs[e]["predicted_minutes"] == pytest.approx(refs[e]["predicted_minutes"], rel=MINUTES_TOL), e
    # The seats read the sweep and the prefill rate back in pod time.
    def inputs(res):
        run = runs.latest_run(res.data_root, res.campaign, "capacity")
        return json.loads((run / "inputs.json").read_text())["values"]
    a, b = inputs(scaled), inputs(rehearsal)
    assert a["streams_per_pod"] == b["streams_per_pod"] == 4
    assert a["q"] == pytest.approx(b["q"], rel=FIGURE_TOL)  # q: the week timed at the measured prefill rate


def _latest(res, experiment: str) -> Path:
    run = runs.latest_run(res.data_root, res.campaign, experiment)
    assert run is not None, experiment
    return run
