"""What a dry run of ``stack install`` checks: every file the install would use, without the network and without
installing anything.

:func:`dry_run_checks` is the entry point (``stack install --dry-run`` prints what it finds; ``campaign rehearse``
calls it). It checks the pins the way the install will rely on them (full commits, exact versions, each patch's
sha256 and receipts, model revisions), the files in this repository the install reads (patches, requirements,
committed plans), and runs the install's own plan commands (``offload-lab plan make``, ``plan export`` to the
format the offload part reads, ``plan check --format``) into a scratch directory against a checkpoint's headers: the
model's when it is here, otherwise ``plans.dry_run_checkpoint`` (e.g. the header-only synthetic checkpoint of
configs/checkpoints/, written with ``offload-lab checkpoint synth``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from offload_lab.server import install
from offload_lab.server.spec import FULL_SHA1, GitSource, PypiSource
from offload_lab.server.stack import Stack

Level = Literal["error", "unpinned", "warning"]
_TAIL = 600  # characters of a failed command's output kept in its problem


@dataclass
class Problem:
    """One thing a real install would trip over. ``error``: the install (or the boot) would fail; ``unpinned``:
    declared unpinned, so the install refuses it without ``--allow-unpinned``; ``warning``: it runs, but not as the
    plan says."""

    item: str
    message: str
    fix: str
    level: Level = "error"

    def __str__(self) -> str:
        return f"{self.level}: {self.item}: {self.message}; {self.fix}"

    def to_dict(self) -> dict[str, str]:
        return {"level": self.level, "item": self.item, "message": self.message, "fix": self.fix}


def dry_run_checks(stack: Stack, workdir: Path | str, checkpoint: Path | str | None = None,
                   lab_python: str | None = None, log: Callable[[str], None] | None = None) -> list[Problem]:
    """Every problem a real ``stack install`` of ``stack`` would meet, found without network or installing.

    ``workdir``: a scratch directory (plans and any synthetic checkpoint go into its ``plans/`` and ``checkpoint/``,
    never to the stack's own paths). ``checkpoint``: a checkpoint directory (or synthetic spec YAML) to make the plans from;
    default: the stack's model when its headers are here, else ``plans.dry_run_checkpoint``. ``lab_python``: the
    interpreter that runs offload-lab's CLI (default: this one). Returns problems in install order; an empty list
    means the install would find everything it uses as the stack file says."""
    say = log or (lambda s: None)
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    problems = pin_problems(stack) + file_problems(stack)
    if stack.spec.plans is not None and stack.spec.plans.files:
        problems += plan_problems(stack, work, checkpoint, lab_python or sys.executable, say)
    return problems


def pin_problems(stack: Stack) -> list[Problem]:
    """Parts, patches, downloads and plans not pinned exactly: ``unpinned`` where the stack file says so (with its
    todo), ``error`` where it does not."""
    out: list[Problem] = []

    def add(item: str, why: str, declared: bool | None, todo: str | None, fix: str) -> None:
        if declared is False:
            out.append(Problem(item, why, f"todo: {(todo or '').strip()}", "unpinned"))
        else:
            out.append(Problem(item, why + " (and the stack file does not say pinned: false)",
                               fix + ", or say pinned: false with a todo", "error"))

    for part in stack.spec.parts:
        src = part.source
        if isinstance(src, GitSource) and not src.complete():
            why = f"commit {src.commit!r} is not a full 40-hex commit" if src.commit else "no commit"
            add(f"part {part.name}", why, part.pinned, part.todo,
                "write the full commit (`stack install --allow-unpinned` records it in offload-lab-install.json)")
        elif isinstance(src, PypiSource) and not src.complete():
            add(f"part {part.name}", f"version {src.version!r} is not exact" if src.version else "no version",
                part.pinned, part.todo, "write the exact version")
        elif part.pinned is False:
            out.append(Problem(f"part {part.name}", "declared pinned: false", f"todo: {part.todo}", "unpinned"))
        for patch in part.patches:
            missing = [w for w, ok in (("sha256", patch.sha256), ("receipts (sha256 of each patched file after "
                                                                   "patching)", patch.receipts)) if not ok]
            if missing:
                add(f"patch {patch.label} (part {part.name})", "no " + " and no ".join(missing), patch.pinned,
                    patch.todo, "copy the patch's entry of the install record of a checked install")
    for d in stack.spec.model.downloads:
        if not (d.revision and FULL_SHA1.match(d.revision)):
            why = f"revision {d.revision!r} is not a full 40-hex commit" if d.revision else "no revision"
            add(f"model download {d.repo}", why, d.pinned, d.todo,
                "write the repository's full commit (the model page's 'Files' history)")
        elif d.pinned is False:
            out.append(Problem(f"model download {d.repo}", "declared pinned: false", f"todo: {d.todo}", "unpinned"))
    return out


def file_problems(stack: Stack) -> list[Problem]:
    """Files in this repository the install reads: patch files (with their sha256), requirements."""
    out: list[Problem] = []
    for part in stack.spec.parts:
        for patch in part.patches:
            if not patch.file:
                continue  # inside a fetched part: pinned by that part's commit and the patch's sha256
            f = stack.resolve(patch.file)
            if not f.is_file():
                out.append(Problem(f"patch {patch.label} (part {part.name})", f"{f} does not exist",
                                   "commit the patch file or fix its path"))
            elif patch.sha256 and install.sha256_text(f) != patch.sha256:
                out.append(Problem(f"patch {patch.label} (part {part.name})",
                                   f"sha256 {install.sha256_text(f)} differs from the stack file's {patch.sha256}",
                                   "the patch is not the one measured: restore it, or pin the new one"))
    for req in (stack.spec.install.requirements if stack.spec.install else []):
        if not stack.resolve(req).is_file():
            out.append(Problem(f"requirements {req}", f"{stack.resolve(req)} does not exist",
                               "commit it or fix install.requirements"))
    return out


def plan_problems(stack: Stack, work: Path, checkpoint: Path | str | None, lab: str,
                  say: Callable[[str], None]) -> list[Problem]:
    """Run the install's plan commands into ``work`` against a checkpoint's headers."""
    plans = stack.spec.plans
    assert plans is not None
    ckpt, problem = _checkpoint(stack, work, checkpoint, lab, say)
    if ckpt is None:
        return [problem] if problem else []
    out: list[Problem] = []
    (work / "plans").mkdir(exist_ok=True)
    for row in install.plan_commands(stack, lab, ckpt, plans_dir=work / "plans"):
        name, spec = row["name"], row["spec"]
        item = f"plan {name}"
        if row["make"] is None:
            committed = stack.resolve(spec.path)
            if not committed.is_file():
                out.append(Problem(item, f"{committed} is neither made by a command nor here",
                                   "commit it or give plans.files.{name}.make".replace("{name}", name)))
                continue
            if spec.sha256 and install.sha256_text(committed) != spec.sha256:
                out.append(Problem(item, f"{committed}: sha256 differs from the stack file's {spec.sha256}",
                                   "restore the plan or pin the new one"))
            row["out"].write_bytes(committed.read_bytes())
        else:
            say(f"{item}: plan make from {ckpt}")
            # The dry run makes the pod's plan on this machine, whose RAM is not the pod's host RAM: the install
            # on the pod checks that (plan make refuses a plan its host cannot pin).
            if (failed := _run([*row["make"], "--no-host-limit"], stack.root)) is not None:
                out.append(Problem(item, f"`plan make` fails against {ckpt}: {failed}",
                                   "fix plans.files.{0}.make (arguments of `offload-lab plan make`)".format(name)))
                continue
        if row["export"] is None:
            continue
        say(f"{item}: written as {row['format']} and read back as the offload part would")
        out += _served_problems(item, row, stack.root, plans.env)
    return out


def _served_problems(item: str, row: dict, root: Path, env: str) -> list[Problem]:
    out: list[Problem] = []
    fmt = row["format"]
    exported = _run_json(row["export"] + ["--json"], root)
    if isinstance(exported, str):
        return [Problem(item, f"`plan export --format {fmt}` fails: {exported}", "report it: the plan layer "
                                                                                    "cannot write this plan")]
    tensors = [d.split(": ", 1)[1] for d in exported.get("dropped", []) if d.startswith("host_tensors: ")]
    if tensors:
        out.append(Problem(item, f"{len(tensors)} whole tensor(s) the plan keeps on host ({', '.join(tensors[:3])}) "
                                 f"have no place in {fmt}: the offload part keeps them where it keeps them, not in "
                                 "host RAM", "make the plan without them (--host-category/--host-tensor), or "
                                             "check that the GPUs hold them (offload-lab audit)", "warning"))
    checked = _run_json(row["check"] + ["--json"], root)
    if isinstance(checked, str):
        return out + [Problem(item, f"`plan check --format {fmt}` could not run: {checked}", "see the message")]
    for message in checked.get("problems", []):
        out.append(Problem(item, f"the file ${env} would point to, read as {fmt}: {message}",
                           "fix the writer or the plan (`offload-lab plan check --format`)"))
    if checked.get("ok") and checked.get("layers_found", 0) < checked.get("moe_layers", 0):
        out.append(Problem(item, f"the offload part finds {checked['layers_found']} of {checked['moe_layers']} MoE "
                                 "layers' keys (the others keep every expert on the GPU)",
                           "intended for a partial plan; otherwise check the plan's layers", "warning"))
    return out


def _checkpoint(stack: Stack, work: Path, given: Path | str | None, lab: str,
                say: Callable[[str], None]) -> tuple[Path | None, Problem | None]:
    plans = stack.spec.plans
    assert plans is not None
    if given is None and stack.model_path.is_dir() and any(stack.model_path.glob("*.safetensors")):
        return stack.model_path, None
    source = Path(given) if given is not None else (stack.resolve(plans.dry_run_checkpoint)
                                                    if plans.dry_run_checkpoint else None)
    if source is None:
        return None, Problem("plans", f"the model {stack.model_path} is not here and the stack file names no "
                                      "plans.dry_run_checkpoint, so no plan command could be tried",
                             "set plans.dry_run_checkpoint to a synthetic checkpoint spec (configs/checkpoints/) "
                             "of the model's layout, or give a checkpoint")
    if source.is_dir():
        return source, None
    if not source.is_file():
        return None, Problem("plans", f"checkpoint {source} does not exist", "fix plans.dry_run_checkpoint")
    target = work / "checkpoint"
    if not (target / "model.safetensors.index.json").is_file():
        say(f"plans: writing the header-only checkpoint {source.name} into {target}")
        if (failed := _run([lab, "-m", "offload_lab.cli", "checkpoint", "synth", str(source), "--out", str(target)],
                           stack.root)) is not None:
            return None, Problem("plans", f"`checkpoint synth {source}` fails: {failed}", "fix the spec file")
    return target, None


def _run(argv: list[str], cwd: Path) -> str | None:
    """None when the command succeeds, else the tail of what it said."""
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    said = (proc.stderr.strip() or proc.stdout.strip())[-_TAIL:]
    return f"exit {proc.returncode}: {said}"


def _run_json(argv: list[str], cwd: Path) -> dict | str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return f"exit {proc.returncode}: {(proc.stderr.strip() or proc.stdout.strip())[-_TAIL:]}"
    return data if isinstance(data, dict) else f"unexpected output {proc.stdout[:_TAIL]!r}"
