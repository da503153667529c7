"""``offload-lab stack install|check`` and ``boots list``: flags from the models in
:mod:`offload_lab.server.commands`, one call into the server layer, the result as text or ``--json``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from offload_lab.cli.common import action_group, calling
from offload_lab.cli.model_options import Command, Option, add_commands


def cmd_stack_install(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.server import commands, install, stack

    st = stack.load_stack(p.file)
    plan = install.plan_install(st, skip_preflight=p.skip_preflight, skip_model=p.skip_model)
    if p.dry_run:
        sys.stdout.write(plan.render(allow_unpinned=p.allow_unpinned))
        if p.no_checks:
            return 0
        print("# checks of every file the install would use (no network; plans made in a scratch directory"
              + (f" from {p.checkpoint})" if p.checkpoint else ")"))
        problems = commands.dry_run_checks(st, p.checkpoint, log=lambda s: print(f"#   {s}"))
        for x in problems:
            print(f"# {x}")
        counts = {lvl: len([x for x in problems if x.level == lvl]) for lvl in ("error", "unpinned", "warning")}
        print(f"# {counts['error']} error(s), {counts['unpinned']} unpinned, {counts['warning']} warning(s)"
              + ("" if counts["error"] else ": a real install finds every file as the stack file says"))
        if counts["error"]:
            print(f"stack file {p.file}: the dry run found {counts['error']} error(s) a real install would stop at "
                  "(listed above); fix them in the stack file", file=sys.stderr)
        return 2 if counts["error"] else 0
    record = install.run_install(plan, allow_unpinned=p.allow_unpinned)
    print(f"stack {st.spec.name} installed into {plan.venv}")
    for name, commit in record["commits"].items():
        print(f"  {name}: {commit}")
    for key, patch in record["patches"].items():
        print(f"  patch {key}: sha256 {patch.get('sha256')}")
        for f, h in (patch.get("receipts") or {}).items():
            print(f"    receipt {f}: {h}")
    if record["unpinned"]:
        print("installed with unpinned items (--allow-unpinned); pin them in the stack file from the values above")
    return 0


def add_parsers(sub: Any) -> None:
    """Register ``stack install|check`` and ``boots list``."""
    from offload_lab.campaigns.commands import StackCheckParams
    from offload_lab.server import commands

    file = {"file": Option(positional=True, metavar="file")}
    add_commands(action_group(sub, "stack", "install or check a stack file (the server's environment, model and plan)",
                              "Stack files (configs/stacks/*.yaml) pin every part of a server: packages, git "
                              "commits, patches with their sha256 and receipts, model revisions, plans, flags and "
                              "environment (docs/runbook.md)."), [
        Command("install", "build a stack's environment on a pod: parts, patches (receipts checked), model, plans",
                cmd_stack_install, commands.StackInstallParams, options=file, json=None,
                description="Create the stack's environment, install its parts at their pins, check and apply each "
                            "patch (receipts checked), download the model at its revisions (a token only from "
                            "$HF_TOKEN) and make the plans (docs/cli.md). Exit 2 for a refused or invalid "
                            "stack, 4 for a failed step."),
        Command("check", "validate a stack file; print its server command, plan, price, unpinned items",
                calling("offload_lab.campaigns.commands:stack_check"), StackCheckParams, options=file,
                json="print JSON (keys command, env, plan, plan_format, price, unpinned)",
                description="Load a stack file (following `extends`), validate it and print what it starts. Exit 2, "
                            "naming the file and what to do, when a plan is not in the format its offload part "
                            "reads or does not cover the model.")])
    add_commands(action_group(sub, "boots", "list a campaign's boots and how each ended",
                              "Every server start is a run of experiment 'boots' with its log and boot.json."), [
        Command("list", "one line per boot: stack, variant, outcome, expected outcome, startup time",
                calling("offload_lab.server.commands:boots"), commands.BootsListParams,
                description="List the boots of a campaign with the log line that decided each failure.")])


__all__ = ["add_parsers"]
