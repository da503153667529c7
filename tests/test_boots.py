"""Boots are data: classification on log excerpts in the formats vLLM and PyTorch print (copied from their source, and
real logs of the embedded server kept as fixtures), and every outcome produced by a real process (a stand-in
server that fails the way vLLM fails) with its boot run on disk."""

from __future__ import annotations

import json
import os

import pytest

from offload_lab.server import boots
from offload_lab.core import runs
from offload_lab.server import stack
from offload_lab.core.errors import ServerError

from pod_helpers import FIXTURES, fake_stack

LOGS = FIXTURES / "boot_logs"

# vllm/v1/engine/core.py (run_engine_core) and vllm/v1/engine/utils.py (wait_for_engine_startup): a non-memory error
# while the engine initializes.
INIT_FAILURE = """\
(EngineCore pid=5414) ERROR 11-29 20:12:55 [core.py:1510] EngineCore failed to start.
(EngineCore pid=5414) ERROR 11-29 20:12:55 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=5414) ERROR 11-29 20:12:55 [core.py:1510] AssertionError: block_size 64 is not supported
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""
# vllm/v1/executor/multiproc_executor.py (WorkerProc.worker_main)
WORKER_INIT = ("ERROR [multiproc_executor.py:790] WorkerProc initialization failed due to an exception in a "
               "background process. See stack trace for root cause.")
# vllm/config: a value the configuration rejects (pydantic), raised in the API server before the engine starts.
CONFIG_REJECTED = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
                   "  Value error, User-specified max_model_len (10000000) is greater than the derived "
                   "max_model_len (max_position_embeddings=32768 in model's config.json).")
# vllm/v1/engine/core.py (run_busy_loop fails after ready) and vllm/v1/engine/exceptions.py (EngineDeadError).
DIED = """\
(EngineCore pid=901) ERROR 11-29 21:00:03 [core.py:1512] EngineCore encountered a fatal error.
(EngineCore pid=901) ERROR 11-29 21:00:03 [core.py:1512] RuntimeError: CUDA error: an illegal memory access was encountered
(APIServer pid=800) ERROR 11-29 21:00:03 [async_llm.py:906] AsyncLLM output_handler failed.
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""
# vllm/v1/executor/multiproc_executor.py (monitor_workers)
WORKER_DIED = ("ERROR [multiproc_executor.py:316] Worker proc VllmWorker-1 died unexpectedly (exit code: -11), "
               "shutting down executor.")
# vllm/v1/worker/cpu_worker.py (determine_available_memory)
CPU_KV_NODE = ("ValueError: Available memory on node 0 (3.1/19.6 GiB) on kv cache allocation is less than requested "
               "memory for kv (40.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU "
               "memory used by other processes.")


@pytest.mark.parametrize("log,returncode,expected", [
    (INIT_FAILURE, 1, "init_failure"),
    (WORKER_INIT, 1, "init_failure"),
    (CONFIG_REJECTED, 1, "init_failure"),
    (CPU_KV_NODE, 1, "oom_kv_cache"),
    ("Traceback (most recent call last):\n  ...\nRuntimeError: something else\n", 1, "init_failure"),
    ("INFO loading weights\n", 1, "exited"),
    # Out of memory wins over the init-failure lines that always follow it.
    ("EngineCore failed to start.\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", 1,
     "oom_load"),
])
def test_init_failures_are_told_apart(log, returncode, expected):
    assert boots.classify_boot(returncode, log, ready=False, timed_out=False) == expected


@pytest.mark.parametrize("name", ["cpu_kvcache_space_0.log", "cpu_kv_bytes_tiny.log"])
def test_real_cpu_kv_failures_of_the_embedded_server_are_kv_cache(name):
    # Both ways to make the KV cache impossible on vLLM's CPU backend, as the embedded server logged them.
    text = (LOGS / name).read_text()
    assert boots.classify_boot(1, text, ready=False, timed_out=False) == "oom_kv_cache"
    assert "KV cache" in boots.evidence(text) or "cache blocks" in boots.evidence(text)


