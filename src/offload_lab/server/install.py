"""``offload-lab stack install``: build a stack's server environment on a pod from its stack file, and check receipts.

The stack file's ``install``, ``parts``, ``model.downloads`` and ``plans`` become a list of steps, run in order, each
either a command or a check:

1. ``install.preflight`` commands (e.g. ``nvidia-smi``, ``nvidia-smi topo -m``);
2. the virtual environment (``install.venv``), then ``install.requirements``;
3. every part: PyPI parts are pip-installed at their exact version; git parts are cloned into
   ``install.src_dir/<stack>/<part>``, checked out at their commit (and the checkout is checked against the full
   commit), patched with ``git apply`` after the patch file's sha256 is checked, and the **receipts** are checked:
   the sha256 of every patched file after patching must equal the stack file's, and a mismatch stops the install;
   then the part's build commands run in its tree with the environment active;
4. the model's files, from Hugging Face at the pinned revisions (``hf download``; a token comes from ``$HF_TOKEN``,
   never from a file or a flag);
5. the plan files (``offload-lab plan make``), checked against a sha256 where one is given; where the stack's
   offload part reads another format (``plans.format``), each is written in it too (``offload-lab plan export``) to
   the file the server is given, and read back as that code would read it, against the model (``offload-lab plan
   check --format``);
6. ``offload-lab-install.json`` in the environment: the resolved commits, patch and receipt hashes as observed,
   each plan's sha256 and its served file's, what was unpinned. Every boot of the stack copies it into its
   ``boot.json``.

A stack with anything unpinned (see :func:`offload_lab.server.spec.unpinned_items`) is refused unless
``allow_unpinned``; then the observed hashes in the install record are what to write into the stack file.
``--dry-run`` prints every step as the shell command it runs (checks as ``sha256sum -c`` and ``test`` lines), so the
printout is itself a readable install script.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from offload_lab.core import runs
from offload_lab.server.record import RECORD_NAME
from offload_lab.core.errors import InputError, ProducerError
from offload_lab.server.stack import Stack
from offload_lab.server.spec import FULL_SHA1, GitSource, Part, Patch, PypiSource, unpinned_items



@dataclass
class Step:
    what: str
    argv: list[str] | None = None
    shell: str | None = None
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    check: Callable[["InstallState"], None] | None = None
    shown: str | None = None  # how a check prints in the dry run
    skip_if: Callable[[], bool] | None = None

    def render(self) -> str:
        prefix = f"cd {shlex.quote(str(self.cwd))} && " if self.cwd and (self.argv or self.shell) else ""
        envs = " ".join(_assign(k, v) for k, v in self.env.items())
        envs = envs + " " if envs else ""
        if self.argv:
            return prefix + envs + shlex.join(self.argv)
        if self.shell:
            return prefix + envs + self.shell
        return self.shown or f"# check: {self.what}"


def _assign(name: str, value: str) -> str:
    # $PATH must expand when the printed line is run; every other value is quoted literally.
    if "$PATH" in value:
        return f'{name}="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{name}={shlex.quote(value)}"


@dataclass
class InstallState:
    """What the checks observe, kept for the install record."""

    commits: dict[str, str] = field(default_factory=dict)
    patches: dict[str, dict[str, Any]] = field(default_factory=dict)
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> path, sha256, served


@dataclass
class InstallPlan:
    stack: Stack
    steps: list[Step]
    unpinned: list[str]
    venv: Path
    src: Path

    def render(self, allow_unpinned: bool = False) -> str:
        lines = [f"# offload-lab stack install {self.stack.file}",
                 f"# environment {self.venv}; sources under {self.src}"]
        if self.unpinned:
            verdict = ("--allow-unpinned given: installing anyway, observed hashes go to the install record"
                       if allow_unpinned else "a real install stops here unless --allow-unpinned is given")
            lines.append(f"# UNPINNED ({len(self.unpinned)}): {verdict}")
            lines += [f"#   - {u}" for u in self.unpinned]
        for i, step in enumerate(self.steps, 1):
            lines.append(f"# [{i}/{len(self.steps)}] {step.what}")
            lines.append(step.render())
        return "\n".join(lines) + "\n"


def sha256_text(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def patched_files(patch_text: str, strip: int = 1) -> list[str]:
    """Files a unified diff changes (their new names), with ``strip`` leading components removed."""
    out = []
    for line in patch_text.splitlines():
        m = re.match(r"^\+\+\+ (\S+)", line)
        if m and m.group(1) != "/dev/null":
            parts = m.group(1).split("/")
            out.append("/".join(parts[strip:]))
    return out


def plan_install(stack: Stack, skip_preflight: bool = False, skip_model: bool = False,
                 lab_python: str | None = None) -> InstallPlan:
    """The steps that install ``stack``; nothing is run."""
    spec = stack.spec
    if spec.install is None:
        raise InputError(f"stack file {stack.file} has no install section; the embedded stack's environment is "
                         "made by `make server-env`")
    inst = spec.install
    venv = stack.resolve(inst.venv)
    src = stack.resolve(inst.src_dir) / spec.name
    vpy = str(venv / "bin" / "python")
    lab = lab_python or sys.executable
    active = {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:$PATH"}
    steps: list[Step] = []
    if not skip_preflight:
        steps += [Step(f"preflight: {c}", shell=c) for c in inst.preflight]
    steps.append(Step("create the server's virtual environment",
                      argv=[inst.base_python, "-m", "venv", *inst.venv_args, str(venv)],
                      skip_if=lambda: (venv / "bin" / "python").exists()))
    if Path(stack.python) != venv / "bin" / "python":
        steps.append(Step("the stack's python is inside the environment",
                          shown=f"test -x {shlex.quote(str(stack.python))}",
                          check=lambda st: _require(stack.python.exists(),
                                                    f"the stack's python {stack.python} does not exist after the "
                                                    f"environment was made; point `python:` into {venv}")))
    for req in inst.requirements:
        steps.append(Step(f"requirements {req}", argv=[vpy, "-m", "pip", "install", "-r", str(stack.resolve(req))]))
    parts = {p.name: p for p in spec.parts}
    for part in spec.parts:
        steps += _part_steps(stack, part, parts, src, vpy, {**active, **inst.env})
    if not skip_model:
        steps += _model_steps(stack, lab)
    steps += _plan_steps(stack, lab)
    steps.append(Step(f"write the install record {venv / RECORD_NAME}", shown=f"# write {venv / RECORD_NAME}"))
    return InstallPlan(stack=stack, steps=steps, unpinned=unpinned_items(spec), venv=venv, src=src)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ProducerError(message)


def _part_steps(stack: Stack, part: Part, parts: dict[str, Part], src: Path, vpy: str,
                active: dict[str, str]) -> list[Step]:
    steps: list[Step] = []
    source = part.source
    env = {**active, **part.env}
    if isinstance(source, PypiSource):
        if not part.install:
            return steps
        if part.build:
            return [Step(f"{part.name}: build", shell=c, env=env) for c in part.build]
        argv = [vpy, "-m", "pip", "install", source.requirement()]
        if source.index_url:
            argv += ["--index-url", source.index_url]
        if source.extra_index_url:
            argv += ["--extra-index-url", source.extra_index_url]
        build_env = {k: v for k, v in env.items() if k not in ("VIRTUAL_ENV", "PATH")}
        return [Step(f"{part.name}: pip install {source.requirement()}", argv=argv, env=build_env)]
    tree = src / part.name
    target = source.commit or source.ref or "HEAD"
    steps.append(Step(f"{part.name}: clone {source.repo}",
                      argv=["git", "clone", "--no-checkout", source.repo, str(tree)],
                      skip_if=lambda: (tree / ".git").exists()))
    steps.append(Step(f"{part.name}: fetch (an existing clone)", argv=["git", "-C", str(tree), "fetch", "--tags",
                                                                       "origin"],
                      skip_if=lambda: not (tree / ".git").exists()))
    steps.append(Step(f"{part.name}: check out {target}", argv=["git", "-C", str(tree), "checkout", "--force",
                                                                "--detach", target]))
    steps.append(Step(f"{part.name}: a clean tree (patches apply to the commit, nothing else)",
                      argv=["git", "-C", str(tree), "clean", "-fdx", "--quiet"]))
    steps.append(Step(f"{part.name}: the checkout is commit {target}",
                      shown=f"git -C {shlex.quote(str(tree))} rev-parse HEAD | grep -q '^{target}'",
                      check=lambda st: _check_commit(part, tree, st)))
    for patch in part.patches:
        steps += _patch_steps(stack, part, patch, parts, src, tree)
    if part.install:
        steps += [Step(f"{part.name}: build", shell=c, cwd=tree, env=env) for c in part.build]
    return steps


def _check_commit(part: Part, tree: Path, state: InstallState) -> None:
    head = _git(tree, "rev-parse", "HEAD")
    source = part.source
    assert isinstance(source, GitSource)
    if source.commit and FULL_SHA1.match(source.commit) and head != source.commit:
        raise ProducerError(f"part {part.name}: checked out {head}, the stack file says {source.commit}")
    if source.commit and not head.startswith(source.commit):
        raise ProducerError(f"part {part.name}: checked out {head}, which does not start with {source.commit}")
    state.commits[part.name] = head


def _git(tree: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise ProducerError(f"git {' '.join(args)} in {tree} failed: {out.stderr.strip()}")
    return out.stdout.strip()


def _patch_file(stack: Stack, patch: Patch, src: Path) -> Path:
    if patch.file:
        return stack.resolve(patch.file)
    return src / str(patch.from_part) / str(patch.path)


def _patch_steps(stack: Stack, part: Part, patch: Patch, parts: dict[str, Part], src: Path, tree: Path) -> list[Step]:
    pfile = _patch_file(stack, patch, src)
    key = f"{part.name}:{patch.label}"
    steps = []
    shown = (f"echo {patch.sha256}'  '{shlex.quote(str(pfile))} | sha256sum -c -" if patch.sha256
             else f"sha256sum {shlex.quote(str(pfile))}  # no sha256 in the stack file: recorded, not checked")
    steps.append(Step(f"{part.name}: patch file {patch.label}", shown=shown,
                      check=lambda st: _check_patch_file(patch, pfile, key, st)))
    steps.append(Step(f"{part.name}: apply {patch.label}",
                      argv=["git", "-C", str(tree), "apply", f"-p{patch.strip}", "--whitespace=nowarn", str(pfile)]))
    if patch.receipts:
        shown = "\n".join(f"echo {h}'  '{shlex.quote(str(tree / f))} | sha256sum -c -"
                          for f, h in patch.receipts.items())
    else:
        shown = "# no receipts in the stack file: the patched files' sha256 are recorded, not checked"
    steps.append(Step(f"{part.name}: receipts of {patch.label} (sha256 of each patched file)", shown=shown,
                      check=lambda st: _check_receipts(part, patch, pfile, tree, key, st)))
    return steps


def _check_patch_file(patch: Patch, pfile: Path, key: str, state: InstallState) -> None:
    if not pfile.is_file():
        raise ProducerError(f"patch {patch.label}: {pfile} does not exist")
    digest = sha256_text(pfile)
    state.patches.setdefault(key, {})["sha256"] = digest
    if patch.sha256 and digest != patch.sha256:
        raise ProducerError(f"patch {patch.label}: sha256 {digest} differs from the stack file's {patch.sha256}; "
                            "the patch is not the one the stack was measured with")


def _check_receipts(part: Part, patch: Patch, pfile: Path, tree: Path, key: str, state: InstallState) -> None:
    touched = patched_files(pfile.read_text(errors="replace"), patch.strip)
    observed = {f: (sha256_text(tree / f) if (tree / f).is_file() else None) for f in sorted(set(touched)
                                                                                          | set(patch.receipts))}
    state.patches.setdefault(key, {})["receipts"] = observed
    bad = [(f, observed.get(f), want) for f, want in patch.receipts.items() if observed.get(f) != want]
    if bad:
        lines = "\n".join(f"  {f}: {got} (stack file: {want})" for f, got, want in bad)
        raise ProducerError(f"RECEIPT MISMATCH after applying {patch.label} to part {part.name}; the patched "
                            f"source is not what the stack was measured with, the install stops:\n{lines}")


def _model_steps(stack: Stack, lab: str) -> list[Step]:
    steps = []
    hf = Path(lab).parent / "hf"
    for d in stack.spec.model.downloads:
        dest = stack.model_path / d.subdir if d.subdir else stack.model_path
        argv = [str(hf), "download", d.repo, "--local-dir", str(dest)]
        if d.revision:
            argv += ["--revision", d.revision]
        if d.include:
            argv += ["--include", *d.include]
        steps.append(Step(f"model: {d.repo} at {d.revision or 'the newest revision (UNPINNED)'} "
                          "(a token, if needed, from $HF_TOKEN)", argv=argv))
    return steps


def plan_commands(stack: Stack, lab: str, model: Path, plans_dir: Path | None = None) -> list[dict[str, Any]]:
    """For each plan file, the commands that make it and write it in the format the offload part reads: ``make``
    (``offload-lab plan make`` with ``{model}`` and ``{out}`` filled in, or None for a committed plan), ``export``
    and ``check`` (None when the format is offload-lab's own). ``plans_dir``: write there instead of the stack's
    paths (the dry run's scratch directory)."""
    plans = stack.spec.plans
    if plans is None:
        return []
    cli = [lab, "-m", "offload_lab.cli", "plan"]
    out_rows = []
    for name, p in plans.files.items():
        out = stack.resolve(p.path) if plans_dir is None else plans_dir / f"{name}.json"
        served = (stack.resolve(plans.served_path(name)) if plans_dir is None
                  else plans_dir / f"{name}.{plans.format}.json")
        if plans.format == "offload-lab":
            served = out
        make = None
        if p.make:
            make = cli + ["make", *[a.replace("{model}", str(model)).replace("{out}", str(out)) for a in p.make]]
        export = check = None
        if served != out:
            export = cli + ["export", str(out), "--format", plans.format, "--out", str(served), "--force"]
            check = cli + ["check", str(served), str(model), "--format", plans.format, "--written-from", str(out)]
        out_rows.append({"name": name, "spec": p, "out": out, "served": served, "format": plans.format,
                         "make": make, "export": export, "check": check})
    return out_rows


def _plan_steps(stack: Stack, lab: str) -> list[Step]:
    steps: list[Step] = []
    for row in plan_commands(stack, lab, stack.model_path):
        name, p, out, served = row["name"], row["spec"], row["out"], row["served"]
        if row["make"]:
            # `plan make` refuses an --out whose folder is missing (plans/ is not in git): make it first.
            steps.append(Step(f"plan {name}: the folder of {p.path}", argv=["mkdir", "-p", str(out.parent)]))
            steps.append(Step(f"plan {name}: make {p.path}", argv=row["make"], cwd=stack.root))
        if p.sha256:
            steps.append(Step(f"plan {name}: sha256", shown=f"echo {p.sha256}'  '{shlex.quote(str(out))} | "
                                                            "sha256sum -c -",
                              check=lambda st, p=p, out=out, name=name: _check_plan(name, p.sha256, out, st)))
        else:
            steps.append(Step(f"plan {name}: record sha256", shown=f"sha256sum {shlex.quote(str(out))}",
                              check=lambda st, out=out, name=name: _check_plan(name, None, out, st)))
        if row["export"]:
            fmt = row["format"]
            steps.append(Step(f"plan {name}: write it as {fmt}, the format the offload part reads, to "
                              f"{served} (${stack.spec.plans.env if stack.spec.plans else ''})",
                              argv=row["export"], cwd=stack.root))
            steps.append(Step(f"plan {name}: read {served.name} back as the offload part would, against the model",
                              argv=row["check"], cwd=stack.root))
            steps.append(Step(f"plan {name}: record the served file's sha256", shown=f"sha256sum "
                                                                                   f"{shlex.quote(str(served))}",
                              check=lambda st, served=served, name=name, fmt=fmt: _check_served(name, fmt, served, st)))
    return steps


def _check_plan(name: str, want: str | None, path: Path, state: InstallState) -> None:
    if not path.is_file():
        raise ProducerError(f"plan {name}: {path} does not exist")
    digest = sha256_text(path)
    state.plans[name] = {"path": str(path), "sha256": digest, "format": "offload-lab"}
    if want and digest != want:
        raise ProducerError(f"plan {name}: sha256 {digest} differs from the stack file's {want}")


def _check_served(name: str, fmt: str, path: Path, state: InstallState) -> None:
    if not path.is_file():
        raise ProducerError(f"plan {name}: {path} ({fmt}) was not written")
    state.plans.setdefault(name, {})["served"] = {"path": str(path), "format": fmt, "sha256": sha256_text(path)}


def run_install(plan: InstallPlan, allow_unpinned: bool = False,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the steps; stop at the first failure (a command's exit status, a sha256, a receipt)."""
    if plan.unpinned and not allow_unpinned:
        raise InputError(
            f"stack file {plan.stack.file} is not fully pinned; the install refuses to run without "
            "--allow-unpinned:\n" + "\n".join(f"  - {u}" for u in plan.unpinned)
        )
    state = InstallState()
    started = runs.utc_now()
    for i, step in enumerate(plan.steps, 1):
        if step.skip_if is not None and step.skip_if():
            log(f"[{i}/{len(plan.steps)}] {step.what}: already done, skipped")
            continue
        log(f"[{i}/{len(plan.steps)}] {step.what}")
        if step.check is not None:
            step.check(state)
        elif step.argv or step.shell:
            _run_step(step)
    record = {
        "stack": plan.stack.record(),
        "started_at": started,
        "ended_at": runs.utc_now(),
        "allow_unpinned": allow_unpinned,
        "unpinned": plan.unpinned,
        "commits": state.commits,
        "patches": state.patches,
        "plans": state.plans,
        "python": str(plan.stack.python),
    }
    runs.atomic_write_json(plan.venv / RECORD_NAME, record)
    log(f"install record: {plan.venv / RECORD_NAME}")
    return record


def _run_step(step: Step) -> None:
    env = dict(os.environ)
    for k, v in step.env.items():
        env[k] = v.replace("$PATH", os.environ.get("PATH", ""))
    if step.argv:
        exe = shutil.which(step.argv[0], path=env.get("PATH")) or step.argv[0]
        proc = subprocess.run([exe, *step.argv[1:]], cwd=step.cwd, env=env)
    else:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", str(step.shell)], cwd=step.cwd, env=env)
    if proc.returncode != 0:
        raise ProducerError(f"install step failed ({step.what}), exit status {proc.returncode}: {step.render()}")

