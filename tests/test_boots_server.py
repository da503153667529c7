"""Boots of the real embedded server: an impossible KV cache fails at init and is classified from the real log; a
good boot is probed; prefill interference is measured with probe requests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from offload_lab.experiments.interference import runner as interference
from offload_lab.core import runs
from offload_lab.server import stack

pytestmark = pytest.mark.server


def test_an_impossible_kv_cache_is_a_classified_boot(tmp_path, repo_root):
    # On vLLM's CPU backend the KV cache is sized explicitly; a megabyte cannot hold one request of 32,768 tokens.
    # (VLLM_CPU_KVCACHE_SPACE is whole GiB, and would override the flag, so the stack copy drops it.)
    data = yaml.safe_load((repo_root / "configs/stacks/embedded.yaml").read_text())
    args = data["server"]["args"]
    i = args.index("--max-model-len")
    data["server"]["args"] = args[:i] + args[i + 2:] + ["--max-model-len", "32768",
                                                        "--kv-cache-memory-bytes", "1048576"]
    data["server"]["env"] = {}
    f = tmp_path / "kv.yaml"
    f.write_text(yaml.safe_dump(data))
    st = stack.load_stack(f, root=repo_root)
    server = stack.boot(st, tmp_path / "data", "t")
    assert server.boot["outcome"] == "oom_kv_cache"
    assert server.boot["category"] == "oom_kv_cache"
    assert "To serve at least one request with the model's max seq len (32768)" in server.boot["evidence"]
    assert server.boot["probe"] is None and not server.alive()
    m = runs.load_manifest(server.run.path)
    assert m["outcome"] == "failed" and m["error"] == "oom_kv_cache"
    assert runs.verify_run(server.run.path) == []
    try:
        os.killpg(server.boot["pid"], 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive


def test_the_embedded_boot_was_probed(embedded_server):
    if embedded_server.run is None:
        pytest.skip("an external server (OFFLOAD_LAB_TEST_URL) has no boot record here")
    boot = json.loads((Path(embedded_server.run.path) / "boot.json").read_text())
    assert boot["outcome"] == "ready" and boot["category"] == "ready"
    assert boot["probe"]["ok"] is True and boot["probe"]["completion_tokens"] == 4
    assert boot["model"]["files_sha256"] and all(boot["model"]["files_sha256"].values())


def test_prefill_interference_is_measured_with_probes(tmp_path, embedded_server):
    params = interference.InterferenceParams(prefill_tokens=[0, 1024], probes=2, probe_output_tokens=24,
                                             probe_prompt_tokens=32)
    run = runs.new_run(tmp_path, "t", interference.EXPERIMENT, params.model_dump())
    summary = interference.run_experiment(run, embedded_server.url, params)
    run.finish("ok")
    assert summary["prefill_tokens"].tolist() == [0, 1024]
    assert summary["covered"].tolist() == [2, 2]
    base, loaded = summary.iloc[0], summary.iloc[1]
    assert base["background_requests"] == 0 and loaded["background_requests"] >= 1
    assert base["tpot_ratio"] == 1.0 and loaded["tpot_ratio"] > 0
    events = runs.read_events(run.file("events.jsonl"))
    bg = [e for e in events if e["kind"] == "background"]
    assert bg and all(e["prompt_tokens"] == 1024 for e in bg if e["ok"])
    assert all(e["cached_tokens"] in (0, None) or e["cached_tokens"] < 64 for e in bg if e["ok"])
    import pandas as pd

    pd.testing.assert_frame_equal(interference.summarize_run(run.path), summary, check_dtype=False)
