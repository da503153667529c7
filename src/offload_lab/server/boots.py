"""Boots are data: what a server start ended as, read from the process, the log and a probe request.

Outcomes (``boot.json``'s ``outcome``) and the group each belongs to (``category``, the issue's five classes):

| outcome | category | what happened |
|---|---|---|
| ``ready`` | ready | /health and /v1/models answered, and the probe request (if enabled) was answered |
| ``oom_load`` | oom_load | out of memory while loading weights (PyTorch's OutOfMemoryError, CUDA out of memory, the kernel's OOM killer) |
| ``oom_kv_cache`` | oom_kv_cache | weights loaded, but the KV cache did not fit (vLLM's KV-cache checks) |
| ``init_failure`` | other_init_failure | initialization failed for a reason other than memory: a configuration vLLM rejects, "EngineCore failed to start", any traceback |
| ``exited`` | other_init_failure | the process exited with no engine-initialization error in its log: the command line was refused (a bad flag) or it gave no reason |
| ``timeout`` | timeout | not ready within the stack's ready_timeout_s |
| ``died_first_request`` | died_first_request | ready, then the engine died on the probe request (/health answers 503, or the process exits) |
| ``probe_failed`` | probe_failed | ready, and the probe request failed while the server stayed healthy |

The patterns are the messages vLLM and PyTorch print (their source: ``vllm/v1/core/kv_cache_utils.py``,
``vllm/v1/worker/cpu_worker.py``, ``vllm/v1/engine/core.py``, ``vllm/v1/engine/utils.py``,
``vllm/v1/engine/exceptions.py``, ``vllm/v1/executor/multiproc_executor.py``, PyTorch's CUDA caching allocator).
Memory checks come first: an out-of-memory failure is also an "EngineCore failed to start".
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import httpx

from offload_lab.core import progress

BOOTS = "boots"  # the experiment every server start is recorded under, ready or not
BOOT_JSON = "boot.json"


OUTCOMES = ("ready", "oom_load", "oom_kv_cache", "init_failure", "exited", "timeout", "died_first_request",
            "probe_failed")
CATEGORY = {
    "ready": "ready",
    "oom_load": "oom_load",
    "oom_kv_cache": "oom_kv_cache",
    "init_failure": "other_init_failure",
    "exited": "other_init_failure",
    "timeout": "timeout",
    "died_first_request": "died_first_request",
    "probe_failed": "probe_failed",
}

OOM_KV = [
    r"No available memory for the cache blocks",
    r"is larger than the available KV cache memory",
    r"KV cache (?:space|memory).*(?:too small|insufficient|not enough)",
    r"To serve at least one request with the model's max seq len",
    r"insufficient .*KV cache",
    r"Not enough memory.*(?:KV|cache)",
    # CPU backend: the explicit KV size is more than the NUMA node has free.
    r"is less than requested memory for kv",
]
OOM_LOAD = [
    r"torch\.OutOfMemoryError",
    r"torch\.cuda\.OutOfMemoryError",
    r"CUDA out of memory",
    r"CUDA error: out of memory",
    r"\bOutOfMemoryError\b",
    r"Cannot allocate memory",
    r"DefaultCPUAllocator: not enough memory",
    r"std::bad_alloc",
]
# argparse and vLLM's FlexibleArgumentParser: the command line was refused before anything loaded.
USAGE = [
    r"error: unrecognized arguments",
    r"error: argument \S+",
    r"error: the following arguments are required",
    r"error: invalid choice",
]
INIT_FAILURE = [
    r"EngineCore failed to start",
    r"Engine core initialization failed",
    r"WorkerProc initialization failed",
    r"Frontend process failed during engine core initialization",
    r"\bValidationError\b",
    r"Traceback \(most recent call last\)",
]
# The engine died after it was ready (EngineDeadError's message, EngineCore's fatal-error log line, the worker
# monitor's, CUDA faults, native crashes).
ENGINE_DEAD = [
    r"EngineDeadError",
    r"EngineCore encountered a fatal error",
    r"EngineCore encountered an issue",
    r"Worker proc \S+ died unexpectedly",
    r"Engine core process \S+ died unexpectedly",
    r"AsyncLLM output_handler failed",
    r"CUDA error: an illegal memory access",
    r"CUDA error: misaligned address",
    r"device-side assert triggered",
    r"Fatal Python error",
    r"Segmentation fault",
]


def _any(patterns: list[str], text: str, flags: int = 0) -> str | None:
    for p in patterns:
        m = re.search(p, text, flags)
        if m:
            return m.group(0)
    return None


def classify_boot(returncode: int | None, log_text: str, ready: bool, timed_out: bool,
                  probe_ok: bool | None = None, engine_dead: bool = False) -> str:
    """Outcome of a boot (see the module docstring).

    ``returncode`` is None while the process still runs. ``probe_ok`` is None when no probe was sent.
    ``engine_dead``: after a failed probe, /health stopped answering 200. A SIGKILL from the kernel's OOM killer
    (-9 or 137) with no other message counts as out of memory at load.
    """
    if ready:
        if probe_ok is False:
            dead = engine_dead or returncode is not None or _any(ENGINE_DEAD, log_text) is not None
            return "died_first_request" if dead else "probe_failed"
        return "ready"
    if _any(OOM_KV, log_text, re.IGNORECASE):
        return "oom_kv_cache"
    if _any(OOM_LOAD, log_text):
        return "oom_load"
    if returncode in (-9, 137):
        return "oom_load"
    if _any(USAGE, log_text):
        return "exited"
    if _any(INIT_FAILURE, log_text):
        return "init_failure"
    if returncode is not None:
        return "exited"
    return "timeout" if timed_out else "exited"


def evidence(log_text: str) -> str | None:
    """The first log line that decided the outcome (for boot.json and the boots table), if any."""
    for group in (OOM_KV, OOM_LOAD, USAGE, ENGINE_DEAD, INIT_FAILURE):
        for p in group:
            for line in log_text.splitlines():
                if re.search(p, line, re.IGNORECASE if group is OOM_KV else 0):
                    return _LOG_PREFIX.sub("", line.strip())[:500]
    return None


# vLLM's line prefix, "(EngineCore pid=5414) ERROR 11-29 20:12:55 [core.py:1510] ": noise in a one-line verdict.
_LOG_PREFIX = re.compile(r"^(?:\(\w+ pid=\d+\)\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:.]+ "
                         r"\[[^\]]*\]\s*)?")


# What a booting vLLM server is doing, from the lines its log prints at each step (vLLM's own messages: config.py and
# model.py for the configuration, core.py for the engine, the model runners and loaders for the weights, the CPU and
# GPU runners' warm-up and CUDA-graph capture, kv_cache_utils.py, the API server's start). Later steps come later in
# the list; a boot's phase is the last one whose line has appeared so far.
BOOT_PHASES: list[tuple[str, str]] = [
    (r"non-default args|Resolved architecture", "reading the model's configuration"),
    (r"Initializing a V1 LLM engine", "starting the engine"),
    (r"Starting to load model|Loading safetensors|Loading weights", "loading the weights"),
    (r"Memory profiling|profile run|Initial profiling", "profiling memory"),
    (r"Warming up model|Compiling a graph|torch\.compile|Dynamo bytecode", "warming up (compiling the model)"),
    (r"Capturing CUDA graph", "capturing CUDA graphs"),
    (r"KV cache size|GPU KV cache|for KV cache", "allocating the KV cache"),
    (r"init engine .* took", "engine ready; starting the API server"),
    (r"Starting vLLM (?:API )?server|Available routes", "API server starting"),
    (r"Application startup complete", "answering /health"),
]
BOOT_STARTING = "starting the server process (importing vLLM)"


def boot_phase(log_text: str) -> str:
    """The phase a boot has reached, read from its log so far (see :data:`BOOT_PHASES`)."""
    reached = BOOT_STARTING
    for pattern, words in BOOT_PHASES:
        if re.search(pattern, log_text):
            reached = words
    return reached


def wait_ready(url: str, process: Any, log_path: Path, timeout_s: float,
               label: str) -> tuple[bool, str | None, bool]:
    """Poll until /health and /v1/models answer: (ready, the served model, timed out). Minutes pass here on a CPU or
    with a big model, so each phase the server's log reaches is said under ``label`` (core.progress)."""
    deadline = time.monotonic() + timeout_s
    said = None
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False, None, False
            phase = boot_phase(log_path.read_text(errors="replace"))
            if phase != said:
                progress.phase(label, phase)
                said = phase
            try:
                if client.get(url + "/health").status_code == 200:
                    models = client.get(url + "/v1/models").json()
                    names = [m["id"] for m in models.get("data", [])]
                    if names:
                        return True, names[0], False
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(1.0)
    return False, None, True


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


