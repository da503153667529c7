"""The emulated pod: its pod model reproduces the published figures it was built from, its boots are classified by
the real classifier, and the real load generator measures the TTFT, TPOT, cache hits and /metrics the model says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from offload_lab.core import runs
from offload_lab.emulate.podmodel import load_pod_model
from offload_lab.load import sweep as concurrency
from offload_lab.load import client as load
from offload_lab.load import metrics, prompts, workloads
from offload_lab.load.endpoint import Endpoint
from offload_lab.server import stack as stackmod

# Timings held to a tolerance: run alone, after the rest of the suite (Makefile, `make test`).
pytestmark = pytest.mark.timing

ROOT = Path(__file__).resolve().parents[1]
POD = ROOT / "configs" / "pods" / "study-published.yaml"


def test_pod_model_reproduces_the_published_points():
    m = load_pod_model(POD)
    t = m.decode.agent_turns
    for s, med in zip(t.streams, t.median_tok_s):
        assert m.base_tpot_ms(s) == pytest.approx(1000 / med)
    assert m.ttft_s(131072) == pytest.approx(18.33) and m.ttft_s(260000) == pytest.approx(45.07)
    assert m.ttft_s(64, 262144) == pytest.approx(1.66)
    assert m.context_factor(262144) / m.context_factor(4096) == pytest.approx(8.3 / 7.6)
    assert m.kv_capacity_tokens() == int(5 * 131984 / 0.48)
    # The jitter's p5 of the rate is the table's p5.
    import math
    for s, med, p5 in zip(t.streams, t.median_tok_s, t.p5_tok_s):
        assert med * math.exp(-1.6449 * m.rate_sigma(s)) == pytest.approx(p5, rel=1e-3)
    assert m.leaves_out


def _model_dir(tmp: Path) -> Path:
    """A model directory the emulator reads: config.json with 4 MoE layers of 8 experts (no weights)."""
    d = tmp / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "first_k_dense_replace": 0,
                                               "n_routed_experts": 8}))
    (d / "model-00001-of-00001.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return d


def _steady_pod_model(tmp: Path) -> Path:
    """The published model with its jitter off (p5 = median, no TTFT spread), so that timings can be checked."""
    data = yaml.safe_load(POD.read_text())
    data["decode"]["agent_turns"]["p5_tok_s"] = list(data["decode"]["agent_turns"]["median_tok_s"])
    data["prefill"]["ttft_jitter_sigma"] = 0.0
    path = tmp / "steady.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _stack(tmp: Path, pod_model: Path, name: str, plan: str | None, flags: dict, fmt: str = "dsv41-host-plan",
           own_plan: str = "{}") -> stackmod.Stack:
    model = tmp / "model" if (tmp / "model").is_dir() else _model_dir(tmp)
    served = tmp / "gen.dsv41-host-plan.json"
    served.write_text(json.dumps({f"model.layers.{i}.ffn.experts": [1, 2] for i in range(4)}))
    (tmp / "gen.json").write_text(own_plan)  # the offload-lab plan the served one is written from
    spec = {
        "name": name, "python": sys.executable,
        "model": {"path": str(model), "served_name": "pod"},
        "plans": {"env": "EXL3_HOST_EXPERTS", "format": fmt, "use": plan,
                  "files": {"gen": {"path": str(tmp / "gen.json"), "sha256": runs.sha256_file(tmp / "gen.json"),
                                    "served_path": str(tmp / ("gen.dsv41-host-plan.json" if fmt != "offload-lab"
                                                                else "gen.json"))}}},
        "server": {"module": "offload_lab.emulate.server", "args": ["--pod-model", str(pod_model)],
                   "flags": {"max_model_len": 65536, "block_size": 16, "max_num_seqs": 8, **flags},
                   "ready_timeout_s": 60, "stop_timeout_s": 10, "probe": {"timeout_s": 60, "grace_s": 5}},
    }
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(spec))
    return stackmod.load_stack(f, root=ROOT)


@pytest.fixture(scope="module")
def pod(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pod")
    st = _stack(tmp, _steady_pod_model(tmp), "emulated", "gen", {})
    server = stackmod.start_server(st, tmp / "data", "t")
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("plan,flags,expected", [
    (None, {}, "oom_load"),  # published E2: every weight on the GPUs
    ("gen", {}, "ready"),
    ("gen", {"offload_backend": "uva", "block_size": 64}, "init_failure"),
    ("gen", {"offload_backend": "uva", "block_size": 128}, "died_first_request"),
])
def test_boots_follow_the_pod_model_and_the_real_classifier(tmp_path, plan, flags, expected):
    st = _stack(tmp_path, POD, "boot", plan, flags)
    server = stackmod.boot(st, tmp_path / "data", "t")
    server.stop()
    assert server.boot["outcome"] == expected, server.boot.get("log_tail")
    if expected != "ready":
        assert server.boot["evidence"]


def test_a_plan_in_the_wrong_format_boots_out_of_memory(tmp_path):
    # The patch reads dsv41-host-plan; an offload-lab plan reaches no layer, so every expert stays on the GPUs.
    _model_dir(tmp_path)
    st = _stack(tmp_path, POD, "wrong", "gen", {}, fmt="offload-lab",
                own_plan=json.dumps({"format": "offload-lab-plan", "version": 1}))
    server = stackmod.boot(st, tmp_path / "data", "t")
    server.stop()
    assert server.boot["outcome"] == "oom_load"
    assert "host-expert plan" in server.log_path.read_text()


def test_ttft_tpot_and_cache_follow_the_model_under_the_load_generator(pod, tmp_path):
    m = load_pod_model(_steady_pod_model(tmp_path))
    with Endpoint(pod.url).sync_client() as http:
        tok = prompts.Tokenizer(pod.url, pod.model_name, http)
        text = prompts.exact_prompt(tok, 3000, "fresh")
        assert tok.count(text) == 3000 and tok.detokenize(tok.tokenize(text)) == text
    rec = load.run_one(pod.url, "/v1/completions", load.completion_payload(pod.model_name, text, 40), 40)
    assert rec.ok and rec.prompt_tokens == 3000 and rec.cached_tokens == 0
    assert rec.ttft_s == pytest.approx(m.ttft_s(3000), rel=0.05, abs=0.01)
    assert rec.tpot_ms == pytest.approx(m.tpot_ms(1, 3000), rel=0.05)
    # The same prompt again: every whole block but the last token's is served from the cache.
    again = load.run_one(pod.url, "/v1/completions", load.completion_payload(pod.model_name, text, 4), 4)
    assert again.cached_tokens == (3000 - 1) // 16 * 16
    assert again.ttft_s < rec.ttft_s


def test_streams_share_the_pod_as_the_agent_table_says(pod, tmp_path):
    m = load_pod_model(_steady_pod_model(tmp_path))
    run = runs.new_run(tmp_path, "t", "agent_turns")
    spec = workloads.WorkloadSpec(regime="agent_turns", initial_context_tokens=600, turn_new_tokens=40,
                                  output_tokens=48)
    params = concurrency.SweepParams(workload=spec, streams=[1, 4], requests_per_stream=2)
    verdict = concurrency.run_sweep(run, pod.url, params, progress=None)
    levels = concurrency.summarize_run(run.path).set_index("streams")
    for n in (1, 4):
        assert levels.loc[n, "tpot_median_ms"] == pytest.approx(m.tpot_ms(n, 700), rel=0.06)
        assert levels.loc[n, "cache_misses"] == 0 and levels.loc[n, "errors"] == 0
        # /metrics as the load generator reads it: the server's own TPOT beside the client's.
        assert levels.loc[n, "server_tpot_mean_ms"] == pytest.approx(levels.loc[n, "tpot_mean_ms_all"], rel=0.02)
        assert levels.loc[n, "prefix_cache_hit_rate"] > 0.5
    assert verdict["provisioning_streams"] == 4  # 59 tok/s at 4 streams clears 44
    samples = metrics.pick(metrics.parse(Endpoint(pod.url).metrics_text()))
    assert samples["ttft_count"] and samples["generation_tokens"] and samples["prefix_cache_hits"]
    assert metrics.block_size(pod.url) == 16


def test_too_long_a_request_is_refused_as_vllm_refuses_it(pod):
    body = {"model": pod.model_name, "prompt": "word " * 65530, "max_tokens": 100}
    r = Endpoint(pod.url).post_json("/v1/completions", body)
    assert r.status_code == 400 and "maximum context length is 65536" in r.json()["message"]
