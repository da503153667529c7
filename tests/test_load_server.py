"""The load generator's regimes against the real vLLM CPU server: exact prompts, primed caches verified per request,
agent replies fed back."""

from __future__ import annotations

import pytest
import yaml

from offload_lab.campaigns import runner as campaign
from offload_lab.load import sweep as concurrency
from offload_lab.core import runs
from offload_lab.load import workloads

pytestmark = pytest.mark.server


def _sweep(tmp_path, server, **spec):
    run = runs.new_run(tmp_path, "t", "concurrency")
    params = concurrency.SweepParams(workload=workloads.WorkloadSpec(**spec), streams=[1, 2], requests_per_stream=2)
    verdict = concurrency.run_sweep(run, server.url, params, progress=None)
    events = runs.read_events(run.file("events.jsonl"))
    return verdict, concurrency.summarize_run(run.path), events


def test_shared_prefix_is_served_from_the_cache(tmp_path, embedded_server):
    verdict, levels, events = _sweep(tmp_path, embedded_server, regime="shared_prefix", prefix_tokens=600,
                                     suffix_tokens=20, output_tokens=8)
    reqs = [e for e in events if e["kind"] == "request"]
    assert all(e["ok"] for e in reqs)
    assert all(e["cached_tokens"] >= e["expect_cached_min"] > 0 for e in reqs)
    assert levels["cache_misses"].tolist() == [0, 0] and (levels["cache_checked"] > 0).all()
    assert all(e["prompt_tokens"] == e["expected_prompt_tokens"] for e in reqs)
    probes = [e for e in events if e["kind"] == "prime" and e["what"].startswith("probe")]
    assert probes and all(p["cache_ok"] for p in probes)
    assert verdict["median_by_streams"][1] > 0


def test_cold_prefill_is_not_served_from_the_cache(tmp_path, embedded_server):
    _, levels, events = _sweep(tmp_path, embedded_server, regime="cold_prefill", prompt_tokens=300, output_tokens=4)
    reqs = [e for e in events if e["kind"] == "request"]
    assert all(e["prompt_tokens"] == 300 for e in reqs)
    assert levels["cache_misses"].sum() == 0  # no request got more than a block from the cache


def test_private_contexts_each_hit_their_own_cache(tmp_path, embedded_server):
    _, levels, events = _sweep(tmp_path, embedded_server, regime="private_context", prefix_tokens=400,
                               suffix_tokens=16, output_tokens=8)
    assert levels["cache_misses"].sum() == 0 and levels["errors"].sum() == 0


def test_agent_turns_feed_back_the_reply_and_hit_the_cache(tmp_path, embedded_server):
    _, levels, events = _sweep(tmp_path, embedded_server, regime="agent_turns", initial_context_tokens=400,
                               turn_new_tokens=40, output_tokens=12)
    reqs = sorted((e for e in events if e["kind"] == "request" and e["level"] == 1), key=lambda e: e["turn"])
    assert [e["turn"] for e in reqs] == [0, 1]
    # The second turn carries the first turn's prompt, its reply and the new turn.
    assert reqs[1]["prompt_tokens"] >= reqs[0]["prompt_tokens"] + 12 + 40
    assert reqs[1]["messages"] == reqs[0]["messages"] + 2
    assert levels["cache_misses"].sum() == 0


def test_concurrency_and_agent_notebooks_run_through_the_campaign(tmp_path, repo_root, embedded_server):
    spec = yaml.safe_load((repo_root / "configs/campaigns/embedded.yaml").read_text())
    keep = {e["experiment"]: e for e in spec["experiments"] if e["experiment"] in ("concurrency", "agent_turns")}
    keep["concurrency"]["parameters"].update(
        regimes={"short": {"regime": "short", "prompt_tokens": 32, "output_tokens": 8}}, streams=[1, 2],
        requests_per_stream=2)
    keep["agent_turns"]["parameters"].update(initial_context_tokens=200, turn_new_tokens=20, output_tokens=8,
                                             streams=[1, 2], turns=2)
    for e in keep.values():
        e["notebook"] = str(repo_root / e["notebook"])
    spec.update(experiments=list(keep.values()), stack=str(repo_root / spec["stack"]))
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(spec))
    result = campaign.run_campaign(f, data_root=tmp_path / "data", url=embedded_server.url)
    for run_dir in result.runs:
        assert runs.load_manifest(run_dir)["outcome"] == "ok" and runs.verify_run(run_dir) == []
        assert (run_dir / "regimes.csv").is_file() and list((run_dir / "figures").glob("*.svg"))
    verdicts = concurrency.load_verdicts(result.runs[1])
    assert set(verdicts) == {"agent_turns"} and verdicts["agent_turns"]["held_bar_up_to_streams"] >= 1
