"""A campaign and its stack file as SkyPilot tasks: one task YAML per pod, and the commands that launch them, bring
their data back and take them down.

Nothing here imports SkyPilot or contacts a cloud. The YAML is checked by SkyPilot's own parser in an environment of
its own (:func:`check_tasks` runs ``sky_check.py`` there; ``make sky-env`` makes one).

What a task holds (SkyPilot 0.14.1 task schema, sky/utils/schemas.py):

- ``resources`` from the stack's ``pod:`` (accelerators NAME:COUNT, disk, memory, image, infra, spot); ``num_nodes``;
- ``envs``: ``OFFLOAD_LAB_POD`` = the cluster name and ``OFFLOAD_LAB_POD_PROVIDER`` = skypilot, which the ledger
  records with each session, and the plan id and part;
- ``secrets``: HF_TOKEN and the reference API key as null references, given at launch (``--secret NAME``), never
  written into the file;
- ``workdir``: this checkout (synced to ``~/sky_workdir``, .gitignore'd paths left out), or a git URL at a commit,
  which makes every manifest's git state clean;
- ``setup``: the README's install (``make lab-env``) and ``offload-lab stack install STACK``, on every node (vLLM
  needs the model at the same path on each);
- ``run``: ``nvidia-smi topo -m`` first, then the campaign (or its part), then, with a bucket, a copy of the
  campaign's data to it; with ``pod.ray``, the head starts Ray and the other nodes join it first.

Data comes back with ``rsync`` from the cluster (SkyPilot writes an ssh entry per cluster; 0.14.1 has no
``rsync-down``), or from a bucket mounted at ``/offload-lab-out`` (it outlives ``--down``). Either way run
directories travel whole, manifests included, and ``offload-lab pod merge`` checks them before merging.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from offload_lab.campaigns.runner import Campaign
from offload_lab.core.errors import InputError
from offload_lab.core.paths import DATA_DIR
from offload_lab.pods.left import NOTHING_LEFT
from offload_lab.pods.plan import PodPart, PodPlan, part_campaign_text, part_stacks
from offload_lab.server import multinode
from offload_lab.server.spec import StackFile, unpinned_items

LAB = ".venvs/lab/bin/offload-lab"
PY = ".venvs/lab/bin/python"
REMOTE_OUT = "/offload-lab-out"
PART_CAMPAIGNS = "data/.pod-campaigns"  # under data/: the manifests' git state ignores it
SKY_CHECK = Path(__file__).with_name("sky_check.py")
SKY_PYTHON_ENV = "OFFLOAD_LAB_SKY_PYTHON"
DEFAULT_SKY_PYTHON = ".venvs/sky/bin/python"
SECRETS = ["HF_TOKEN", "OFFLOAD_LAB_REFERENCE_API_KEY"]
SYNC_EVERY_S = 60  # with a bucket: how often the pod copies its new runs there while the campaign runs


class TaskOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    git_url: str | None = Field(None, description="clone this repository on the pod instead of syncing the checkout")
    git_ref: str | None = Field(None, description="... at this commit")
    bucket: str | None = Field(None, description="copy each pod's data here (SkyPilot storage, MOUNT mode)")
    store: Literal["s3", "gcs", "r2", "azure", "oci"] = "s3"
    allow_unpinned: bool = False
    secrets: list[str] = Field(default_factory=lambda: list(SECRETS))


HF_TOKEN = "HF_TOKEN"
REFERENCE_KEY = "OFFLOAD_LAB_REFERENCE_API_KEY"  # the quality comparison's default (quality/endpoints.py)


def _key_names(value: Any) -> set[str]:
    """The API-key variables an experiment's parameters name: ``api_key_env``, or a ``deepseek`` endpoint's
    default."""
    if isinstance(value, dict):
        found = {str(value["api_key_env"])} if value.get("api_key_env") else set()
        if value.get("kind") == "deepseek" and not value.get("api_key_env"):
            found.add(REFERENCE_KEY)
        return found.union(*(_key_names(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_key_names(v) for v in value))
    return set()


def secrets_for(campaign: Campaign, spec: StackFile, only: list[str] | None = None,
                environ: dict[str, str] | None = None) -> list[str]:
    """The secrets a plan's pods get: the API keys its experiments name (required), and HF_TOKEN when the stack
    downloads a model and the token is set here (a gated repository needs it; a public one does not)."""
    env = os.environ if environ is None else environ
    names = set().union(*(_key_names(e.parameters) for e in campaign.spec.experiments
                          if only is None or e.experiment in only))
    if spec.model is not None and spec.model.downloads and env.get(HF_TOKEN):
        names.add(HF_TOKEN)
    return sorted(names)


def pod_of(spec: StackFile, stack_file: str) -> multinode.PodSpec:
    if spec.pod is None:
        raise InputError(f"stack file {stack_file} has no `pod:` section: say which GPUs (a SkyPilot accelerator "
                         f"name, e.g. RTXPRO6000, B300, L40S: `sky gpus list`), how many per node, and the disk "
                         "(docs/runbook.md, 'From a laptop')")
    return spec.pod


def check_pinned(spec: StackFile, stack_file: str, allow_unpinned: bool) -> list[str]:
    """Refuse here, before anything is rented, what `stack install` on the pod would refuse."""
    unpinned = unpinned_items(spec)
    if unpinned and not allow_unpinned:
        raise InputError(f"stack file {stack_file} has {len(unpinned)} unpinned item(s) (`offload-lab stack check "
                         f"{stack_file}` lists them); `stack install` on the pod would refuse. Pin them, or plan "
                         "with --allow-unpinned (the install record then lists what was installed)")
    return unpinned


def _resources(pod: multinode.PodSpec) -> dict[str, Any]:
    r: dict[str, Any] = {"accelerators": f"{pod.accelerator}:{pod.count}", "disk_size": pod.disk_gib}
    for key, value in (("infra", pod.infra), ("image_id", pod.image), ("cpus", pod.cpus), ("memory", pod.memory)):
        if value:
            r[key] = value
    if pod.use_spot:
        r["use_spot"] = True
    if pod.nodes > 1:
        r["network_tier"] = "best"  # the pipeline stages talk over the network at every step (SkyPilot: best)
    return r


def _campaign_command(plan: PodPlan, part: PodPart, part_file: str | None, only_var: str | None = None) -> str:
    # --json: one progress event a line (experiment started, counts, done), which `pod launch` follows
    args = [LAB, "campaign", "run", part_file or plan.campaign_file, "--data-dir", DATA_DIR, "--json"]
    if only_var is None and part.only:
        args += ["--only", ",".join(part.only)]
    line = " ".join(shlex.quote(a) for a in args)
    return line + (f' --only "${only_var}"' if only_var else "")


def _skip_done(plan: PodPlan, part: PodPart, part_file: str | None) -> list[str]:
    """Before the campaign, on a pod that starts from the bucket's data (a managed job recovered after a
    preemption reruns the whole task): what is left of the part (pods/left.py), so nothing done is run again."""
    given = json.dumps({"plan": plan.model_dump(), "part": part.model_dump()})
    return [f"left=$({PY} -m offload_lab.pods.left {shlex.quote(part_file or plan.campaign_file)} {DATA_DIR} "
            "<<'OFFLOAD_LAB_PART'", given, "OFFLOAD_LAB_PART", ")"]


def _run_lines(plan: PodPlan, part: PodPart, spec: StackFile, campaign_text: str | None,
               opts: TaskOptions) -> list[str]:
    part_file = f"{PART_CAMPAIGNS}/{part.cluster}.yaml" if campaign_text else None
    body = ["nvidia-smi topo -m || true   # check first: SYS between the GPUs means one GPU per socket (E7)"]
    if campaign_text:
        # The pod's share of the repeat boots: the campaign file with its own repeat_boots, written on the pod.
        body += [f"mkdir -p {PART_CAMPAIGNS}", f"cat > {part_file} <<'OFFLOAD_LAB_CAMPAIGN'",
                 *campaign_text.rstrip("\n").split("\n"), "OFFLOAD_LAB_CAMPAIGN"]
    dest = f"{REMOTE_OUT}/{plan.plan_id}/{part.cluster}/{plan.campaign}/"
    if opts.bucket:
        # a pod that replaces a preempted one (SkyPilot's managed-job recovery) starts from what the bucket holds:
        # the runs and ledger lines already made stay, and the copies below only add to them
        body.append(f"if [ -d {dest} ]; then mkdir -p data/{plan.campaign} && "
                    f"rsync -a {dest} data/{plan.campaign}/; fi")
        # each run reaches the bucket soon after it is written, not only at the end: a preempted pod loses little
        # (`A && (loop) &` would background the whole list: $! its outer shell, and a kill would leave the loop
        # running, holding the job's log open: the job never ends. The loop alone is backgrounded, its output not
        # in the log.)
        body.append(f"mkdir -p {dest}")
        body.append(f"(while sleep {SYNC_EVERY_S}; do rsync -a data/{plan.campaign}/ {dest}; done) >/dev/null 2>&1 "
                    "& sync_pid=$!")
    if opts.bucket:
        body += _skip_done(plan, part, part_file)
        body.append(f'if [ "$left" = "{NOTHING_LEFT}" ]; then echo "everything of this part is in the bucket already"; '
                    f"rc=0; else {_campaign_command(plan, part, part_file, 'left')} && rc=0 || rc=$?; fi")
    else:
        body.append(f"{_campaign_command(plan, part, part_file)} && rc=0 || rc=$?")
    if opts.bucket:
        body.append("kill $sync_pid 2>/dev/null; wait $sync_pid 2>/dev/null")
        # a failed copy fails the job (exit 5) unless the campaign had already failed
        body.append(f"mkdir -p {dest} && rsync -a data/{plan.campaign}/ {dest} || "
                    '{ echo "copy to the bucket failed" >&2; [ "$rc" != 0 ] || rc=5; }')
    body += multinode.stop_commands(spec)
    body.append("exit $rc")
    if spec.pod is None or spec.pod.ray is None:
        return ["set -uo pipefail", *body]
    worker = multinode.worker_commands(spec, "$HEAD_IP", "$NODE_IP")
    return ["set -uo pipefail",
            'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
            'NODE_IP=$(echo "$SKYPILOT_NODE_IPS" | sed -n "$((SKYPILOT_NODE_RANK + 1))p")',
            'if [ "$SKYPILOT_NODE_RANK" != "0" ]; then',
            *[f"  {c}" for c in worker], "  exit 0", "fi",
            *multinode.head_commands(spec, "$HEAD_IP"), *body]


def install_command(stack_file: str, allow_unpinned: bool) -> str:
    return f"{LAB} stack install {shlex.quote(stack_file)}" + (" --allow-unpinned" if allow_unpinned else "")


def _machine(pod: multinode.PodSpec) -> tuple[str, int, int]:
    return pod.accelerator, pod.count, pod.nodes


def stacks_for(plan: PodPlan, part: PodPart, spec: StackFile, campaign: Campaign, opts: TaskOptions) -> list[str]:
    """The stacks the part's pod installs: every one its share of the campaign boots or serves. InputError, before
    anything is rented, for one the pod could not install or run: missing, unpinned (without --allow-unpinned), or
    made for another machine than the one the plan rents."""
    from offload_lab.server import stack as stackmod

    rented = pod_of(spec, plan.stack_file)
    needed = part_stacks(campaign, plan, part)
    for rel in needed:
        if rel == plan.stack_file:
            continue
        try:
            other = stackmod.load_stack(campaign.root / rel, root=campaign.root).spec
        except InputError as e:
            raise InputError(f"pod {part.cluster} of the plan boots stack file {rel}, which does not load: {e}") from e
        check_pinned(other, rel, opts.allow_unpinned)
        if other.pod is not None and _machine(other.pod) != _machine(rented):
            have, want = _machine(rented), _machine(other.pod)
            raise InputError(f"pod {part.cluster} rents {have[2]} x {have[0]}:{have[1]} ({plan.stack_file}) but its "
                             f"share of campaign {plan.campaign} boots {rel}, made for {want[2]} x {want[0]}:"
                             f"{want[1]}; plan those experiments apart (--only) with --stack {rel}")
    return needed


def missing_installs(task: dict[str, Any], needed: list[str]) -> list[str]:
    """The stacks a task's pod needs and its setup does not install (a task file written by an older plan)."""
    setup = str(task.get("setup") or "")
    return [s for s in needed if f"stack install {shlex.quote(s)}" not in setup]


