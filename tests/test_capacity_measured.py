"""Seats and cost from a campaign's own measured runs (``source: measured``), and a user's own usage export.

The measured runs are written here in the shapes the agent-turns and context notebooks write (``regimes.csv``, the
regime's ``events.jsonl`` with its level window, ``summary.csv``, manifests with parameters and the stack record),
shaped like the published study's tables, so the seat and cost rules must give the study's answers from them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from offload_lab.core import paths, runs
from offload_lab.core.errors import InputError
from offload_lab.experiments.capacity.runner import CapacityParams
from offload_lab.experiments.capacity.runner import run_experiment as run_capacity
from offload_lab.experiments.cost.runner import CostParams
from offload_lab.experiments.cost.runner import run_experiment as run_cost
from offload_lab.seats.usage_export import load_usage

ROOT = paths.find_root()
EXAMPLES = ROOT / "configs" / "profiles" / "examples"
CAMPAIGN = "synthetic"
# A sweep shaped like the published agent-turns table (streams, median tok/s per stream).
SWEEP = [(1, 186.0), (2, 95.0), (3, 70.0), (4, 59.0), (6, 40.0), (8, 31.0)]
PRICE = {"per_hour": 3.73, "currency": "EUR", "what": "test pod", "source": "test"}

MEASURED = dict(source="measured", profile="configs/profiles/published-week.yaml", q_source="published",
                seat_price_per_month=180.0, seat_price_source="test: the published subscription",
                seat_alphas=[0.01, 0.05], team_sizes=[20, 100, 250])


def _agent_run(data_root: Path, total_tokens_at_4: int = 1680, window_s: float = 10.0,
               price: dict | None = PRICE, sweep=SWEEP, run_id: str | None = None) -> Path:
    params = {"initial_context_tokens": 88000, "turn_new_tokens": 3500, "output_tokens": 400, "streams":
              [s for s, _ in sweep], "turns": 3, "bar_tok_s": 40.0, "margin": 0.10}
    stack = {"file": str(ROOT / "configs/stacks/study-pod.yaml"), "sha256": "0" * 64, "spec": {"price": price}}
    run = runs.new_run(data_root, CAMPAIGN, "agent_turns", params, stack=stack, run_id=run_id)
    rows = [{"regime": "agent_turns", "streams": s, "tok_s_median": m, "achieved_concurrency": float(s)}
            for s, m in sweep]
    run.write_table("regimes.csv", pd.DataFrame(rows))
    (run.path / "agent_turns").mkdir()
    with run.events("agent_turns/events.jsonl") as log:
        for s, _ in sweep:
            start = 1_000_000_000 * s * 100
            end = start + int(window_s * 1e9)
            tokens = total_tokens_at_4 if s == 4 else 10 * s
            per = tokens // s
            for k in range(s):
                # Tokens spread over the window; two more, outside it, that must not count.
                times = [start + int((i + 0.5) * (end - start) / per) for i in range(per)] + [end + 5, end + 9]
                log.append({"kind": "request", "level": s, "stream": k, "ok": True, "token_times_ns": times,
                            "chunk_tokens": [1] * len(times)})
            log.append({"kind": "request", "level": s, "stream": 0, "ok": False, "token_times_ns": [start + 1],
                        "chunk_tokens": [50]})
            log.append({"kind": "level", "level": s, "window_ns": [start, end], "achieved_concurrency": float(s)})
    run.finish("ok")
    return run.path


def _context_run(data_root: Path, longest: int = 260000, ttft: float = 45.07) -> Path:
    run = runs.new_run(data_root, CAMPAIGN, "context", {"context_lengths": [4096, longest]})
    run.write_table("summary.csv", pd.DataFrame([
        {"context_tokens": 4096, "n": 3, "ttft_median_s": 0.5},
        {"context_tokens": longest, "n": 3, "ttft_median_s": ttft},
        {"context_tokens": longest * 2, "n": 0, "ttft_median_s": float("nan")},  # every request failed: not used
    ]))
    run.finish("ok")
    return run.path


def _capacity(data_root: Path, **over) -> tuple[Path, dict]:
    p = CapacityParams(**{**MEASURED, "max_team": 300, "simulation_weeks": 1, **over})
    run = runs.new_run(data_root, CAMPAIGN, "capacity", p.model_dump())
    run_capacity(run, data_root, CAMPAIGN, p)
    run.finish("ok")
    return run.path, json.loads((run.path / "inputs.json").read_text())


def test_measured_runs_shaped_like_the_published_tables_give_the_published_seats_pods_and_cost(tmp_path):
    agent, context = _agent_run(tmp_path), _context_run(tmp_path)
    cap, inputs = _capacity(tmp_path)
    v, prov = inputs["values"], inputs["provenance"]
    assert v["source"] == "measured" and v["streams_per_pod"] == 4  # 59 ≥ 44 at 4 streams, 40 < 44 at 6
    assert v["pod_output_tok_s"] == pytest.approx(168.0)  # 1,680 tokens inside a 10 s window, none outside
    assert v["prefill_tok_s"] == pytest.approx(260000 / 45.07)
    assert v["turn_seconds"] == pytest.approx(400 / 40)
    seats = pd.read_csv(cap / "seats.csv").set_index("alpha")["seats"]
    assert seats[0.01] == 19 and seats[0.05] == 28
    teams = pd.read_csv(cap / "teams.csv")
    pods = teams[(teams["alpha"] == 0.01) & (teams["label"] == "published")].set_index("team")["pods"]
    assert pods[100] == 4 and pods[250] == 7

    run = runs.new_run(tmp_path, CAMPAIGN, "cost", {})
    summary = run_cost(run, tmp_path, CAMPAIGN, CostParams(**MEASURED))
    run.finish("ok")
    assert summary["break_even_seats"] == pytest.approx(3.73 * 730 / 180) and round(summary["break_even_seats"], 1) == 15.1
    costed = pd.read_csv(run.path / "costed_teams.csv")
    saving = costed[(costed["alpha"] == 0.01) & (costed["label"] == "published")].set_index("team")["saving_fraction"]
    assert round(100 * saving[100]) == 39 and round(100 * saving[250]) == 58

    # Every input names the run and file it came from, with the file's sha256 as the run's manifest lists it.
    for key, run_dir, rel in (("streams_per_pod", agent, "regimes.csv"), ("pod_output_tok_s", agent,
                              "agent_turns/events.jsonl"), ("prefill_tok_s", context, "summary.csv")):
        ref = prov[key]
        assert ref["run_id"] == run_dir.name and ref["file"] == rel
        assert ref["sha256"] == runs.sha256_file(run_dir / rel)
    assert prov["pod_price_per_hour"]["price"]["per_hour"] == 3.73
    assert prov["profile"]["sha256"] == runs.sha256_file(ROOT / "configs/profiles/published-week.yaml")
    manifest = runs.load_manifest(cap)
    assert manifest["inputs_source"] == "measured"
    assert manifest["inputs_runs"]["streams"]["run_id"] == agent.name
    # The published figures beside: through the transcription (no reference run under this data root).
    beside = inputs["published_beside"]["figures"]
    assert beside["agents_4_total_tok_s"]["value"] == 168 and beside["streams_per_pod"]["value"] == 4
    assert beside["agents_4_total_tok_s"]["sha256"] == runs.sha256_file(ROOT / "configs/published/study.yaml")


def test_the_newest_ok_run_is_read_and_a_failed_one_is_not(tmp_path):
    _context_run(tmp_path)
    # Run ids start with the UTC start time: these three started a second apart, the failed one last.
    old = _agent_run(tmp_path, run_id="20260101T000000Z-aaaaaa")
    newer = _agent_run(tmp_path, total_tokens_at_4=2000, run_id="20260101T000001Z-000000")
    failed = runs.new_run(tmp_path, CAMPAIGN, "agent_turns", {}, run_id="20260101T000002Z-000000")
    failed.finish("failed", error="boom")
    _, inputs = _capacity(tmp_path)
    assert inputs["provenance"]["streams_per_pod"]["run_id"] == newer.name != old.name
    assert inputs["values"]["pod_output_tok_s"] == pytest.approx(200.0)


def test_a_sweep_that_misses_the_bar_at_one_stream_is_a_clear_error(tmp_path):
    _context_run(tmp_path)
    _agent_run(tmp_path, sweep=[(1, 43.0), (2, 30.0)])
    with pytest.raises(InputError, match="not even one stream"):
        _capacity(tmp_path)


def test_missing_runs_and_a_missing_price_are_named(tmp_path):
    with pytest.raises(InputError, match="no ok run of experiment 'agent_turns'"):
        _capacity(tmp_path)
    _agent_run(tmp_path, price=None)
    _context_run(tmp_path)
    _capacity(tmp_path)  # seats need no price
    run = runs.new_run(tmp_path, CAMPAIGN, "cost", {})
    with pytest.raises(InputError, match="no price block"):
        run_cost(run, tmp_path, CAMPAIGN, CostParams(**MEASURED))
    # A campaign may name the stack file whose price it borrows; the record says so.
    run2 = runs.new_run(tmp_path, CAMPAIGN, "cost", {})
    run_cost(run2, tmp_path, CAMPAIGN, CostParams(**MEASURED, price_stack="configs/stacks/study-pod.yaml"))
    inputs = json.loads((run2.path / "inputs.json").read_text())
    assert inputs["provenance"]["pod_price_per_hour"]["stack_file"] == "configs/stacks/study-pod.yaml"
    assert "no price of its own" in inputs["provenance"]["pod_price_per_hour"]["why"]


def test_params_say_what_they_read_and_refuse_half_a_source():
    assert CapacityParams().reads_experiments() == ["published"]
    assert CapacityParams(**MEASURED).reads_experiments() == ["agent_turns", "context"]
    assert CostParams(**MEASURED, streams_from="concurrency", regime="short").reads_experiments() == [
        "concurrency", "context"]
    with pytest.raises(ValueError, match="seat_price_source"):
        CapacityParams(**{**MEASURED, "seat_price_source": None})
    with pytest.raises(ValueError, match="source: published"):
        CapacityParams(seat_price_per_month=180.0)
    with pytest.raises(ValueError, match="regime"):
        CapacityParams(**MEASURED, streams_from="concurrency")


def test_concurrency_regime_as_the_source(tmp_path):
    _context_run(tmp_path)
    params = {"regimes": {"short": {"regime": "short", "prompt_tokens": 128, "output_tokens": 48}}, "bar_tok_s": 40.0,
              "margin": 0.1, "streams": [1, 2]}
    run = runs.new_run(tmp_path, CAMPAIGN, "concurrency", params, stack={"spec": {"price": PRICE}})
    run.write_table("regimes.csv", pd.DataFrame([{"regime": "short", "streams": 1, "tok_s_median": 50.0},
                                                 {"regime": "short", "streams": 2, "tok_s_median": 45.0}]))
    (run.path / "short").mkdir()
    with run.events("short/events.jsonl") as log:
        log.append({"kind": "request", "level": 2, "ok": True, "token_times_ns": [10, 20, 30], "chunk_tokens": [2, 2, 2]})
        log.append({"kind": "level", "level": 2, "window_ns": [0, 2_000_000_000]})
    run.finish("ok")
    _, inputs = _capacity(tmp_path, streams_from="concurrency", regime="short", step_seconds=1.0)
    assert inputs["values"]["streams_per_pod"] == 2
    assert inputs["values"]["pod_output_tok_s"] == pytest.approx(3.0)  # 6 tokens in 2 s
    assert inputs["values"]["turn_seconds"] == pytest.approx(48 / 40)


# -- a user's own usage: ccusage exports ------------------------------------------------------------------------------

def test_ccusage_daily_export_maps_onto_a_profile():
    prof, where = load_usage(EXAMPLES / "ccusage-daily-example.json")
    assert where["format"] == "ccusage-daily" and where["sha256"] == runs.sha256_file(
        EXAMPLES / "ccusage-daily-example.json")
    data = json.loads((EXAMPLES / "ccusage-daily-example.json").read_text())
    days = data["daily"]
    assert prof.tokens.output == sum(d["outputTokens"] for d in days)
    assert prof.tokens.new_input == sum(d["inputTokens"] + d["cacheCreationTokens"] for d in days)
    assert prof.tokens.cached_read == sum(d["cacheReadTokens"] for d in days)
    assert prof.period_days == 7 and prof.active_days == 5  # 7 dates, two of them with no tokens
    assert prof.provenance.kind == "measured" and "assumed" in prof.provenance.note


def test_ccusage_session_export_counts_sessions_and_its_dates():
    prof, where = load_usage(EXAMPLES / "ccusage-session-example.json", window_hours=6)
    data = json.loads((EXAMPLES / "ccusage-session-example.json").read_text())
    assert where["format"] == "ccusage-session" and prof.sessions == len(data["sessions"])
    assert prof.window_hours == 6
    assert prof.tokens.output == sum(s["outputTokens"] for s in data["sessions"])
    dates = sorted({s["lastActivity"][:10] for s in data["sessions"]})
    assert prof.active_days == len(dates)


def test_a_ccusage_export_as_the_measured_profile(tmp_path):
    _agent_run(tmp_path)
    _context_run(tmp_path)
    _, inputs = _capacity(tmp_path, profile=str(EXAMPLES / "ccusage-daily-example.json"), q_source="profile")
    assert inputs["provenance"]["profile"]["format"] == "ccusage-daily"
    assert inputs["timing"]["split"] == "published" and 0 < inputs["values"]["q"] < 1
    with pytest.raises(InputError, match="no published q"):
        _capacity(tmp_path, profile=str(EXAMPLES / "ccusage-daily-example.json"), q_source="published")


@pytest.mark.parametrize("content,match", [
    ('{"hello": 1}', "not a ccusage report"),
    ('{"daily": [{"date": "2026-01-01", "outputTokens": -5}]}', "outputTokens must be a number"),
    ('{"daily": [{"date": "yesterday", "outputTokens": 5}]}', "is not a date"),
    ('{"daily": []}', "holds no days"),
    ("not json", "usage export"),
])
def test_bad_exports_are_input_errors(tmp_path, content, match):
    f = tmp_path / "usage.json"
    f.write_text(content)
    with pytest.raises(InputError, match=match):
        load_usage(f)


def test_profile_cli_reads_both_formats_and_refuses_others_with_exit_2(tmp_path):
    cli = [sys.executable, "-m", "offload_lab.cli.main", "profile"]
    ok = subprocess.run([*cli, str(EXAMPLES / "ccusage-daily-example.json"), "--stream-tok-s", "40",
                         "--prefill-tok-s", "5000", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["source"]["format"] == "ccusage-daily" and out["timing"]["split"] == "published"
    ok = subprocess.run([*cli, "configs/profiles/published-week.yaml", "--stream-tok-s", "40", "--prefill-tok-s",
                         "5769"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "usage.txt"
    bad.write_text("date,tokens\n")
    r = subprocess.run([*cli, str(bad), "--stream-tok-s", "40"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "usage.txt" in r.stderr and "ccusage" in r.stderr
    assert "Traceback" not in r.stderr


# -- the user's team, the user's money (issue 32) ---------------------------------------------------------------------

def test_a_team_of_30_three_alphas_and_usd_reach_the_csvs_and_the_claims(tmp_path):
    """A campaign's own team size, α values and currency: every CSV says USD and its columns name no currency; the
    paper's claims print 30, the three α and USD, and no claim of the section fails on them."""
    from offload_lab.experiments.capacity import claims as claims_capacity
    from offload_lab.experiments.capacity import claims_sources, claims_study, claims_teams
    from offload_lab.paper.claims import resolve_one

    _agent_run(tmp_path, price={**PRICE, "currency": "USD", "per_hour": 2.5})
    _context_run(tmp_path)
    own = dict(MEASURED, seat_price_per_month=200.0, seat_currency="USD", seat_alphas=[0.02, 0.05, 0.1],
               team_sizes=[30])
    cap, inputs = _capacity(tmp_path, **own)
    assert inputs["values"]["alphas"] == [0.02, 0.05, 0.1] and inputs["values"]["currency"] == "USD"
    run = runs.new_run(tmp_path, CAMPAIGN, "cost", CostParams(**own).model_dump())
    summary = run_cost(run, tmp_path, CAMPAIGN, CostParams(**own))
    run.finish("ok")
    assert summary["currency"] == "USD" and summary["pod_price_per_month"] == pytest.approx(2.5 * 730)
    for name in ("costed_teams.csv", "teams.csv"):
        f = pd.read_csv(run.path / name)
        assert set(f["currency"]) == {"USD"} and not [c for c in f.columns if "eur" in c.lower()]
        assert sorted(set(f["alpha"])) == [0.02, 0.05, 0.1]
    assert sorted(set(pd.read_csv(cap / "seats.csv")["alpha"])) == [0.02, 0.05, 0.1]

    latest = {"capacity": cap, "cost": run.path}
    registry = {**claims_capacity.SECTION, **claims_sources.SECTION, **claims_study.SECTION, **claims_teams.SECTION}
    got = {n: resolve_one(d, None, ROOT, latest=latest) for n, d in registry.items()}
    text = {n: r.text for n, r in got.items()}
    assert text["cost.currency"] == "USD" and text["capacity.team_sizes"] == "30" and text["teams.largest"] == "30"
    assert text["capacity.alphas"] == "2%, 5% and 10%" and text["capacity.alpha_also"] == "5%"
    assert text["seats.at_alphas"].startswith(f"{text['seats.rule']} developers at α = 2%, ")
    assert text["seats.at_alphas"].endswith("at α = 10%")
    for a in ("2%", "5%", "10%"):
        assert f"Pods (α = {a})" in text["pods.teams_table"] and f"Saving (α = {a})" in text["cost.teams_table"]
    assert "USD a month" in text["cost.teams_table"] and "| 30 |" in text["cost.teams_table"]
    # the study's α = 1% is not this campaign's; α = 5% is
    assert text["seats.alpha_1pct"] == "n/a" and text["seats.alpha_5pct"] != "n/a"
    assert text["pods.team_250"] == "n/a"


def test_one_alpha_and_the_old_price_key():
    p = CapacityParams(**{**MEASURED, "seat_alphas": [0.01]})
    assert p.seat_alphas == [0.01]
    with pytest.raises(ValueError, match="seat_alphas"):
        CapacityParams(**{**MEASURED, "seat_alphas": [0.01, 0.01]})
    # a campaign file written before prices carried their currency: its euros still read, never as another currency
    old = {k: v for k, v in MEASURED.items() if k != "seat_price_per_month"} | {"seat_eur_per_month": 180.0}
    assert CostParams(**old).seat_price_per_month == 180.0
    with pytest.raises(ValueError, match="in EUR"):
        CostParams(**old, seat_currency="USD")