@pytest.mark.parametrize("log", [DIED, WORKER_DIED])
def test_died_on_the_first_request(log):
    # Still running (the API server lingers) but the engine is dead: the log says so.
    assert boots.classify_boot(None, log, ready=True, timed_out=False, probe_ok=False) == "died_first_request"
    assert boots.classify_boot(1, "", ready=True, timed_out=False, probe_ok=False) == "died_first_request"
    assert boots.classify_boot(None, "", ready=True, timed_out=False, probe_ok=False,
                               engine_dead=True) == "died_first_request"


def test_a_failed_probe_on_a_healthy_server_is_not_a_death():
    assert boots.classify_boot(None, "INFO all fine", ready=True, timed_out=False, probe_ok=False) == "probe_failed"
    assert boots.classify_boot(None, DIED, ready=True, timed_out=False, probe_ok=True) == "ready"


def test_every_outcome_has_a_category():
    assert set(boots.CATEGORY) == set(boots.OUTCOMES)
    assert boots.CATEGORY["exited"] == boots.CATEGORY["init_failure"] == "other_init_failure"


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("mode,expected,run_outcome", [
    ("ok", "ready", "ok"),
    ("oom_load", "oom_load", "failed"),
    ("kv", "oom_kv_cache", "failed"),
    ("init", "init_failure", "failed"),
    ("die_on_request", "died_first_request", "failed"),
])
def test_each_outcome_from_a_real_process(tmp_path, mode, expected, run_outcome):
    st = stack.load_stack(fake_stack(tmp_path, env={"FAKE_VLLM": mode}), root=tmp_path)
    server = stack.boot(st, tmp_path / "data", "t")
    try:
        assert server.boot["outcome"] == expected
        assert server.boot["category"] == boots.CATEGORY[expected]
        if expected == "ready":
            assert server.boot["probe"]["ok"] and server.boot["probe"]["completion_tokens"] == 4
        if expected == "died_first_request":
            assert server.boot["probe"]["ok"] is False and server.boot["death"]["dead"] is True
            assert "EngineDeadError" in server.boot["log_tail"]
        if expected not in ("ready",):
            assert server.boot["evidence"]
    finally:
        server.stop()
    assert _gone(server.boot["pid"])
    boot = json.loads((server.run.path / "boot.json").read_text())
    assert boot["outcome"] == expected
    m = runs.load_manifest(server.run.path)
    assert m["outcome"] == run_outcome and runs.verify_run(server.run.path) == []
    assert m["environment"]["gpu"] is not None  # the topology record travels with every boot


def test_start_server_raises_with_the_outcome_and_keeps_the_boot(tmp_path):
    st = stack.load_stack(fake_stack(tmp_path, env={"FAKE_VLLM": "die_on_request"}), root=tmp_path)
    with pytest.raises(ServerError, match="died_first_request"):
        stack.start_server(st, tmp_path / "data", "t")
    (boot_dir,) = list((tmp_path / "data" / "t" / "boots").iterdir())
    assert json.loads((boot_dir / "boot.json").read_text())["outcome"] == "died_first_request"


def test_probe_can_be_switched_off(tmp_path):
    st = stack.load_stack(fake_stack(tmp_path, env={"FAKE_VLLM": "die_on_request"}, probe={"enabled": False}),
                          root=tmp_path)
    server = stack.boot(st, tmp_path / "data", "t")
    try:
        assert server.boot["outcome"] == "ready" and server.boot["probe"] is None
    finally:
        server.stop()


def test_plan_file_is_given_to_the_server_and_checked(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    plans = {"env": "EXL3_HOST_EXPERTS", "use": "p", "files": {"p": {"path": str(plan), "sha256": "0" * 64}}}
    st = stack.load_stack(fake_stack(tmp_path, plans=plans), root=tmp_path)
    assert stack.server_env(st)["EXL3_HOST_EXPERTS"] == str(plan)
    from offload_lab.core.errors import InputError

    with pytest.raises(InputError, match="sha256"):
        stack.boot(st, tmp_path / "data", "t")
    plan.unlink()
    with pytest.raises(InputError, match="does not exist"):
        stack.boot(st, tmp_path / "data", "t")
    # Without a plan the variable is unset, not inherited from the shell.
    no_plan = st.with_override(stack.StackOverride(plan="none"))
    assert no_plan.plan_path is None and stack.server_env(no_plan)["EXL3_HOST_EXPERTS"] is None
