"""Experiment ``capacity``: seats, pods, volume against concurrency, correlation and simulation, from a campaign's
``published`` run or, with ``source: measured``, from its own agent-turns (or concurrency) and context runs — no
server (:mod:`offload_lab.published.study_inputs` says where each input comes from).

Files written into the run (all derived by :mod:`offload_lab.seats.capacity` and :mod:`offload_lab.seats.simulation`
from the inputs recorded in ``inputs.json``):

=================  =================================================================================================
``inputs.json``    every input, its value and where it came from (run, file, sha256; key and section if published)
``profile.json``   the usage profile timed by this project, beside the figures the source derived from it
``seats.csv``      the largest team one pod serves, for each α (binomial)
``teams.csv``      streams and pods for the named team sizes (label ``published``) and the largest team one pod serves
``pods_curve.csv`` pods → the largest team they serve, for each α and correlation, up to ``max_team`` developers
``volume.csv``     seats by volume at each utilization, beside seats by concurrency
``correlation.csv`` seats per pod and pods for the published teams as the intra-team correlation grows
``simulation.csv`` a year of the largest published team simulated under four scenarios, against the closed forms
``timings.json``   seconds this machine took for the pods of every team up to ``max_team`` and for each simulation
=================  =================================================================================================
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.seats import capacity, cost
from offload_lab.core import runs
from offload_lab.seats.capacity import Demand
from offload_lab.seats.simulation import SimulationConfig, simulate
from offload_lab.experiments.capacity.params import Params as CapacityParams
from offload_lab.published.study_inputs import StudyInputs, gather_for

EXPERIMENT = "capacity"


def seats_table(inp: StudyInputs) -> pd.DataFrame:
    d = Demand(inp.q)
    return pd.DataFrame([{"alpha": a, "model": d.model, "rho": 0.0, "q": inp.q, "streams": inp.streams_per_pod,
                          "seats": capacity.seats_for_streams(inp.streams_per_pod, d, a)} for a in inp.alphas])


def teams_table(inp: StudyInputs, seats: pd.DataFrame) -> pd.DataFrame:
    d = Demand(inp.q)
    rows = []
    for a in inp.alphas:
        one_pod = int(seats.loc[seats["alpha"] == a, "seats"].iloc[0])
        teams = [(n, "published") for n in inp.team_sizes] + [(one_pod, "one_pod")]
        for n, label in teams:
            streams = capacity.streams_for_team(n, d, a)
            pods = capacity.pods_for_team(n, inp.streams_per_pod, d, a)
            rows.append({
                "alpha": a, "team": n, "label": label, "streams_needed": streams, "pods": pods,
                "pods_partitioned": capacity.pods_partitioned(n, one_pod),
                "overflow_probability": capacity.overflow_probability(n, pods * inp.streams_per_pod, d),
                "mean_generating": n * inp.q,
            })
    return pd.DataFrame(rows)


def pods_curve(inp: StudyInputs, max_team: int, rhos: list[float]) -> pd.DataFrame:
    rows = []
    for rho in rhos:
        d = Demand(inp.q, rho)
        for a in inp.alphas:
            for pods, team in capacity.pod_breakpoints(max_team, inp.streams_per_pod, d, a):
                rows.append({"alpha": a, "rho": rho, "model": d.model, "pods": pods,
                             "streams": pods * inp.streams_per_pod, "max_team": team})
    return pd.DataFrame(rows)


def volume_table(inp: StudyInputs, seats: pd.DataFrame, utilizations: list[float]) -> pd.DataFrame:
    """Seats by volume from the profile's output tokens; an inferred split carries its range into every column."""
    t = inp.timing
    by_concurrency = int(seats.loc[seats["alpha"] == inp.alpha, "seats"].iloc[0])
    per_hour = {k: capacity.output_tokens_per_hour_of_period(inp.profile, o)
                for k, o in (("", t.output_tokens), ("_low", t.output_tokens_range[0]),
                             ("_high", t.output_tokens_range[1]))}
    rows = []
    for u in utilizations:
        row: dict[str, Any] = {
            "utilization": u, "pod_output_tok_s": inp.pod_output_tok_s, "split": t.split,
            "hours_per_month": cost.HOURS_PER_MONTH,
            "pod_output_tokens_per_month": inp.pod_output_tok_s * 3600 * cost.HOURS_PER_MONTH * u,
            "seats_by_concurrency": by_concurrency, "alpha": inp.alpha,
        }
        for k, dev_per_hour in per_hour.items():
            v = capacity.seats_by_volume(inp.pod_output_tok_s, dev_per_hour, u)
            row[f"developer_output_tokens_per_month{k}"] = dev_per_hour * cost.HOURS_PER_MONTH
            row[f"seats_by_volume{k}"] = v
            row[f"volume_over_concurrency{k}"] = v / by_concurrency
        rows.append(row)
    return pd.DataFrame(rows)


