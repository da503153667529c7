"""The spread between boots beside the spread within a boot, on runs written the way the campaign runner writes them
(a session, a boot index per run), with known effects."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from offload_lab.experiments.boot_spread import runner as boot_spread
from offload_lab.core import runs
from offload_lab.core.errors import InputError


def _write_session(data, session: str, boot_means: list[float], sd: float, n: int = 12, seed: int = 0,
                   campaign: str = "c", experiment: str = "context_repeat", servers: list[int] | None = None) -> None:
    rng = np.random.default_rng(seed)
    for i, mean in enumerate(boot_means):
        load = {"during": {"vllm_servers_max": servers[i], "load_1m_max": 1.0}} if servers else None
        run = runs.new_run(data, campaign, experiment, {}, session=session, host_load=load,
                           boot={"index": i, "of": len(boot_means), "run": f"/x/boots/boot{i}-{session}"})
        with run.events("events.jsonl") as log:
            for ctx in (256, 1024):
                for v in rng.normal(mean + ctx / 1024, sd, n):
                    log.append({"kind": "request", "ok": True, "prompt_length_mismatch": False,
                                "context_tokens": ctx, "tpot_ms": float(v), "ttft_s": float(v) / 100})
            log.append({"kind": "request", "ok": False, "context_tokens": 256, "tpot_ms": None})
            log.append({"kind": "warmup", "ok": True, "context_tokens": 256, "tpot_ms": 1000.0})
        run.finish("ok")


def test_a_boot_effect_stands_out_of_the_within_boot_noise(tmp_path):
    _write_session(tmp_path, "s1", [5.0, 5.0, 9.0], sd=0.3)
    params = boot_spread.SpreadParams(permutations=2000, metrics=["tpot_ms"])
    per, sp, meta = boot_spread.analyze(tmp_path, "c", params)
    assert meta["session"] == "s1" and [r["boot"] for r in meta["runs"]] == [0, 1, 2]
    assert set(per["n"]) == {12}  # the failed request and the warm-up are not counted
    row = sp[sp["group"] == 256].iloc[0]
    medians = per[per["group"] == 256]["median"].to_numpy()
    assert row["between_sd"] == pytest.approx(np.std(medians, ddof=1))
    assert row["between_range"] == pytest.approx(medians.max() - medians.min())
    assert row["between_range"] == pytest.approx(4.0, abs=0.5)
    assert row["within_sd_pooled"] == pytest.approx(0.3, rel=0.4)
    assert row["between_over_within_sd"] > 5
    assert row["permutation_p"] < 0.01 and row["null_between_sd"] < row["between_sd"] / 5
    assert row["icc"] > 0.9 and row["unit"] == "ms"
    assert row["boots_with_other_servers"] is None  # not recorded by this hand-made session


def test_no_boot_effect_is_not_reported_as_one(tmp_path):
    _write_session(tmp_path, "s1", [5.0, 5.0, 5.0], sd=0.5, n=30, seed=3)
    sp = boot_spread.spread(boot_spread.collect(tmp_path, "c", "context_repeat")[0], "tpot_ms", permutations=2000)
    assert (sp["permutation_p"] > 0.05).all()
    assert (sp["icc"] < 0.2).all()


def test_boots_measured_beside_another_server_are_counted(tmp_path):
    _write_session(tmp_path, "s1", [9.0, 5.0, 5.0], sd=0.3, servers=[2, 1, 1])
    per, sp, _ = boot_spread.analyze(tmp_path, "c", boot_spread.SpreadParams(permutations=200))
    assert (sp["boots_with_other_servers"] == 1).all()
    assert per[per["boot"] == 0]["vllm_servers_max"].eq(2).all()


def test_the_newest_session_with_several_boots_is_read(tmp_path):
    _write_session(tmp_path, "old", [5.0, 6.0], sd=0.1)
    _write_session(tmp_path, "single", [5.0], sd=0.1)
    _write_session(tmp_path, "new", [7.0, 7.0, 7.0], sd=0.1)
    _, meta = boot_spread.collect(tmp_path, "c", "context_repeat")
    assert meta["session"] == "new"
    _, meta = boot_spread.collect(tmp_path, "c", "context_repeat", session="old")
    assert meta["session"] == "old"
    with pytest.raises(InputError, match="no ok runs"):
        boot_spread.collect(tmp_path, "c", "context_repeat", session="nope")


def test_one_boot_is_refused(tmp_path):
    _write_session(tmp_path, "single", [5.0], sd=0.1)
    with pytest.raises(InputError, match="two or more boots"):
        boot_spread.collect(tmp_path, "c", "context_repeat")


def test_the_analysis_run_records_what_it_read(tmp_path):
    _write_session(tmp_path, "s1", [5.0, 5.5, 6.0], sd=0.2)
    params = boot_spread.SpreadParams(permutations=500)
    run = runs.new_run(tmp_path, "c", boot_spread.EXPERIMENT, params.model_dump())
    sp = boot_spread.run_analysis(run, tmp_path, "c", params)
    boot_spread.plot(run.path, "tpot_ms")
    run.finish("ok")
    m = runs.load_manifest(run.path)
    assert m["analysed"]["session"] == "s1" and len(m["analysed"]["runs"]) == 3
    assert all(len(r["events_sha256"]) == 64 for r in m["analysed"]["runs"])
    assert {"boot_spread.csv", "per_boot.csv", "figures/boot_spread_tpot_ms.png"} <= set(m["files"])
    on_disk = pd.read_csv(run.path / "boot_spread.csv")
    assert list(on_disk.columns) == list(sp.columns)
    assert set(on_disk["metric"]) == {"tpot_ms", "ttft_s"}


def test_the_topology_comparison_reads_the_repeated_context_runs_of_several_machines(tmp_path):
    """A repeat-boot campaign split over pods runs context_repeat, not context: the topology section reads it."""
    from paper_fixtures import ENVIRONMENT, REPO_ROOT, context_events, context_summary

    from offload_lab.paper import claims as cl
    from offload_lab.paper.discovery import claim_registry

    for i, host in enumerate(("pod-a", "pod-b")):
        run = runs.new_run(tmp_path, "rep", "context_repeat", {}, run_id=f"20260101T00{i}000Z-c0000{i}",
                           environment={**ENVIRONMENT, "hostname_hash": host})
        events = [{**e, "tpot_ms": e["tpot_ms"] * (1 + i)} if e.get("tpot_ms") else e for e in context_events()]
        with run.events("events.jsonl") as log:
            for e in events:
                log.append(e)
        run.write_table("summary.csv", context_summary(events))
        run.finish("ok")
    got = cl.resolve_claims("rep", tmp_path, REPO_ROOT, registry=claim_registry())
    assert got["topology.comparison"].status == "absent"
    text = got["topology.comparison_repeat"].text
    assert text.startswith("possible: the slowest machine's median TPOT was") and "on 2 machines" in text
