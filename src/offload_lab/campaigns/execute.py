"""Executing a notebook: papermill with the project's kernel, started so that it never listens on plain TCP.

ipykernel 7.4 warns "Kernel is running over TCP without encryption" whenever the connection file it is handed says
``transport: tcp`` and carries no CurveZMQ key (``ipykernel/kernelapp.py``, ``IPKernelApp.init_sockets``; ipykernel
PR 1515). The kernel does not choose its transport: the kernel *manager* writes the connection file. So the warning is
avoided where the manager is configured, not filtered from the output:

- in the kernelspecs themselves: ``make envs`` (``--write-jupyter-config``) names :class:`IpcProvisioner` in the
  environment's kernel.json files (``metadata.kernel_provisioner``, an entry point of this package), so every client
  that starts the project's kernel (or ipykernel's ``python3`` of this environment) gets ipc transport: plain
  ``papermill``, which reads no Jupyter config file, ``jupyter execute``, nbconvert, JupyterLab and the runner;
- here, papermill also gets :func:`kernel_manager_config` as ``config`` (papermill hands extra keywords to nbclient,
  whose ``create_kernel_manager`` passes ``config`` on), and the same settings go into the environment's
  ``etc/jupyter/`` config files, for a kernelspec that names no provisioner.

Where the sockets go matters. jupyter_client names them after the connection file, but a manager that has none yet
(nbclient's, nbconvert's, papermill's) falls back to the *relative* prefix ``kernel-ipc``: the kernel binds it in its
own working directory (``notebooks/`` under nbconvert) while the client looks in its own, so the kernel never answers,
and every kernel started in one directory shares the prefix. :class:`IpcKernelManager` and :class:`IpcProvisioner` give
each kernel a unique absolute prefix in Jupyter's runtime directory. JupyterLab's server names a connection file for
every kernel itself, and the sockets go beside it. JupyterLab's default kernel is set to the project's as well.

Windows has no ipc transport for ZeroMQ; there the provisioner asks for manager-provisioned CurveZMQ keys instead
(``transport_encryption: auto``, jupyter_client >= 8.9, for kernelspecs that declare ``supported_encryption``).

A stop (Ctrl-C, SIGTERM, SIGHUP in the client) ends with offload-lab's own line: the provisioner lets the interrupted
cell's reply go out before the kernel shuts down (else ipykernel prints a ZMQError traceback), and the executor drops
the abandoned cell's error that asyncio would print (:func:`_forget_abandoned_cell`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
import tempfile
import uuid
from typing import Any, Callable, Mapping, Protocol

import zmq
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import default

from offload_lab.core.errors import InputError, ProducerError
from offload_lab.core.notebooks import redact_notebook

KERNEL_NAME = "offload-lab"
OUTPUT_NOTEBOOK = "notebook.ipynb"  # the executed notebook a run keeps beside its data
KERNEL_DISPLAY_NAME = "Python (offload-lab)"
# The Jupyter applications whose kernels a user starts from this environment, by the config file each one reads.
SERVER_CONFIG = "jupyter_server_config.json"
JUPYTER_CONFIG_FILES = (SERVER_CONFIG, "jupyter_nbconvert_config.json", "jupyter_execute_config.json")


class CellWatcher(Protocol):
    """What a progress display gives the executor: nbclient's cell hooks and a sink for the kernel's stdout."""

    def hooks(self) -> Mapping[str, Callable[..., Any]]: ...

    def write(self, text: str) -> Any: ...

    def flush(self) -> None: ...


# A Unix socket's path holds at most 107 bytes (sun_path); a kernel's sockets are its prefix, "-" and a number.
SUN_PATH_MAX = 107
_PORT_SUFFIX = 6


def _fits(prefix: str) -> bool:
    return len(os.fsencode(prefix)) + _PORT_SUFFIX <= SUN_PATH_MAX


def _ipc_prefix(connection_file: str | None) -> str:
    """Where a kernel's Unix sockets go: beside its connection file, else a unique name in Jupyter's runtime folder;
    where that path is too long for a socket (a deep home or runtime folder: the kernel would fail with "File name too
    long"), a private folder of its own under the system's temporary folder."""
    if connection_file:
        prefix = os.path.splitext(connection_file)[0] + "-ipc"
    else:
        from jupyter_core.paths import jupyter_runtime_dir

        folder = jupyter_runtime_dir()
        os.makedirs(folder, exist_ok=True)
        prefix = os.path.join(folder, f"k-{uuid.uuid4().hex[:12]}-ipc")
    if _fits(prefix):
        return prefix
    return os.path.join(tempfile.mkdtemp(prefix="olk-"), f"k-{uuid.uuid4().hex[:12]}-ipc")


class IpcKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels listen on Unix sockets at a unique absolute path (see the module docstring)."""

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        if self.transport != "ipc":
            return super()._ip_default()
        return _ipc_prefix(self.connection_file)


IPC_MANAGER = "offload_lab.campaigns.execute.IpcKernelManager"  # by name: a config file holds it
PROVISIONER = "offload-lab-ipc"
SHUTDOWN_GRACE_S = 0.5  # its entry point's name (pyproject.toml), as the kernelspecs name it


class IpcProvisioner(LocalProvisioner):
    """The kernel provisioner the environment's kernelspecs name (``metadata.kernel_provisioner``): whichever
    manager starts the kernel (papermill's command line, which reads no Jupyter config file, nbconvert,
    ``jupyter execute``, JupyterLab, the runner), the kernel gets Unix sockets at a unique absolute path on POSIX, and
    manager-provisioned CurveZMQ keys elsewhere; either way it has no unencrypted TCP socket to warn about."""

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        km = self.parent
        if km is not None:
            if os.name == "posix":
                if km.transport != "ipc" or not os.path.isabs(str(km.ip)):
                    km.transport = "ipc"
                    km.ip = _ipc_prefix(km.connection_file)
                    km.cache_ports = False  # ports are a socket path's suffix under ipc, not TCP ports to reserve
            elif zmq.has("curve"):
                kwargs.setdefault("transport_encryption", "auto")
        return await super().pre_launch(**kwargs)

    async def send_signal(self, signum: int) -> None:
        await super().send_signal(signum)
        km = self.parent
        if signum == signal.SIGINT and getattr(km, "shutting_down", False):
            # A shutdown (Ctrl-C, SIGTERM or SIGHUP in the client) interrupts the kernel and at once asks it to stop:
            # the cell it interrupted then replies on sockets already closed, and ipykernel prints that ZMQError's
            # traceback. A moment lets the reply go out first.
            await asyncio.sleep(SHUTDOWN_GRACE_S)


def kernel_manager_config() -> dict[str, Any]:
    """The settings under which a kernel has no unencrypted TCP socket to warn about."""
    if os.name == "posix":
        return {"KernelManager": {"transport": "ipc"}, "NotebookClient": {"kernel_manager_class": IPC_MANAGER}}
    return {"KernelManager": {"transport_encryption": "auto"}}


def kernel_name() -> str:
    """The project's named kernel when this environment has it (``make envs``), else ipykernel's own ``python3``,
    which runs in the current interpreter too (a conda environment where nobody ran ``ipykernel install``)."""
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL_NAME if KERNEL_NAME in KernelSpecManager().find_kernel_specs() else "python3"


def executed_cells(notebook: Path, parameters: Mapping[str, Any] | None = None) -> int:
    """How many cells papermill will execute: the non-empty code cells, plus the one it injects for parameters."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    cells = sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())
    return cells + (1 if parameters else 0)


def execute_notebook(notebook: Path, output: Path, parameters: dict[str, Any], cwd: Path,
                     watcher: CellWatcher | None = None) -> None:
    """Run a notebook with papermill; raise ProducerError on a failed cell, naming the cell and the error.

    ``watcher`` (a :class:`offload_lab.campaigns.progress.Progress`' notebook view) is told when each cell starts and
    ends, and reads the kernel's stdout as it comes; the output notebook keeps everything either way.
    """
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError
    from traitlets.config import Config

    check_parameters_cells(notebook)
    extra: dict[str, Any] = {}
    if watcher is not None:
        extra = {**watcher.hooks(), "stdout_file": watcher}
    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=parameters, kernel_name=kernel_name(), cwd=str(cwd),
            progress_bar=False, log_output=False, request_save_on_cell_execute=True,
            config=Config(kernel_manager_config()), **extra,
        )
    except PapermillExecutionError as e:
        _redact_kept(output)
        from offload_lab.core.redact import redact_text

        # A kernel that ran out of disk says only "[Errno 28] No space left on device", often without a file name.
        full = "[Errno 28]" in str(e.evalue) or "[Errno 122]" in str(e.evalue)
        raise ProducerError(
            f"notebook {notebook.name} failed in cell {e.cell_index} ({e.ename}: {redact_text(str(e.evalue))}); "
            + (f"the disk holding {output.parent} is full: free some space or give another --data-dir, then run "
               "again (what was written is kept); " if full else "")
            + f"the output notebook is kept at {output}"
        ) from e
    except BaseException:
        _forget_abandoned_cell()
        _redact_kept(output)
        raise
    redact_notebook(output)
    nb = nbformat.read(str(output), as_version=4)
    # Some failures are recorded only in the metadata (papermill #786): check it as well as the cells.
    exc = nb.metadata.get("papermill", {}).get("exception")
    errors = [c for c in nb.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    if exc or errors:
        raise ProducerError(f"notebook {notebook.name} recorded an error; the output notebook is at {output}")


PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"  # papermill's tag for the cell it writes


def parameters_cells_problem(nb: Any) -> str | None:
    """Why a notebook's parameters cells would let a copy override the values it is given, or None: papermill injects
    after the FIRST cell tagged ``parameters`` (or replaces an ``injected-parameters`` cell left by an earlier run), so
    a second tagged cell (a copied cell keeps its tags) runs after the injected values and silently puts the file's
    own back (``run_dir: None``: a stray run in the scratch campaign)."""
    tagged = [i for i, c in enumerate(nb.cells) if PARAMETERS_TAG in (c.get("metadata", {}).get("tags") or [])]
    injected = [i for i, c in enumerate(nb.cells) if INJECTED_TAG in (c.get("metadata", {}).get("tags") or [])]
    if len(tagged) > 1:
        cells = ", ".join(f"#{i + 1}" for i in tagged)
        return (f"has {len(tagged)} cells tagged {PARAMETERS_TAG!r} (cells {cells}, counting from 1): papermill "
                "injects the values it is given after the first, and the others would put the notebook's own back; "
                f"keep one and remove the {PARAMETERS_TAG!r} tag (or the cell) from the others")
    if len(injected) > 1 or (injected and tagged and tagged[0] > injected[0]):
        cells = ", ".join(f"#{i + 1}" for i in sorted(injected + tagged))
        return (f"has an {INJECTED_TAG!r} cell from an earlier run followed by more parameters (cells {cells}, "
                "counting from 1): the values given now would be overridden; delete the injected cell(s), or start "
                "from the notebook in notebooks/ rather than an output notebook")
    return None


def check_parameters_cells(notebook: Path) -> None:
    """InputError naming the notebook and the cells when :func:`parameters_cells_problem` finds one; a file that is not
    a notebook is left to papermill's own error."""
    import nbformat

    try:
        nb = nbformat.read(str(notebook), as_version=4)
    except Exception:  # not JSON, not a notebook: named where it is read (campaigns.runner.declared_parameters)
        return
    problem = parameters_cells_problem(nb)
    if problem:
        raise InputError(f"notebook {notebook} {problem}")


def _redact_kept(output: Path) -> None:
    """After a failed or stopped execution, whatever papermill saved so far; an error here must not hide the first."""
    try:
        if output.is_file():
            redact_notebook(output)
    except Exception as e:  # the notebook is kept unredacted: say so, since it may hold a secret
        print(f"warning: the output notebook {output} could not be redacted ({type(e).__name__}); check it for "
              "secrets before sharing it", file=sys.stderr)


def _forget_abandoned_cell() -> None:
    """After a stop (a signal, Ctrl-C) nbclient's task for the cell it was running is abandoned; when the interrupted
    kernel answers, the task ends in CellExecutionError (or DeadKernelError) that nobody reads, and asyncio prints it
    with its traceback when the task is collected ("Task exception was never retrieved"). The stop is reported by
    offload-lab's own line: drop those two errors of abandoned tasks, pass on anything else."""
    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    loop = ensure_event_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), (CellExecutionError, DeadKernelError)):
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def describe_kernels(prefix: Path | str | None = None) -> list[Path]:
    """Name :class:`IpcProvisioner` in every Python kernelspec of the environment at ``prefix`` (default: this
    interpreter's: ``offload-lab`` and ipykernel's ``python3``), keeping the rest of each. Returns the files written."""
    written = []
    for path in sorted((Path(prefix or sys.prefix) / "share" / "jupyter" / "kernels").glob("*/kernel.json")):
        spec = json.loads(path.read_text(encoding="utf-8"))
        if spec.get("language") != "python":
            continue
        spec.setdefault("metadata", {})["kernel_provisioner"] = {"provisioner_name": PROVISIONER, "config": {}}
        path.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written


