"""HumanEval scoring: rebuild the program from the original prompt, run its tests in a subprocess, self-check.

The completion is what the endpoint wrote after the partial assistant message (the code fence and the prompt).
The program is ``prompt + completion`` with the Codex stops applied to the completion only (prompts /10, /32, /38
and /50 hold extra ``def``s of their own), then the problem's tests and ``check(entry_point)``.

Each program runs in its own Python process (isolated mode, a fresh temporary directory, no stdin, resource limits,
its whole process group killed at the timeout). This executes model-written code on this machine, as every
HumanEval harness does; run untrusted endpoints' output in a container. Programs run in parallel, one per core.
A program that times out is run once more with twice the time, since CPU load, not the code, is the usual cause;
assertion failures are deterministic and are not re-run.

The self-check runs the 164 canonical solutions (all must pass) and 164 empty completions (none may pass) with the
same executor; a scorer that fails it cannot score.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

CODEX_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
DEFAULT_TIMEOUT_S = 10.0
_OUTPUT_KEEP = 2000


@dataclass(frozen=True)
class ExecResult:
    outcome: str  # "passed", "failed" or "exec_timeout"
    returncode: int | None
    stderr_tail: str
    timed_out_first: bool = False

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def clean_completion(completion: str) -> str:
    """The completion up to the first Codex stop or closing fence (if the server returned it)."""
    text = completion or ""
    cut = len(text)
    for stop in CODEX_STOPS + ("```",):
        i = text.find(stop)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


def program(problem: dict[str, Any], completion: str) -> str:
    return (problem["prompt"] + clean_completion(completion) + "\n\n" + problem["test"] + "\n\n"
            + f"check({problem['entry_point']})\n")


# Limits are set by the child itself before it runs the program: preexec_fn is unsafe beside threads.
_BOOT = (
    "import resource, runpy, sys\n"
    "cpu = int(sys.argv[2])\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))\n"
    "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "sys.argv = sys.argv[1:2]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def execute(source: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> ExecResult:
    """Run one program; ``passed`` means it exited 0 within ``timeout_s``."""
    with tempfile.TemporaryDirectory(prefix="offload-lab-he-") as tmp:
        path = Path(tmp) / "program.py"
        path.write_text(source, encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "TMPDIR": tmp, "PYTHONHASHSEED": "0",
               "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", _BOOT, str(path), str(int(timeout_s) + 2)], cwd=tmp, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return ExecResult("exec_timeout", None, "")
        finally:
            _kill_group(proc)  # anything the program spawned goes with it
    tail = err.decode("utf-8", errors="replace")[-_OUTPUT_KEEP:]
    return ExecResult("passed" if proc.returncode == 0 else "failed", proc.returncode, tail)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.wait()


def execute_with_rerun(source: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> ExecResult:
    first = execute(source, timeout_s)
    if first.outcome != "exec_timeout":
        return first
    second = execute(source, 2 * timeout_s)
    return ExecResult(second.outcome, second.returncode, second.stderr_tail, timed_out_first=True)


def execute_many(sources: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
                 workers: int | None = None) -> list[ExecResult]:
    """Run programs in parallel (threads, each waiting on its own process), results in input order."""
    workers = workers or max(os.cpu_count() or 1, 1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: execute_with_rerun(s, timeout_s), sources))


@dataclass(frozen=True)
class SelfCheck:
    problems: int
    canonical_passed: int
    empty_passed: int
    canonical_failures: tuple[str, ...]
    empty_passes: tuple[str, ...]
    timeout_s: float

    @property
    def ok(self) -> bool:
        return self.canonical_passed == self.problems and self.empty_passed == 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def self_check(problems: Sequence[dict[str, Any]], timeout_s: float = DEFAULT_TIMEOUT_S,
               workers: int | None = None) -> SelfCheck:
    """Canonical solutions must all pass, empty completions must all fail."""
    sources = [program(p, p["canonical_solution"]) for p in problems] + [program(p, "") for p in problems]
    results = execute_many(sources, timeout_s, workers)
    n = len(problems)
    canonical, empty = results[:n], results[n:]
    return SelfCheck(
        problems=n,
        canonical_passed=sum(r.passed for r in canonical),
        empty_passed=sum(r.passed for r in empty),
        canonical_failures=tuple(p["task_id"] for p, r in zip(problems, canonical) if not r.passed),
        empty_passes=tuple(p["task_id"] for p, r in zip(problems, empty) if r.passed),
        timeout_s=timeout_s,
    )


@lru_cache(maxsize=4)
def cached_self_check(timeout_s: float = DEFAULT_TIMEOUT_S) -> SelfCheck:
    """The self-check on all 164 problems, once per process (every run records the result it relied on)."""
    from offload_lab.quality.data import humaneval_items

    return self_check([it.fields for it in humaneval_items()], timeout_s)
