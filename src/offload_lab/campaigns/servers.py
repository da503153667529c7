"""The servers a campaign runs on: at most one up at a time, a new variant stopping the old one first; and the boot
attempts of the ``boots`` section, each started, probed, classified and stopped (a failed boot is data)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from offload_lab.core.errors import InputError
from offload_lab.load import client as load
from offload_lab.server import stack as stackmod

if TYPE_CHECKING:
    from offload_lab.campaigns.runner import Campaign, ExperimentSpec


class Servers:
    """At most one server up at a time; a new variant stops the old server first."""

    def __init__(self, campaign: Campaign, data_root: Path, url: str | None, port: int | None,
                 env: dict[str, Any], marks: dict[str, Any], log: Callable[[str], None]):
        self.campaign, self.data_root, self.url, self.port = campaign, data_root, url, port
        self.env, self.marks, self.log = env, marks, log
        self.key: tuple[str, str] | None = None
        self.server: stackmod.Server | None = None
        self.info: dict[str, Any] = {}
        self.boot_runs: list[Path] = []

    def get(self, exp: ExperimentSpec, boot_index: int, boots: int) -> dict[str, Any]:
        if self.url:
            if exp.stack or exp.override:
                raise InputError(f"experiment {exp.experiment} runs on its own server variant; run without --url, "
                                 "or leave it out with --only")
            if not self.info:
                load.check_reachable(self.url)
                self.info = {"url": self.url, "boot_run": None, "command": None, "stack": None}
            return self.info
        key = (exp.stack or self.campaign.spec.stack or "", exp.override.key() if exp.override else "")
        if key == self.key and self.server is not None:
            if self.server.alive():
                return self.info
            self.log(f"the server of {self.info.get('boot_run')} is gone; booting it again for {exp.experiment}")
        self.close()
        path = self.campaign.stack_path(exp.stack)
        if path is None:
            raise InputError(f"campaign file {self.campaign.file} names no stack; add `stack:` or pass --url")
        st = stackmod.load_stack(path, root=self.campaign.root).with_override(exp.override, exp.variant)
        self.log(f"starting the server of {path.name}" + (f" (variant {exp.variant})" if exp.variant else "")
                 + f" for {exp.experiment}")
        server = stackmod.start_server(
            st, self.data_root, self.campaign.spec.name, port=self.port,
            parameters={"session": self.marks.get("session"), "boot_index": boot_index, "boots": boots},
            environment_record=self.env, **self.marks,
        )
        self.server, self.key = server, key
        self.boot_runs.append(server.run.path)
        self.info = {"url": server.url, "boot_run": str(server.run.path), "command": server.command,
                     "stack": st.record(), "model": server.model_name, "variant": exp.variant}
        self.log(f"server ready at {server.url} (boot run {server.run.path})")
        return self.info

    def current(self) -> dict[str, Any]:
        return self.info

    def close(self) -> None:
        if self.server is not None:
            _stop(self.server, self.log)
        self.server, self.key, self.info = None, None, {}


def _stop(server: stackmod.Server, log: Callable[[str], None]) -> None:
    """Stop a server, saying so: the stop takes up to the stack's stop timeout, and the next boot waits for it."""
    started = time.monotonic()
    log(f"stopping the server of {server.run.path.name}")
    server.stop()
    log(f"server {server.run.path.name} stopped in {time.monotonic() - started:.0f} s")


def run_boot_attempts(campaign: Campaign, data_root: Path, port: int | None, env: dict[str, Any],
                      marks: dict[str, Any], log: Callable[[str], None]) -> list[dict[str, Any]]:
    """The ``boots`` section: every attempt is started, probed, classified and stopped; failures are data."""
    out = []
    for b in campaign.spec.boots:
        path = campaign.stack_path(b.stack)
        assert path is not None  # validate() checked
        st = stackmod.load_stack(path, root=campaign.root).with_override(b.override, b.name)
        log(f"boot attempt {b.name} ({path.name}" + (f", expecting {b.expect})" if b.expect else ")"))
        server = stackmod.boot(
            st, data_root, campaign.spec.name, port=port, ready_timeout_s=b.ready_timeout_s,
            parameters={"boot": b.name, "session": marks.get("session"), "expect": b.expect},
            environment_record=env, boot_fields={"expected": b.expect, "expected_source": b.expect_source},
            **marks,
        )
        outcome = server.boot["outcome"]
        if server.alive():
            _stop(server, log)
        else:
            server.stop()
        row = {"boot": b.name, "outcome": outcome, "expected": b.expect,
               "as_expected": None if b.expect is None else outcome == b.expect, "run": str(server.run.path)}
        out.append(row)
        log(f"  {b.name}: {outcome}" + ("" if b.expect is None else
                                         " (as expected)" if row["as_expected"] else f" (expected {b.expect})"))
    return out
