"""The token source and the client on separate CPUs, and whose share a missed level is (issue 38)."""

from __future__ import annotations

import os

import pytest

from offload_lab.bench import clock_check
from offload_lab.core import runs
from offload_lab.load import workers
from offload_lab.load.share import schedstat

CPUS = sorted(os.sched_getaffinity(0))


def test_each_worker_gets_a_cpu_of_its_own_or_none_is_pinned():
    assert workers.pin_plan(len(CPUS)) == [(c,) for c in CPUS]
    assert workers.pin_plan(len(CPUS) + 1) is None  # not enough: the scheduler places them
    if len(CPUS) >= 2:
        plan = workers.pin_plan(len(CPUS) - 1, {CPUS[-1]})
        assert plan is not None and all(CPUS[-1] not in p for p in plan)
        assert len({p for p in plan}) == len(plan)


def test_run_queue_wait_is_read_for_this_process_and_a_child():
    mine = schedstat()
    if not mine:
        pytest.skip("no /proc/self/schedstat here")
    assert mine["oncpu_s"] > 0 and mine["runq_wait_s"] >= 0
    assert schedstat(os.getppid())  # another process's too
    assert schedstat(2**30) == {}  # no such process: nothing, not an error


def test_placement_keeps_a_given_source_cpu_and_leaves_the_rest_to_the_client():
    assert clock_check.placement(pin=False) == (None, None)
    if len(CPUS) < 2:
        assert clock_check.placement() == (None, None)
        return
    source, client = clock_check.placement()
    assert source == CPUS[-1:] and client == CPUS[:-1]
    assert clock_check.placement([CPUS[0]]) == ([CPUS[0]], CPUS[1:])


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs: the source on one, the client on the other")
def test_the_clock_check_runs_source_and_workers_apart_and_names_each_miss_share(tmp_path):
    run = runs.new_run(tmp_path, "t", "clock_check")
    summary = clock_check.run_clock_check(run, [2], rate_tok_s=100.0, ttft_ms=5.0, tokens=10, requests_per_stream=2,
                                          progress=None, clients=[clock_check.ClientConfig.parse("w2")])
    row = summary.iloc[0]
    source, client = set(map(int, row["source_cpus"].split(","))), set(map(int, row["client_cpus"].split(",")))
    assert source and client and not source & client
    level = next(e for e in runs.read_events(run.file(runs.EVENTS)) if e.get("kind") == "level")
    assert len(level["workers"]) == 2 and all(set(w["cpus"]) <= client for w in level["workers"])
    assert os.sched_getaffinity(0) == set(CPUS)  # the check gave this process its CPUs back
    assert row["client_cpu_ms_per_token"] > 0
    if schedstat():
        assert row["client_runq_ms_per_token"] >= 0 and row["source_runq_ms_per_token"] >= 0
    assert row["miss_share"] == ("" if row["verdict"] == "pass" else clock_check.miss_share(row.to_dict()))


def test_a_miss_is_the_machines_when_waiting_for_a_core_cost_more_than_the_clients_cpu():
    miss = {"verdict": "miss", "client_cpu_ms_per_token": 0.1, "client_runq_ms_per_token": 0.3,
            "source_runq_ms_per_token": 0.0}
    assert clock_check.miss_share(miss) == "machine"
    assert clock_check.miss_share({**miss, "client_runq_ms_per_token": 0.01}) == "client"
    assert clock_check.miss_share({**miss, "verdict": "pass"}) == ""
    assert clock_check.miss_share({**miss, "source_runq_ms_per_token": None}) == ""  # no figures: no guess