def write_jupyter_config(prefix: Path | str | None = None) -> list[Path]:
    """Merge :func:`kernel_manager_config` into the Jupyter config files of the environment at ``prefix``
    (default: this interpreter's), keeping whatever else they hold, and name the provisioner in its kernelspecs
    (:func:`describe_kernels`). Returns the files written."""
    written = describe_kernels(prefix)
    folder = Path(prefix or sys.prefix) / "etc" / "jupyter"
    folder.mkdir(parents=True, exist_ok=True)
    for name in JUPYTER_CONFIG_FILES:
        path = folder / name
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        settings = kernel_manager_config()
        if name == SERVER_CONFIG:
            # JupyterLab's new notebooks and consoles start the project's kernel, not ipykernel's python3.
            settings = {**settings, "MappingKernelManager": {"default_kernel_name": KERNEL_NAME}}
        for section, values in settings.items():
            doc.setdefault(section, {}).update(values)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written


PARAMETER_FLAGS = ("-p", "--parameter")


def _joined_parameters(argv: list[str]) -> list[str]:
    """``-p NAME VALUE`` (papermill's form) as ``-p NAME=VALUE`` (this module's): both are taken, so the one name a
    user learnt from either tool works. A token after ``-p`` that is ``NAME=...`` with NAME a Python name is the
    one-token form; anything else is a name whose value is the next token."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in PARAMETER_FLAGS and i + 1 < len(argv):
            first = argv[i + 1]
            name, sep, _ = first.partition("=")
            if (sep and name.isidentifier()) or i + 2 >= len(argv):
                out += [a, first]
                i += 2
            else:
                out += [a, f"{first}={argv[i + 2]}"]
                i += 3
            continue
        out.append(a)
        i += 1
    return out


def _parameter(text: str) -> tuple[str, Any]:
    """One ``NAME=VALUE``, the value read as YAML (bounded: an alias bomb is refused); InputError naming it."""
    from offload_lab.core.inputs import parse_yaml_value

    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise InputError(f"parameter {text[:80]!r} is not NAME=VALUE or NAME VALUE with NAME a Python name "
                         "(the value is read as YAML)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"parameter {name}: its value is not UTF-8 text; type it in a UTF-8 terminal") from None
    return name, parse_yaml_value(value, f"parameter {name}")


def _check_places(notebook: Path, output: Path, cwd: Path) -> None:
    """What papermill would otherwise refuse with a traceback (or do harm with), each an InputError naming it."""
    from offload_lab.core import inputs
    from offload_lab.core.places import kind_of

    text = inputs.read_text(notebook, "notebook", inputs.DATA_MAX_BYTES)  # missing, a folder, too big, not UTF-8
    import nbformat

    import warnings

    try:
        with warnings.catch_warnings():  # nbformat's notes on cell ids are not the user's problem
            warnings.simplefilter("ignore")
            nbformat.validate(nbformat.reads(text, as_version=4))
    except Exception as e:  # nbformat's own errors: not JSON, not a notebook, a version it does not know
        raise InputError(f"notebook {notebook} is not a Jupyter notebook ({type(e).__name__}: "
                         f"{' '.join(str(e).split())[:160]}); give a .ipynb file") from None
    kind = kind_of(cwd)
    if kind is None or not kind.endswith("a directory"):
        raise InputError(f"--cwd {cwd}: {'no such directory' if kind is None else f'is {kind}, not a directory'}; "
                         "give the folder the kernel should start in")
    folder = output.parent if str(output.parent) else Path(".")
    fkind = kind_of(folder)
    if fkind is None or not fkind.endswith("a directory"):
        raise InputError(f"output {output}: its folder {folder} does not exist; create it or choose another path")
    if kind_of(output) is not None and not output.is_file():
        raise InputError(f"output {output} is {kind_of(output)}, not a notebook file; give a path ending in .ipynb")
    if not os.access(folder, os.W_OK):
        raise InputError(f"output {output}: its folder {folder} cannot be written (read-only or not yours); "
                         "choose another path")
    if output.exists() and output.resolve() == notebook.resolve():
        raise InputError(f"output {output} is the notebook itself, which papermill would overwrite; give another "
                         "path")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m offload_lab.campaigns.execute",
                                description="Run one notebook as papermill does, with the project's kernel over ipc. "
                                            "Parameters: -p NAME VALUE (papermill's form) or -p NAME=VALUE, the value "
                                            "read as YAML. Bad input exits 2 naming it; a failed notebook 4.")
    p.add_argument("notebook", nargs="?", type=Path)
    p.add_argument("output", nargs="?", type=Path)
    p.add_argument("-p", "--parameter", action="append", default=[], metavar="NAME VALUE",
                   help="a notebook parameter, as `-p NAME VALUE` or `-p NAME=VALUE` (repeat it)")
    p.add_argument("--cwd", type=Path, default=Path.cwd(), help="the kernel's working directory")
    p.add_argument("--write-jupyter-config", action="store_true",
                   help="write the ipc setting into this environment's etc/jupyter/ config files and exit")
    args = p.parse_args(_joined_parameters(list(sys.argv[1:] if argv is None else argv)))
    if args.write_jupyter_config:
        for path in write_jupyter_config():
            print(f"wrote {path}")
        return 0
    if args.notebook is None or args.output is None:
        p.error("give a notebook and an output path (or --write-jupyter-config)")
    from offload_lab.core.inputs import check_server_url
    from offload_lab.core.redact import redact_text, url_outside_parameters

    code = 0
    try:
        params = dict(_parameter(t) for t in args.parameter)
        _check_places(args.notebook, args.output, args.cwd)
        check_parameters_cells(args.notebook)
        url_name = next((n for n in ("url", "base_url") if params.get(n)), None)
        if url_name:
            check_server_url(params[url_name], url_name)  # as `bench --url` checks it, before any kernel starts
        # The URL's credentials go to the kernel through its environment, never into the output notebook.
        with url_outside_parameters(params.get(url_name) if url_name else None) as shown:
            if url_name and shown:
                params[url_name] = shown
            execute_notebook(args.notebook, args.output, params, args.cwd)
    except InputError as e:
        print(f"error: {' '.join(redact_text(str(e)).split())}", file=sys.stderr)
        return 2
    except ProducerError as e:
        print(f"error: {redact_text(str(e))}", file=sys.stderr)
        code = 4
    except OSError as e:  # a full or read-only disk while papermill writes: named, not a traceback
        print(f"error: {redact_text(f'cannot write {e.filename or args.output}: {e.strerror or e}')}; free space, "
              "or choose another output path", file=sys.stderr)
        return 2
    finally:
        # However it ended: where the run went, with its output notebook kept beside its data.
        kept = _keep(args.output)
        if kept is not None:
            print(f"output notebook kept in the run directory: {kept}")
    return code


def _keep(output: Path) -> Path | None:
    try:
        return keep_in_run(output) if output.is_file() else None
    except (OSError, ValueError, InputError) as e:  # an output notebook that is not one, a run gone read-only
        print(f"warning: the output notebook {output} was not copied into its run ({type(e).__name__}: "
              f"{str(e)[:200]})", file=sys.stderr)
        return None


def run_directory_of(output: Path) -> Path | None:
    """The run a hand-run notebook made, from the line :func:`offload_lab.experiments.notebook.say_run_directory`
    printed into the output notebook (None for a notebook that makes no run, such as explore.ipynb)."""
    import nbformat

    from offload_lab.core.runs import MANIFEST
    from offload_lab.experiments.notebook import RUN_DIRECTORY

    nb = nbformat.read(str(output), as_version=4)
    for cell in reversed(nb.cells):
        for out in reversed(cell.get("outputs", [])):
            for line in reversed(str(out.get("text", "")).splitlines()):
                if line.startswith(RUN_DIRECTORY):
                    path = Path(line[len(RUN_DIRECTORY):].strip().rsplit(" (", 1)[0])
                    return path if (path / MANIFEST).is_file() else None
    return None


def keep_in_run(output: Path) -> Path | None:
    """Copy the output notebook into the run it made (``notebook.ipynb``, as the campaign runner keeps it) and add it
    to the finished run's manifest, so that the paper links a hand run to its notebook as it does a campaign's."""
    from offload_lab.core import runs

    run_dir = run_directory_of(output)
    if run_dir is None:
        return None
    manifest = runs.load_manifest(run_dir)
    if manifest.get("outcome") == "running" or not manifest.get("hand_run"):
        return None  # a campaign's run: its runner keeps the notebook itself
    target = run_dir / OUTPUT_NOTEBOOK
    if output.resolve() != target.resolve():
        runs.atomic_write_bytes(target, output.read_bytes())
    manifest.setdefault("files", {})[OUTPUT_NOTEBOOK] = {"sha256": runs.sha256_file(target),
                                                         "bytes": target.stat().st_size}
    nb = manifest.get("notebook")
    manifest["notebook"] = {**(nb if isinstance(nb, dict) else {"path": nb}), "output": OUTPUT_NOTEBOOK}
    runs.write_manifest(run_dir, manifest)
    return target


if __name__ == "__main__":
    raise SystemExit(main())