# --- the probe ---------------------------------------------------------------------------------------------------

def probe(url: str, model: str, prompt: str, max_tokens: int, timeout_s: float) -> dict[str, Any]:
    """One small completion, not streamed. Returns what happened; never raises."""
    t0 = time.monotonic()
    out: dict[str, Any] = {"ok": False, "status": None, "error": None, "seconds": None, "completion_tokens": None}
    try:
        r = httpx.post(url + "/v1/completions", timeout=timeout_s,
                       json={"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0})
        out["status"] = r.status_code
        if r.status_code == 200:
            body = r.json()
            out["completion_tokens"] = (body.get("usage") or {}).get("completion_tokens")
            out["ok"] = bool(body.get("choices"))
            if not out["ok"]:
                out["error"] = "answer without choices"
        else:
            out["error"] = r.text[:500]
    except (httpx.HTTPError, ValueError) as e:
        out["error"] = f"{type(e).__name__}: {e}"[:500]
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def watch_death(url: str, alive: Callable[[], bool], grace_s: float) -> dict[str, Any]:
    """After a failed probe: does the engine die within ``grace_s``? /health answering anything but 200 (vLLM answers
    503 once the engine is dead), no answer, or the process exiting all count."""
    deadline = time.monotonic() + grace_s
    last: Any = None
    while True:
        if not alive():
            return {"dead": True, "how": "process exited"}
        try:
            code = httpx.get(url + "/health", timeout=5.0).status_code
            last = code
            if code != 200:
                return {"dead": True, "how": f"/health answered {code}"}
        except httpx.HTTPError as e:
            last = type(e).__name__
            return {"dead": True, "how": f"/health did not answer ({last})"}
        if time.monotonic() >= deadline:
            return {"dead": False, "how": f"/health still answered {last} after {grace_s:g} s"}
        time.sleep(1.0)


def boot_records(boots: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per boot run (anything with ``run_id``, ``manifest`` and ``json(name)``, as the paper's run sets
    are): its outcome, start-up time, probe, packages and the machine it ran on."""
    out = []
    for s in boots:
        b = s.json(BOOT_JSON)
        m = s.manifest
        out.append({"run_id": s.run_id, "outcome": b.get("outcome"), "startup_s": b.get("startup_s"),
                    "probe": b.get("probe"),
                    "started_at": m.get("started_at"), "packages": b.get("server_packages") or {},
                    "host": (m.get("environment") or {}).get("hostname_hash"),
                    "gpu": (m.get("environment") or {}).get("gpu") or {}})
    return out
