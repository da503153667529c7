"""The rehearsal's time acceleration: what the emulator serves never drops under its floor, and every measured
duration converts back to pod time exactly (core/timescale.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from offload_lab.core.timescale import REAL_TIME, TimeScale, of_manifest

ROOT = Path(__file__).resolve().parents[1]
S = TimeScale(factor=20.0, ttft_floor_s=0.25, tpot_floor_ms=5.7)


def test_served_waits_never_drop_under_the_floor_and_convert_back_exactly():
    waits = np.linspace(0.0, 60.0, 601)
    served = [S.serve_ttft_s(w) for w in waits]
    assert all(s >= min(w, S.ttft_floor_s) for s, w in zip(served, waits))
    assert all(b >= a for a, b in zip(served, served[1:]))  # monotone: medians and percentiles commute
    assert [S.pod_ttft_s(s) for s in served] == pytest.approx(list(waits))
    assert S.serve_ttft_s(45.07) == pytest.approx(0.25 + (45.07 - 0.25) / 20)
    tpots = np.linspace(1.0, 40.0, 391)
    assert all(S.serve_tpot_ms(t) >= min(t, 5.7) for t in tpots)
    assert [S.pod_tpot_ms(S.serve_tpot_ms(t)) for t in tpots] == pytest.approx(list(tpots))
    # A request's mean TPOT above the floor converts like each token's (affine there).
    toks = [8.0, 9.0, 31.0]
    assert S.pod_tpot_ms(np.mean([S.serve_tpot_ms(t) for t in toks])) == pytest.approx(np.mean(toks))
    # A rate, per stream or over several streams, goes back through its TPOT.
    assert S.to_pod(1000.0 / S.serve_tpot_ms(25.0), "tok_s") == pytest.approx(40.0)
    assert S.to_pod(4 * 1000.0 / S.serve_tpot_ms(25.0), "tok_s", 4) == pytest.approx(160.0)


def test_real_time_and_undeclared_runs_are_left_alone():
    assert REAL_TIME.serve_ttft_s(45.0) == 45.0 and REAL_TIME.pod_tpot_ms(7.0) == 7.0
    assert of_manifest({}) == REAL_TIME and not of_manifest({"time_scale": None}).accelerated
    no_decode = TimeScale(factor=20.0, ttft_floor_s=0.1)  # no clock check: decode is never accelerated
    assert no_decode.serve_tpot_ms(30.0) == 30.0 and no_decode.serve_ttft_s(10.1) == pytest.approx(0.6)
    assert of_manifest({"time_scale": S.record()}) == S


def test_the_floors_come_from_the_committed_clock_check():
    from offload_lab.campaigns import rehearse, runner

    pod = runner.load_campaign(ROOT / "configs" / "campaigns" / "study-pod.yaml")
    assert rehearse.max_streams(pod) == 8
    scale = rehearse.time_scale(pod, 20.0)
    src = scale.floor_source
    run = ROOT / src["clock_check"]
    import pandas as pd

    t = pd.read_csv(run / "summary.csv")
    t = t[~t["client"].str.endswith("-inline") & (t["streams"] <= 8)]
    assert scale.tpot_floor_ms == pytest.approx(rehearse.FLOOR_MARGIN * t["token_error_ms_p99"].max())
    assert scale.ttft_floor_s == pytest.approx(20 * rehearse.TTFT_MARGIN * t["first_token_error_ms_p50"].max() / 1e3)
    assert rehearse.time_scale(pod, 1.0) .accelerated is False


def test_the_emulator_declares_its_scale():
    from offload_lab.emulate import server

    args, _ = server.parse_args(["--model", "m", "--pod-model", "p.yaml", "--time-scale", "20", "--ttft-floor-s",
                                 "0.25", "--tpot-floor-ms", "5.7"])
    assert server.time_scale_of(args) == TimeScale(factor=20.0, ttft_floor_s=0.25, tpot_floor_ms=5.7)
    assert "ACCELERATED (time_scale 20)" in server.time_line(server.time_scale_of(args))
    plain, _ = server.parse_args(["--model", "m", "--pod-model", "p.yaml"])
    assert server.time_line(server.time_scale_of(plain)) == "time is real (time_scale 1)"


def test_a_bad_time_scale_exits_2_naming_it(tmp_path, capsys):
    from offload_lab.cli.main import main

    code = main(["campaign", "rehearse", str(ROOT / "configs" / "campaigns" / "study-pod.yaml"), "--time-scale",
                 "0.5", "--data-dir", str(tmp_path / "data"), "--no-paper"])
    assert code == 2 and "--time-scale" in capsys.readouterr().err
