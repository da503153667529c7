"""What the command line asks of the server layer: the parameters of ``model tiny``, ``serve``, ``stack install``
and ``boots list`` (their flags come from these models through ``cli/model_options.py``), and the work behind them,
tested without the command line. ``stack check`` reads plan formats (fit), so it is in ``campaigns.commands``."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import Field

from offload_lab.core import runs
from offload_lab.core.bounds import MAX_SECONDS
from offload_lab.core.commands import CAMPAIGN_HELP, Params, data_dir_field
from offload_lab.core.errors import InputError
from offload_lab.core.outcome import Outcome
from offload_lab.server.boots import BOOT_JSON as BOOT_RECORD


class TinyModelParams(Params):
    out: str = Field(description="directory to write the model into (created if missing)")
    config: str | None = Field(None, description="model config YAML (default: configs/models/tiny-qwen3-moe.yaml)")
    seed: int | None = Field(None, ge=0, description="weight seed (default: the config's seed)")
    force: bool = Field(False, description="replace a different model already in --out")


class ServeParams(Params):
    stack: str = Field(description="stack file, e.g. configs/stacks/embedded.yaml")
    port: int | None = Field(None, ge=1, le=65535, description="port to bind (default: a free one); an error if taken")
    campaign: str = Field("scratch", description="campaign the boot run is filed under")
    data_dir: str = data_dir_field()
    ready_timeout: float | None = Field(None, gt=0, le=MAX_SECONDS,
                                        description="seconds to wait for readiness (default: the stack's "
                                                    "ready_timeout_s)")


class StackInstallParams(Params):
    file: str = Field(description="stack file, e.g. configs/stacks/study-pod.yaml")
    dry_run: bool = Field(False, description="print the install as a shell script, install nothing, and check every "
                                             "file it would use (pins, patches, plans); exit 2 on an error")
    allow_unpinned: bool = Field(False, description="install although parts are unpinned; the install record lists "
                                                    "what to pin")
    skip_preflight: bool = Field(False, description="skip the stack's preflight commands (nvidia-smi)")
    skip_model: bool = Field(False, description="skip downloading the model (already in place)")
    checkpoint: str | None = Field(None, description="with --dry-run: checkpoint (directory or synthetic spec YAML) "
                                                     "to try the plan commands on")
    no_checks: bool = Field(False, description="with --dry-run: only print the script")


class BootsListParams(Params):
    campaign: str = Field(description=CAMPAIGN_HELP)
    data_dir: str = data_dir_field()


def build_tiny(p: TinyModelParams) -> dict[str, Any]:
    """Build the embedded tiny MoE into ``p.out``; refuse to replace another model there unless ``p.force``."""
    from offload_lab.core.inputs import check_dir
    from offload_lab.server import tinymodel

    t0 = time.monotonic()
    out = check_dir(p.out, "--out", write=True)
    if out.is_dir() and any(out.iterdir()) and not p.force:
        # The build is deterministic: rebuilding the same model is harmless, replacing another one is not.
        spec = tinymodel.load_model_spec(p.config or tinymodel.default_model_config())
        changed = [n for n, data in tinymodel.render_files(spec, p.seed).items()
                   if (out / n).exists() and (out / n).read_bytes() != data]
        if changed:
            raise InputError(f"--out {out} holds another model ({', '.join(sorted(changed)[:3])} would change); "
                             "pass --force to replace it, or choose another directory")
    files = tinymodel.build_tiny_model(Path(p.out), Path(p.config) if p.config else None, seed=p.seed)
    return {"out": p.out, "seconds": round(time.monotonic() - t0, 3), "files": files}


def dry_run_checks(st: Any, checkpoint: str | None, log: Callable[[str], None]) -> list[Any]:
    """The checks of every file a stack's install would use, with plans made in a scratch directory."""
    from offload_lab.server import install_checks

    with tempfile.TemporaryDirectory(prefix="offload-lab-dry-run-") as work:
        return install_checks.dry_run_checks(st, work, checkpoint=checkpoint, log=log)