def correlation_table(inp: StudyInputs, rhos: list[float]) -> pd.DataFrame:
    rows = []
    for rho in rhos:
        d = Demand(inp.q, rho)
        for a in inp.alphas:
            row: dict[str, Any] = {"rho": rho, "alpha": a, "model": d.model,
                                   "seats_per_pod": capacity.seats_for_streams(inp.streams_per_pod, d, a)}
            for n in inp.team_sizes:
                row[f"pods_team_{n}"] = capacity.pods_for_team(n, inp.streams_per_pod, d, a)
            rows.append(row)
    return pd.DataFrame(rows)


def simulation_scenarios(inp: StudyInputs, p: CapacityParams) -> list[tuple[str, SimulationConfig, Demand | None]]:
    """(name, config, the closed form that should agree or None) for the four scenarios."""
    team = p.simulation_team or max(inp.team_sizes)
    streams = capacity.pods_for_team(team, inp.streams_per_pod, Demand(inp.q), inp.alpha) * inp.streams_per_pod
    days = p.simulation_weeks * int(round(inp.profile.active_days * 7 / inp.profile.period_days))
    base = dict(developers=team, days=days, q=inp.q, window_hours=inp.profile.window_hours,
                turn_seconds=inp.turn_seconds, step_seconds=p.step_seconds, watch_streams=(streams,))
    sessions = dict(sessions_per_day=inp.profile.sessions_per_active_day, session_hours=p.session_hours)
    out: list[tuple[str, SimulationConfig, Demand | None]] = [
        ("independent", SimulationConfig(**base, seed=p.seed), Demand(inp.q)),
        ("sessions", SimulationConfig(**base, **sessions, seed=p.seed + 1), Demand(inp.q)),
        ("shared_days", SimulationConfig(**base, **sessions, rho=p.rho_example, seed=p.seed + 2),
         Demand(inp.q, p.rho_example)),
    ]
    if p.schedule_shape:
        shape = tuple(p.schedule_shape)
        out.append(("shared_schedule", SimulationConfig(**base, **sessions, shape=shape, seed=p.seed + 3),
                    Demand(inp.q, shape=shape)))
    return out


def run_simulations(inp: StudyInputs, p: CapacityParams) -> tuple[pd.DataFrame, dict[str, float]]:
    rows, seconds = [], {}
    for name, cfg, closed in simulation_scenarios(inp, p):
        t0 = time.perf_counter()
        r = simulate(cfg)
        seconds[name] = time.perf_counter() - t0
        (streams,) = cfg.watch_streams
        rows.append({
            "scenario": name, "developers": cfg.developers, "days": cfg.days, "weeks": p.simulation_weeks,
            "q": cfg.q, "rho": cfg.rho, "sessions_per_day": cfg.sessions_per_day, "session_hours": cfg.session_hours,
            "shape": " ".join(f"{w:g}" for w in cfg.shape) if cfg.shape else "", "turn_seconds": cfg.turn_seconds,
            "step_seconds": cfg.step_seconds, "seed": cfg.seed, "streams": streams,
            "simulated_overflow": r.overflow_probability(streams),
            "standard_error": r.overflow_standard_error(streams),
            "closed_form_model": closed.model if closed else "",
            "closed_form_overflow": closed.sf(streams, cfg.developers) if closed else float("nan"),
            "simulated_mean_generating": r.mean_generating(), "expected_mean_generating": cfg.developers * cfg.q,
            "days_with_overflow": r.days_with_overflow(streams),
            "mean_overload_seconds": r.mean_overload_seconds(streams),
            "capped_days": r.capped_days,
        })
    return pd.DataFrame(rows), seconds


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: CapacityParams) -> dict[str, Any]:
    """Compute every table into ``run`` from the inputs ``params.source`` names; return the headline figures."""
    inp, where = gather_for(params, data_root, campaign)
    run.update(**where)
    run.write_json("inputs.json", inp.record())
    prof = inp.profile
    run.write_json("profile.json", {"computed": inp.timing.to_dict(),
                                    "published": prof.published.model_dump() if prof.published else None,
                                    "provenance": prof.provenance.model_dump(),
                                    "profile": prof.model_dump(mode="json")})
    seats = seats_table(inp)
    run.write_table("seats.csv", seats)
    run.write_table("teams.csv", teams_table(inp, seats))

    timings: dict[str, Any] = {"max_team": params.max_team}
    t0 = time.perf_counter()
    for a in inp.alphas:
        capacity.pods_for_teams(range(1, params.max_team + 1), inp.streams_per_pod, Demand(inp.q), a)
    timings["pods_every_team_seconds"] = time.perf_counter() - t0
    timings["pods_every_team_alphas"] = inp.alphas

    curve_rhos = sorted({0.0, params.rho_example})
    run.write_table("pods_curve.csv", pods_curve(inp, params.max_team, curve_rhos))
    run.write_table("volume.csv", volume_table(inp, seats, params.utilizations))
    run.write_table("correlation.csv", correlation_table(inp, sorted(set(params.rhos) | {params.rho_example})))
    sims, sim_seconds = run_simulations(inp, params)
    run.write_table("simulation.csv", sims)
    timings["simulation_seconds"] = sim_seconds
    run.write_json("timings.json", timings)
    return {
        "q": inp.q,
        "seats": dict(zip(seats["alpha"], seats["seats"])),
        "timings": timings,
    }
