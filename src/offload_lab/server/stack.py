"""Stack control: loading stack files, starting and stopping a vLLM server, and boots recorded as data.

A stack file (schema in :mod:`offload_lab.server.spec`) says which Python environment runs the server, which model it
serves, with which flags, plan and environment. Starting it creates a run of the ``boots`` experiment: the server's
log is kept there, a probe request is sent once it is ready, and the boot's outcome is classified
(:mod:`offload_lab.server.boots`: ready, out of memory while loading, out of memory allocating the KV cache, other init
failure, not ready in time, died on the first request) and written to ``boot.json`` with the log's tail, so a failed
boot is a measurement, not only an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from pydantic import ValidationError

from offload_lab.server import boots
from offload_lab.core import environment
from offload_lab.core import progress, runs
from offload_lab.server.boots import classify_boot, tail  # noqa: F401  (re-exported: callers import them from here)
from offload_lab.core.errors import InputError, ServerError
from offload_lab.core.places import kind_of
from offload_lab.core.inputs import pydantic_input_error, read_json, read_text, parse_yaml
from offload_lab.core.paths import find_root
from offload_lab.core.procs import free_port, port_is_free, terminate_group
from offload_lab.core.redact import redact_args
from offload_lab.server.watchdog import child_setup, start_watchdog
from offload_lab.server.spec import StackFile, StackOverride, apply_override, deep_merge, unpinned_items

LOG_NAME = "server.log"
BOOT_STEP = "server boot"  # the label a boot's phases are shown under (core.progress)
BOOT_NAME = boots.BOOT_JSON


@dataclass
class Stack:
    spec: StackFile
    file: Path
    root: Path
    text: str
    override: StackOverride | None = None
    variant: str | None = None

    def resolve(self, p: str) -> Path:
        path = Path(p).expanduser()
        return path if path.is_absolute() else self.root / path

    @property
    def python(self) -> Path:
        return self.resolve(self.spec.python)

    @property
    def model_path(self) -> Path:
        return self.resolve(self.spec.model.path)

    @property
    def plan_path(self) -> Path | None:
        """The plan file the server boots with, if any, in the format its offload part reads (``plans.format``)."""
        plans = self.spec.plans
        if plans is None or plans.use is None:
            return None
        return self.resolve(plans.served_path(plans.use))

    @property
    def source_plan_path(self) -> Path | None:
        """The offload-lab plan the served one is written from (the same file when the format is offload-lab)."""
        plans = self.spec.plans
        if plans is None or plans.use is None:
            return None
        return self.resolve(plans.files[plans.use].path)

    def with_override(self, override: StackOverride | None, variant: str | None = None) -> "Stack":
        """The same stack file with a variant applied (flags, arguments, environment, plan)."""
        if override is None or override.is_empty():
            return Stack(self.spec, self.file, self.root, self.text, None, variant)
        return Stack(apply_override(self.spec, override), self.file, self.root, self.text, override, variant)

    def record(self) -> dict[str, Any]:
        # The spec holds no secret values (server.env refuses them; env_from holds names), and what gets written is
        # redacted again by the run's writer.
        out: dict[str, Any] = {"file": str(self.file), "sha256": runs.sha256_file(self.file),
                               "spec": self.spec.model_dump()}
        if self.spec.extends:
            base = Path(self.spec.extends)
            out["extends"] = {"file": str(base), "sha256": runs.sha256_file(base) if base.is_file() else None}
        if self.override is not None:
            out["variant"] = self.variant
            out["override"] = self.override.model_dump()
        unpinned = unpinned_items(self.spec)
        if unpinned:
            out["unpinned"] = unpinned
        return out


def load_stack(path: Path | str, root: Path | None = None) -> Stack:
    path = Path(path)
    if kind_of(path) is None:  # anything else there is named for what it is by read_text
        raise InputError(f"stack file {path} does not exist; the embedded one is configs/stacks/embedded.yaml")
    text = read_text(path, "stack file")
    root = root or find_root(path.resolve().parent)
    data = _read_yaml(path, text)
    bases: list[Path] = []
    while data.get("extends") is not None:
        if not isinstance(data["extends"], str):
            raise InputError(f"stack file {bases[-1] if bases else path}: extends {data['extends']!r} is not a file "
                             "name; give the path of one stack file (root-relative) or leave it out")
        base_path = Path(data["extends"])
        base_path = base_path if base_path.is_absolute() else root / base_path
        if base_path.resolve() in bases or base_path.resolve() == path.resolve():
            raise InputError(f"stack file {path}: `extends` goes round in a circle at {base_path}")
        if not base_path.is_file():
            raise InputError(f"stack file {path}: extends {data['extends']}, which does not exist")
        bases.append(base_path.resolve())
        base = _read_yaml(base_path, read_text(base_path, "stack file (extended)"))
        # The base's own `extends` (if any) is followed next; this file's is the one recorded.
        data = {**deep_merge(base, {k: v for k, v in data.items() if k != "extends"}),
                "extends": base.get("extends")}
    data["extends"] = str(bases[0]) if bases else None
    try:
        spec = StackFile.model_validate(data)
    except ValidationError as e:
        raise pydantic_input_error(e, f"stack file {path}") from e
    _check_paths(spec, path, root)
    return Stack(spec=spec, file=path.resolve(), root=root, text=text)


def _check_paths(spec: StackFile, path: Path, root: Path) -> None:
    """The model and the interpreter are local paths: a URL (credentials and all) is not one, and a relative path
    that climbs out of the repository with '..' names a different place on every machine."""
    for field, value in (("model.path", spec.model.path), ("python", spec.python)):
        if "://" in value or "\x00" in value:
            raise InputError(f"stack file {path}: {field} is not a local path (a URL or a NUL byte); give a "
                             "directory, and list where the files come from under model.downloads")
        p = Path(value).expanduser()
        if not p.is_absolute() and ".." in p.parts and not _inside(root / p, root):
            raise InputError(f"stack file {path}: {field} {value!r} climbs out of the repository; give a path "
                             "inside it, or an absolute one")


def _inside(p: Path, root: Path) -> bool:
    r, q = root.resolve(), p.resolve()
    return q == r or r in q.parents


def _read_yaml(path: Path, text: str) -> dict[str, Any]:
    data = parse_yaml(text, path, "stack file")
    if not isinstance(data, dict):
        raise InputError(f"stack file {path} is not a mapping of fields")
    return data


# --- ports -------------------------------------------------------------------------------------------------------

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
    _watchdog: subprocess.Popen | None = None

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

    def stop(self, reason: str | None = None) -> dict[str, Any]:
        """SIGTERM to the server's process group, SIGKILL after the stack's timeout; then finish the boot run.

        ``reason`` (e.g. ``SIGTERM received``) goes into boot.json's ``stopped`` and the manifest's ``stop_reason``.
        A ready boot stays ``ok``: the boot worked, and the server was stopped on request.
        """
        info: dict[str, Any] = {"signal": None, "returncode": None}
        if self.process is not None:
            info = terminate_group(self.process, self.stack.spec.server.stop_timeout_s)
        if self._watchdog is not None and self._watchdog.poll() is None:
            self._watchdog.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=5)
        if self._log is not None and not self._log.closed:
            self._log.close()
        if self.run.manifest.get("outcome") == "running":
            ok = self.boot.get("outcome") == "ready"
            self.boot["stop"] = info
            if reason:
                self.boot["stopped"] = {"reason": reason, "by": "offload-lab", "signal": info.get("signal"),
                                        "at": runs.utc_now()}
            self.run.write_json(BOOT_NAME, self.boot)
            self.run.finish("ok" if ok else "failed", error=None if ok else self.boot.get("outcome"),
                            **({"stop_reason": reason} if reason else {}))
        return info


def server_command(stack: Stack, host: str, port: int) -> list[str]:
    spec = stack.spec
    cmd = [str(stack.python), "-m", spec.server.module, "--model", str(stack.model_path), "--host", host,
           "--port", str(port)]
    if spec.model.served_name:
        cmd += ["--served-model-name", spec.model.served_name]
    return cmd + spec.server.flags.to_args() + list(spec.server.args)


def server_env(stack: Stack) -> dict[str, str | None]:
    """The variables the stack sets in the server's environment, the plan file's among them; None: unset.
    Variables of ``server.env_from`` are not here: the server inherits them, and only their names are recorded."""
    env: dict[str, str | None] = dict(stack.spec.server.env)
    plans = stack.spec.plans
    if plans is not None:
        plan = stack.plan_path
        if plan is not None:
            env[plans.env] = str(plan)
        else:
            # Booting without a plan must not inherit one from the shell that started us.
            env[plans.env] = None
    return env


def ensure_model(stack: Stack) -> None:
    if stack.model_path.is_dir() and any(stack.model_path.glob("*.safetensors")):
        return
    if stack.spec.model.build == "tiny":
        from offload_lab.server import tinymodel

        config = stack.resolve(stack.spec.model.config) if stack.spec.model.config else None
        tinymodel.build_tiny_model(stack.model_path, config)
        return
    how = (f"`offload-lab stack install {stack.file}` downloads it" if stack.spec.model.downloads
           else "download or build it first")
    raise InputError(
        f"stack file {stack.file}: model directory {stack.model_path} is missing or holds no .safetensors; {how}"
    )


def ensure_plan(stack: Stack) -> dict[str, Any] | None:
    """The plan the server boots with must exist before the server starts; returns its record for boot.json."""
    plan, plans = stack.plan_path, stack.spec.plans
    if plan is None or plans is None or plans.use is None:
        return None
    if not plan.is_file():
        raise InputError(f"stack file {stack.file}: plan {plans.use!r} ({plan}) does not exist; "
                         f"`offload-lab stack install {stack.file}` makes it")
    spec, source = plans.files[plans.use], stack.source_plan_path
    # The stack file's sha256 is the offload-lab plan's; the served file is written from it by `stack install`.
    if spec.sha256 and source is not None:
        got = runs.sha256_file(source) if source.is_file() else "missing"
        if got != spec.sha256:
            raise InputError(f"plan {source}: sha256 {got} differs from the stack file's {spec.sha256}")
    record = {"name": plans.use, "path": str(plan), "sha256": runs.sha256_file(plan), "format": plans.format}
    if source is not None and source != plan:
        record["source"] = {"path": str(source), "sha256": runs.sha256_file(source) if source.is_file() else None}
    return record


def boot(
    stack: Stack,
    data_root: Path,
    campaign: str,
    port: int | None = None,
    host: str = "127.0.0.1",
    ready_timeout_s: float | None = None,
    parameters: dict[str, Any] | None = None,
    environment_record: dict[str, Any] | None = None,
    boot_fields: dict[str, Any] | None = None,
    **manifest_fields: Any,
) -> Server:
    """Start the stack's server, wait until ready, probe it, classify the boot; never raises for the outcome.

    The returned :class:`Server` is running when ``boot['outcome'] == 'ready'``; otherwise it is already stopped and
    its run finished as failed. Raises InputError only for what prevents a start (no interpreter, port taken,
    model or plan missing). ``parameters`` and ``manifest_fields`` go into the boot run's manifest,
    ``boot_fields`` into ``boot.json`` (an ``expected`` outcome there also gets ``as_expected``).
    """
    if not stack.python.exists():
        raise InputError(
            f"stack file {stack.file}: the server's Python {stack.python} does not exist; create the server "
            f"environment (`offload-lab stack install {stack.file}`, or `make server-env` for the embedded stack)"
        )
    if port is not None and not 1 <= port <= 65535:
        raise InputError(f"--port {port} is not a port: give 1 to 65535, or leave it out for a free one")
    missing = [n for n in stack.spec.server.env_from if n not in os.environ]
    if missing:
        raise InputError(f"stack file {stack.file}: server.env_from passes {', '.join(missing)} from the "
                         "environment, but it is not set; export it first")
    if port is not None and not port_is_free(port, host):
        raise InputError(f"port {port} on {host} is already in use; pass another --port or leave it out")
    ensure_model(stack)
    plan = ensure_plan(stack)
    port = port or free_port(host)
    cmd = server_command(stack, host, port)
    extra_env = server_env(stack)
    run = runs.new_run(
        data_root, campaign, boots.BOOTS,
        parameters={"stack": stack.spec.name, "port": port,
                    **({"variant": stack.variant} if stack.variant else {}), **(parameters or {})},
        environment=environment_record if environment_record is not None else environment.capture_environment(),
        stack=stack.record(),
        server_command=redact_args(cmd),
        server_env_names=sorted(extra_env),
        server_env_from=list(stack.spec.server.env_from),
        host_load={"start": environment.host_load()},
        **manifest_fields,
    )
    server = Server(stack=stack, run=run, host=host, port=port, command=cmd)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name, value in extra_env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    server._log = open(server.log_path, "ab")
    started = time.monotonic()
    progress.phase(BOOT_STEP, boots.BOOT_STARTING)
    server.process = subprocess.Popen(
        cmd, stdout=server._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        cwd=str(stack.root), start_new_session=True,
        preexec_fn=child_setup(os.getpid(), _affinity(stack.spec.server.cpus)),
    )
    # From here on the server runs in its own session, out of reach of Ctrl-C: whatever goes wrong, stop it. If
    # this process dies without doing so, the parent-death signal and the watchdog do (server/watchdog.py).
    try:
        server._watchdog = start_watchdog(server.process.pid, run.path, stack.spec.server.stop_timeout_s)
        timeout = ready_timeout_s if ready_timeout_s is not None else stack.spec.server.ready_timeout_s
        ready, served, timed_out = boots.wait_ready(server.url, server.process, server.log_path, timeout, BOOT_STEP)
        startup_s = time.monotonic() - started
        probe, death = None, None
        spec_probe = stack.spec.server.probe
        if ready and spec_probe.enabled:
            progress.phase(BOOT_STEP, "sending the probe request")
            probe = boots.probe(server.url, served or server.model_name, spec_probe.prompt, spec_probe.max_tokens,
                                spec_probe.timeout_s)
            if not probe["ok"]:
                death = boots.watch_death(server.url, server.alive, spec_probe.grace_s)
        log_text = server.log_path.read_text(errors="replace")
        outcome = classify_boot(server.process.poll(), log_text, ready, timed_out,
                                probe_ok=None if probe is None else probe["ok"],
                                engine_dead=bool(death and death["dead"]))
        server.boot = {
            "outcome": outcome,
            "category": boots.CATEGORY[outcome],
            "startup_s": round(startup_s, 3),
            "url": server.url,
            "command": redact_args(cmd),
            "returncode": server.process.poll(),
            "pid": server.process.pid,
            "served_model": served,
            "probe": probe,
            "death": death,
            "plan": plan,
            "evidence": boots.evidence(log_text) if outcome != "ready" else None,
            "server_packages": environment.interpreter_packages(stack.python),
            "model": _model_record(stack.model_path, stack.spec.model.hash_limit_bytes),
            "install": _install_record(stack.python),
            "log_tail": tail(log_text) if outcome != "ready" else None,
        }
        if boot_fields:
            server.boot.update(boot_fields)
            if boot_fields.get("expected") is not None:
                server.boot["as_expected"] = outcome == boot_fields["expected"]
        run.write_json(BOOT_NAME, server.boot)
        progress.end(BOOT_STEP, f"{outcome} after {startup_s:.0f} s")
        if outcome != "ready":
            server.stop()
    except BaseException as e:
        if not server.boot:
            server.boot = {"outcome": "interrupted" if isinstance(e, KeyboardInterrupt) else "error",
                           "error": f"{type(e).__name__}: {e}", "command": redact_args(cmd)}
        server.stop()
        raise
    return server


def start_server(stack: Stack, data_root: Path, campaign: str, **boot_kwargs: Any) -> Server:
    """Start the stack's server and wait until it answers ``/health``, ``/v1/models`` and the probe request
    (``boot_kwargs``: those of :func:`boot`, e.g. ``port``, ``ready_timeout_s``).

    Always records the boot; raises :class:`ServerError` (after recording it) when the outcome is not ``ready``.
    """
    server = boot(stack, data_root, campaign, **boot_kwargs)
    outcome = server.boot["outcome"]
    if outcome != "ready":
        log_text = server.log_path.read_text(errors="replace")
        raise ServerError(
            f"the server from {stack.file} did not become ready: {outcome} after {server.boot['startup_s']:.0f} s. "
            f"Log kept at {server.log_path}; its last lines:\n{tail(log_text, 15)}"
        )
    return server


def _install_record(python: Path) -> dict[str, Any] | None:
    # What `offload-lab stack install` observed (commits, patch and receipt hashes), when it made this environment.
    from offload_lab.server.record import read_record

    record = read_record(python)
    if record is None:
        return None
    return {k: record.get(k) for k in ("started_at", "ended_at", "allow_unpinned", "unpinned", "commits",
                                       "patches", "plans")}


def _affinity(cpus: list[int] | None) -> set[int] | None:
    if not cpus:
        return None
    available = os.sched_getaffinity(0)
    chosen = set(cpus) & available
    if not chosen:
        raise InputError(f"stack server.cpus {cpus} names no CPU this process may use (it may use {sorted(available)})")
    return chosen


def _model_record(model_path: Path, hash_limit_bytes: int = 256 * 2**20) -> dict[str, Any]:
    config = model_path / "config.json"
    files: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for p in sorted(model_path.glob("*")):
        if not p.is_file():
            continue
        size = p.stat().st_size
        sizes[p.name] = size
        # Shards above the limit are pinned by the download's revision; hashing them at every boot costs minutes.
        files[p.name] = runs.sha256_file(p) if size <= hash_limit_bytes else None
    return {
        "path": str(model_path),
        "config": read_json(config, "model config", expect=dict) if config.is_file() else None,
        "files_sha256": files,
        "files_bytes": sizes,
    }


@contextlib.contextmanager
def serving(stack: Stack, data_root: Path, campaign: str, port: int | None = None,
            **boot_kwargs: Any) -> Iterator[Server]:
    """Start a server for the duration of a ``with`` block; it is stopped however the block ends."""
    server = start_server(stack, data_root, campaign, port=port, **boot_kwargs)
    try:
        yield server
    finally:
        server.stop()