def list_boots(p: BootsListParams) -> list[dict[str, Any]]:
    """One row per boot of a campaign: stack, variant, outcome (abandoned or corrupt said so), expected outcome,
    startup time, the evidence of a failure, why it stopped."""
    from offload_lab.core.inputs import read_json

    base = runs.campaign_dir(Path(p.data_dir), p.campaign)
    rows = []
    for row in (runs.scan_runs(Path(p.data_dir), p.campaign, "boots") if (base / "boots").is_dir() else []):
        m, problem = row.manifest or {}, row.problem
        boot: dict[str, Any] = {}
        if (row.path / BOOT_RECORD).is_file():
            try:
                boot = read_json(row.path / BOOT_RECORD, "boot record", expect=dict)
            except InputError as e:
                problem = str(e)
        params = m.get("parameters") if isinstance(m.get("parameters"), dict) else {}
        outcome = runs.CORRUPT if problem else boot.get("outcome", row.status)
        if row.status == runs.ABANDONED:  # its serve process is gone and nobody stopped it
            outcome = f"{boot.get('outcome', 'booting')}, abandoned"
        rows.append({"run": row.path.name, "started_at": m.get("started_at"), "stack": params.get("stack"),
                     "variant": params.get("boot") or params.get("variant"), "outcome": outcome,
                     "expected": boot.get("expected"), "startup_s": boot.get("startup_s"),
                     "evidence": problem or boot.get("evidence"), "stopped": boot.get("stopped")})
    return rows


def serve(p: ServeParams, display: Callable[[], Any], say: Callable[[str], None]) -> int:
    """Start the stack's server (its boot's phases shown on ``display()``, a context manager) and keep it until a
    signal; 3 when it exited on its own. SIGINT, SIGTERM and SIGHUP end serving alike (a signal while booting stops
    the boot, recorded as interrupted): the server's process group is stopped and the boot records the reason."""
    import signal
    import sys

    from offload_lab.core import progress as core_progress
    from offload_lab.core.signals import SIGNALS, Stopped, reason_of, stopping_on_signals
    from offload_lab.server import stack

    runs.check_name("--campaign", p.campaign)
    st = stack.load_stack(p.stack)
    reason = None
    with stopping_on_signals():
        with display() as shown, core_progress.to(shown):
            server = stack.start_server(st, Path(p.data_dir), p.campaign, port=p.port, ready_timeout_s=p.ready_timeout)
        try:
            say(f"server ready at {server.url} (model {server.model_name}); log: {server.log_path}")
            say("press Ctrl-C to stop it")
            while server.alive():
                time.sleep(0.5)
        except Stopped as e:
            reason = reason_of(e)
        except BaseException:
            server.stop(reason="offload-lab serve failed")
            raise
    # Stopping takes at most the stack's stop timeout; a second signal meanwhile must not leave it half done.
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}
    try:
        info = server.stop(reason=reason or "the server exited on its own")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if reason is None:
        print(f"the server exited on its own (return code {info.get('returncode')}); log: {server.log_path}",
              file=sys.stderr)
        return 3
    say(f"server stopped ({reason}; {info.get('signal')}); boot recorded in {server.run.path}")
    return 0


def boots(p: BootsListParams) -> Outcome:
    """:func:`list_boots` as ``boots list`` shows it; exit 2 when a boot's record is damaged."""
    rows = list_boots(p)
    lines: list[str] = []
    write = lines.append
    if not rows:
        write(f"no boots under {Path(p.data_dir) / p.campaign}")
    for r in rows:
        expected = "" if r["expected"] is None else f" (expected {r['expected']})"
        write(f"{r['run']}  {r['stack'] or '-'}{'/' + r['variant'] if r['variant'] else ''}: {r['outcome']}"
              f"{expected}" + (f" after {r['startup_s']:.0f} s" if r["startup_s"] is not None else ""))
        if r["evidence"] and r["outcome"] != "ready":
            write(f"    {r['evidence'][:160]}")
        if r["stopped"]:
            write(f"    stopped: {r['stopped'].get('reason')}")
    return Outcome(rows, lines, 2 if any(r["outcome"] == runs.CORRUPT for r in rows) else 0)


def tiny(p: TinyModelParams) -> Outcome:
    """:func:`build_tiny` as ``model tiny`` shows it."""
    r = build_tiny(p)
    lines: list[str] = []
    write = lines.append
    write(f"built the tiny MoE in {r['out']} ({len(r['files'])} files, {r['seconds']:.1f} s)")
    for name, digest in r["files"].items():
        write(f"  {digest}  {name}")
    return Outcome(r, lines)
