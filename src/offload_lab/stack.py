"""Stack control: stack files, starting and stopping a vLLM server, and boots recorded as data.

A stack file says which Python environment runs the server, which model it serves and with which flags. Starting
it creates a run of the ``boots`` experiment: the server's log is kept there, and the boot's outcome is classified
(ready, out of memory while loading, out of memory allocating the KV cache, exited, not ready in time) and written
to ``boot.json`` with the log's tail, so a failed boot is a measurement, not only an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import environment, runs
from .errors import InputError, ServerError

LOG_NAME = "server.log"
BOOT_NAME = "boot.json"


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="model directory, relative to the repository root or absolute")
    build: str | None = Field(default=None, description="'tiny' builds the embedded model when the path is missing")
    config: str | None = Field(default=None, description="builder config (for build: tiny)")
    served_name: str | None = Field(default=None, description="name the server reports in /v1/models")


class ServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    module: str = "vllm.entrypoints.openai.api_server"
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cpus: list[int] | None = Field(
        default=None,
        description="CPU ids the server (and every process it starts) may run on; None: all. On a small CPU-only "
                    "machine, keeping vLLM's processes on one core leaves the others to the load client.",
    )
    ready_timeout_s: float = 600.0
    stop_timeout_s: float = 30.0


class StackFile(BaseModel):
    """A stack file (``configs/stacks/*.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    python: str = Field(description="interpreter of the server's environment, relative to the repository root")
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)


@dataclass
class Stack:
    spec: StackFile
    file: Path
    root: Path
    text: str

    def resolve(self, p: str) -> Path:
        path = Path(p).expanduser()
        return path if path.is_absolute() else self.root / path

    @property
    def python(self) -> Path:
        return self.resolve(self.spec.python)

    @property
    def model_path(self) -> Path:
        return self.resolve(self.spec.model.path)

    def record(self) -> dict[str, Any]:
        return {"file": str(self.file), "sha256": runs.sha256_file(self.file), "spec": self.spec.model_dump()}


def find_root(start: Path | None = None) -> Path:
    """The repository root: the nearest parent holding pyproject.toml and configs/ (else the working directory)."""
    here = (start or Path.cwd()).resolve()
    for p in [here, *here.parents]:
        if (p / "pyproject.toml").is_file() and (p / "configs").is_dir():
            return p
    return Path.cwd().resolve()


def load_stack(path: Path | str, root: Path | None = None) -> Stack:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"stack file {path} does not exist; the embedded one is configs/stacks/embedded.yaml")
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        spec = StackFile.model_validate(data)
    except yaml.YAMLError as e:
        raise InputError(f"stack file {path} is not valid YAML: {e}") from e
    except ValidationError as e:
        raise InputError(f"stack file {path} is not a valid stack file:\n{_pydantic_errors(e)}") from e
    return Stack(spec=spec, file=path.resolve(), root=(root or find_root(path.resolve().parent)), text=text)


def _pydantic_errors(e: ValidationError) -> str:
    return "\n".join(f"  {'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())


# --- boot classification -----------------------------------------------------------------------------------------

# Patterns as vLLM and PyTorch print them. KV-cache failures are checked first: they also mention memory.
_OOM_KV = [
    r"No available memory for the cache blocks",
    r"is larger than the available KV cache memory",
    r"KV cache (?:space|memory).*(?:too small|insufficient|not enough)",
    r"To serve at least one request with the model's max seq len",
    r"insufficient .*KV cache",
    r"Not enough memory.*(?:KV|cache)",
]
_OOM_LOAD = [
    r"torch\.OutOfMemoryError",
    r"torch\.cuda\.OutOfMemoryError",
    r"CUDA out of memory",
    r"CUDA error: out of memory",
    r"\bOutOfMemoryError\b",
    r"Cannot allocate memory",
    r"DefaultCPUAllocator: not enough memory",
    r"std::bad_alloc",
]


def classify_boot(returncode: int | None, log_text: str, ready: bool, timed_out: bool) -> str:
    """Outcome of a boot: ``ready``, ``oom_kv_cache``, ``oom_load``, ``exited`` or ``timeout``.

    ``returncode`` is None while the process still runs. A SIGKILL from the kernel's OOM killer (-9 or 137) with no
    other message counts as out of memory at load.
    """
    if ready:
        return "ready"
    if any(re.search(p, log_text, re.IGNORECASE) for p in _OOM_KV):
        return "oom_kv_cache"
    if any(re.search(p, log_text) for p in _OOM_LOAD):
        return "oom_load"
    if returncode in (-9, 137):
        return "oom_load"
    if returncode is not None:
        return "exited"
    return "timeout" if timed_out else "exited"


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


# --- ports -------------------------------------------------------------------------------------------------------

def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# --- the server --------------------------------------------------------------------------------------------------

@dataclass
class Server:
    """A running (or failed) server started from a stack. Use :func:`start_server` or :func:`serving`."""

    stack: Stack
    run: runs.Run
    host: str
    port: int
    command: list[str]
    process: subprocess.Popen | None = None
    boot: dict[str, Any] = field(default_factory=dict)
    _log: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def model_name(self) -> str:
        return self.boot.get("served_model") or self.stack.spec.model.served_name or str(self.stack.model_path)

    @property
    def log_path(self) -> Path:
        return self.run.file(LOG_NAME)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> dict[str, Any]:
        """SIGTERM to the server's process group, SIGKILL after the stack's timeout; then finish the boot run."""
        info: dict[str, Any] = {"signal": None, "returncode": None}
        if self.process is not None:
            info = terminate_group(self.process, self.stack.spec.server.stop_timeout_s)
        if self._log is not None and not self._log.closed:
            self._log.close()
        if self.run.manifest.get("outcome") == "running":
            ok = self.boot.get("outcome") == "ready"
            self.boot["stop"] = info
            self.run.write_json(BOOT_NAME, self.boot)
            self.run.finish("ok" if ok else "failed", error=None if ok else self.boot.get("outcome"))
        return info


def process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate_group(proc: subprocess.Popen, timeout_s: float) -> dict[str, Any]:
    """Stop a process started with ``start_new_session=True`` and every child it made."""
    pgid = proc.pid  # session leader: its pid is the group id
    sent = None
    if proc.poll() is None or process_group_alive(pgid):
        sent = "SIGTERM"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not process_group_alive(pgid):
                break
            time.sleep(0.2)
        else:
            sent = "SIGKILL"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    # Children that outlive the leader still hold the group id; give them the same treatment.
    if process_group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        sent = "SIGKILL"
        for _ in range(50):
            if not process_group_alive(pgid):
                break
            time.sleep(0.1)
    return {"signal": sent, "returncode": proc.returncode, "group_left": process_group_alive(pgid)}


def server_command(stack: Stack, host: str, port: int) -> list[str]:
    spec = stack.spec
    cmd = [str(stack.python), "-m", spec.server.module, "--model", str(stack.model_path), "--host", host,
           "--port", str(port)]
    if spec.model.served_name:
        cmd += ["--served-model-name", spec.model.served_name]
    return cmd + list(spec.server.args)


def ensure_model(stack: Stack) -> None:
    if stack.model_path.is_dir() and any(stack.model_path.glob("*.safetensors")):
        return
    if stack.spec.model.build == "tiny":
        from . import tinymodel

        config = stack.resolve(stack.spec.model.config) if stack.spec.model.config else None
        tinymodel.build_tiny_model(stack.model_path, config)
        return
    raise InputError(
        f"stack file {stack.file}: model directory {stack.model_path} is missing or holds no .safetensors; "
        "download or build it first"
    )


def start_server(
    stack: Stack,
    data_root: Path,
    campaign: str,
    port: int | None = None,
    host: str = "127.0.0.1",
    ready_timeout_s: float | None = None,
) -> Server:
    """Start the stack's server and wait until it answers ``/health`` and ``/v1/models``.

    Always returns a :class:`Server` whose ``boot['outcome']`` says what happened; raises :class:`ServerError`
    (after recording the boot) only when the caller should not go on, which is every outcome but ``ready``.
    """
    if not stack.python.exists():
        raise InputError(
            f"stack file {stack.file}: the server's Python {stack.python} does not exist; "
            "create the server environment with `make server-env`"
        )
    if port is not None and not port_is_free(port, host):
        raise InputError(f"port {port} on {host} is already in use; pass another --port or leave it out")
    ensure_model(stack)
    port = port or free_port(host)
    cmd = server_command(stack, host, port)
    run = runs.new_run(
        data_root, campaign, "boots",
        parameters={"stack": stack.spec.name, "port": port},
        environment=environment.capture_environment(),
        stack=stack.record(),
        server_command=cmd,
    )
    server = Server(stack=stack, run=run, host=host, port=port, command=cmd)
    env = {**os.environ, **stack.spec.server.env, "PYTHONUNBUFFERED": "1"}
    server._log = open(server.log_path, "ab")
    started = time.monotonic()
    server.process = subprocess.Popen(
        cmd, stdout=server._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        cwd=str(stack.root), start_new_session=True, preexec_fn=_affinity(stack.spec.server.cpus),
    )
    timeout = ready_timeout_s if ready_timeout_s is not None else stack.spec.server.ready_timeout_s
    ready, served, timed_out = _wait_ready(server, timeout)
    startup_s = time.monotonic() - started
    log_text = server.log_path.read_text(errors="replace")
    outcome = classify_boot(server.process.poll(), log_text, ready, timed_out)
    server.boot = {
        "outcome": outcome,
        "startup_s": round(startup_s, 3),
        "url": server.url,
        "command": cmd,
        "returncode": server.process.poll(),
        "pid": server.process.pid,
        "served_model": served,
        "server_packages": environment.interpreter_packages(stack.python),
        "model": _model_record(stack.model_path),
        "log_tail": tail(log_text) if outcome != "ready" else None,
    }
    run.write_json(BOOT_NAME, server.boot)
    if outcome != "ready":
        server.stop()
        raise ServerError(
            f"the server from {stack.file} did not become ready: {outcome} after {startup_s:.0f} s. "
            f"Log kept at {server.log_path}; its last lines:\n{tail(log_text, 15)}"
        )
    return server


def _affinity(cpus: list[int] | None) -> Callable[[], None] | None:
    if not cpus:
        return None
    available = os.sched_getaffinity(0)
    chosen = set(cpus) & available
    if not chosen:
        raise InputError(f"stack server.cpus {cpus} names no CPU this process may use (it may use {sorted(available)})")
    return lambda: os.sched_setaffinity(0, chosen)


def _model_record(model_path: Path) -> dict[str, Any]:
    config = model_path / "config.json"
    files = {p.name: runs.sha256_file(p) for p in sorted(model_path.glob("*")) if p.is_file()}
    return {
        "path": str(model_path),
        "config": json.loads(config.read_text()) if config.is_file() else None,
        "files_sha256": files,
    }


def _wait_ready(server: Server, timeout_s: float) -> tuple[bool, str | None, bool]:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                return False, None, False
            try:
                if client.get(server.url + "/health").status_code == 200:
                    models = client.get(server.url + "/v1/models").json()
                    names = [m["id"] for m in models.get("data", [])]
                    if names:
                        return True, names[0], False
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(1.0)
    return False, None, True


@contextlib.contextmanager
def serving(stack: Stack, data_root: Path, campaign: str, port: int | None = None) -> Iterator[Server]:
    """Start a server for the duration of a ``with`` block; it is stopped however the block ends."""
    server = start_server(stack, data_root, campaign, port=port)
    try:
        yield server
    finally:
        server.stop()