def task_dict(plan: PodPlan, part: PodPart, spec: StackFile, campaign: Campaign, opts: TaskOptions) -> dict[str, Any]:
    """The SkyPilot task of one pod of the plan: setup installs every stack its part boots or serves, and the run
    uses the planned stack wherever the campaign uses its own."""
    pod = pod_of(spec, plan.stack_file)
    check_pinned(spec, plan.stack_file, opts.allow_unpinned)
    setup = ["set -euo pipefail", *pod.bootstrap, "make lab-env",
             *(install_command(s, opts.allow_unpinned) for s in stacks_for(plan, part, spec, campaign, opts))]
    task: dict[str, Any] = {
        "name": part.cluster,
        "num_nodes": pod.nodes,
        "resources": _resources(pod),
        "envs": {"OFFLOAD_LAB_POD": part.cluster, "OFFLOAD_LAB_POD_PROVIDER": "skypilot",
                 "OFFLOAD_LAB_POD_PLAN": plan.plan_id, "OFFLOAD_LAB_POD_PART": f"{part.index + 1}/{part.of}"},
    }
    if opts.git_url:
        task["workdir"] = {"url": opts.git_url, **({"ref": opts.git_ref} if opts.git_ref else {})}
    else:
        # absolute: SkyPilot takes a relative workdir from where `sky launch` runs, not from the task file
        task["workdir"] = str(campaign.root)
    if opts.secrets:
        task["secrets"] = {k: None for k in opts.secrets}  # references: values come from `sky launch --secret NAME`
    if opts.bucket:
        task["file_mounts"] = {REMOTE_OUT: {"name": opts.bucket, "store": opts.store, "mode": "MOUNT"}}
    task["setup"] = "\n".join(setup) + "\n"
    text = part_campaign_text(campaign, part, plan.stack_file)
    task["run"] = "\n".join(_run_lines(plan, part, spec, text, opts)) + "\n"
    return task


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None  # setup and run as block scalars, readable in the file
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def task_yaml(task: dict[str, Any]) -> str:
    return yaml.dump(task, Dumper=_Dumper, sort_keys=False, width=1000)


def _bucket_fetch(plan: PodPlan, out_dir: str, opts: TaskOptions) -> list[str]:
    if opts.store == "s3":
        return [f"aws s3 sync s3://{opts.bucket}/{plan.plan_id}/{p.cluster}/ {out_dir}/{p.cluster}/data/"
                for p in plan.parts]
    return [f"# copy {opts.store}://{opts.bucket}/{plan.plan_id}/{p.cluster}/ to {out_dir}/{p.cluster}/data/"
            for p in plan.parts]


def commands(plan: PodPlan, out_dir: str, opts: TaskOptions, autodown_minutes: int,
             spot: bool = False) -> dict[str, list[str]]:
    """What to type on the laptop: launch, watch, fetch, report, down, merge, and the analysis after the merge."""
    sec = "".join(f" --secret {s}" for s in opts.secrets)
    clusters = " ".join(p.cluster for p in plan.parts)
    if spot:
        # managed jobs: SkyPilot recovers a preempted pod on a new one; the runs come home through the bucket
        return {
            "launch": [f"sky jobs launch -y -d -n {p.cluster} {out_dir}/{p.cluster}.yaml{sec}" for p in plan.parts],
            "watch": [f"sky jobs logs -n {p.cluster}" for p in plan.parts] + ["sky jobs queue"],
            "fetch": _bucket_fetch(plan, out_dir, opts),
            "report": [f"sky cost-report -o json --days 0 > {out_dir}/cost-report.json"],
            "down": [f"sky jobs cancel -y -n {p.cluster}" for p in plan.parts],
            "merge": [f"offload-lab pod merge {out_dir} --data-dir data --cost-report {out_dir}/cost-report.json"],
            "after_merge": ([f"offload-lab campaign run {plan.campaign_file} --data-dir data --only "
                             f"{','.join(plan.after_merge)}"] if plan.after_merge else []),
        }
    # With a bucket the data is safe when the job ends: down at once. Without, the pod waits `autodown_minutes`
    # idle for the rsync. (SkyPilot never autodowns a cluster whose setup failed: `sky status` shows it.)
    down = "--down" if opts.bucket else f"-i {autodown_minutes} --down"
    launch = [f"sky launch -y -d -c {p.cluster} {out_dir}/{p.cluster}.yaml {down}{sec}" for p in plan.parts]
    if opts.bucket and opts.store == "s3":
        fetch = [f"aws s3 sync s3://{opts.bucket}/{plan.plan_id}/{p.cluster}/ {out_dir}/{p.cluster}/data/"
                 for p in plan.parts]
    elif opts.bucket:
        fetch = [f"# copy {opts.store}://{opts.bucket}/{plan.plan_id}/{p.cluster}/ to {out_dir}/{p.cluster}/data/"
                 for p in plan.parts]
    else:
        fetch = [f"mkdir -p {out_dir}/{p.cluster}/data/{plan.campaign} && rsync -a "
                 f"{p.cluster}:~/sky_workdir/data/{plan.campaign}/ {out_dir}/{p.cluster}/data/{plan.campaign}/"
                 for p in plan.parts]
    return {
        "launch": launch,
        "watch": [f"sky logs {p.cluster}" for p in plan.parts] + [f"sky status {clusters}"],
        "fetch": fetch,
        "report": [f"sky cost-report -o json --days 0 > {out_dir}/cost-report.json"],
        "down": [f"sky down -y {clusters}"],
        "merge": [f"offload-lab pod merge {out_dir} --data-dir data --cost-report {out_dir}/cost-report.json"],
        "after_merge": ([f"offload-lab campaign run {plan.campaign_file} --data-dir data --only "
                         f"{','.join(plan.after_merge)}"] if plan.after_merge else []),
    }


# --- SkyPilot's own parser, in its own environment ----------------------------------------------------------------

def sky_python(explicit: str | Path | None, root: Path) -> Path:
    """SkyPilot's interpreter: --sky-python, else $OFFLOAD_LAB_SKY_PYTHON, else .venvs/sky (make sky-env)."""
    p = Path(explicit or os.environ.get(SKY_PYTHON_ENV) or DEFAULT_SKY_PYTHON)
    return p if p.is_absolute() else root / p


def check_tasks(paths: list[Path], python: Path, timeout_s: float = 300) -> list[dict[str, Any]]:
    """Load every task with SkyPilot's parser (``sky.Task.from_yaml``) in its environment: offline, no cloud, no
    credentials; ``HOME`` is a throwaway folder because SkyPilot creates ~/.sky on import. InputError when SkyPilot
    is missing or refuses a task."""
    if not python.exists():
        raise InputError(f"SkyPilot's environment {python} does not exist: `make sky-env` creates .venvs/sky, or "
                         f"give --sky-python (or ${SKY_PYTHON_ENV}) for an interpreter with skypilot installed")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ol-sky-home-") as home:
        env = {**os.environ, "HOME": home, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
        proc = subprocess.run([str(python), str(SKY_CHECK), *map(str, paths)], capture_output=True, text=True,
                              timeout=timeout_s, env=env)
    if proc.returncode == 3:
        raise InputError(f"SkyPilot is not installed for {python} ({proc.stderr.strip()[-300:]}): `make sky-env`, "
                         "or give --sky-python for an interpreter with skypilot installed")
    try:
        results = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise InputError(f"SkyPilot's check with {python} gave no answer (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-500:]}") from e
    bad = [r for r in results if not r["ok"]]
    if bad:
        raise InputError("SkyPilot refuses: " + "; ".join(f"{r['path']}: {r['error']}" for r in bad))
    return results
