"""``campaign rehearse``: run a pod campaign here against an emulated pod, and say what would fail and what it costs.

A rehearsal runs the campaign's own notebooks, load generator and paper build; only the server is emulated
(:mod:`offload_lab.emulate.server`, timed by a pod model file, configs/pods/). In order:

1. the stack's install and plan steps as dry runs: for every stack the campaign names,
   :func:`offload_lab.server.install_checks.dry_run_checks` checks every file the install would use (pins, patch
   receipts, model revisions, the plans made from the header-only synthetic checkpoint, written in the format the
   patch reads and read back), and ``stack install --dry-run``'s script is kept;
2. an emulated stack per stack file: the same flags, arguments, environment and plans, with the lab environment's
   Python, the emulator's module, ``--pod-model FILE``, the synthetic checkpoint as the model and the dry run's plans;
3. a derived campaign file (stacks swapped, the rehearsal's name, the overrides file's parameters, the topology's GPU
   count dropped because the emulated pod has none, quality's reference side pointed at the emulated pod), written
   into the rehearsal's run, and the ordinary :func:`offload_lab.campaigns.runner.run_campaign` on it, one part at a
   time (the boots, then each experiment) so that one failure does not hide the others;
4. the rehearsal's own run (experiment ``rehearsal``): every step that would fail, each experiment's outcome and
   minutes, the cost on the real pod (:mod:`offload_lab.campaigns.rehearse_cost`), the emulated measurements beside
   the published figures, and the client's timing error against the emulated TPOT; then the paper, whose first page
   says it is a rehearsal and names the pod model.

Runs go to the campaign ``<name>-rehearsal`` (or the overrides file's ``campaign``) under the data root given, never
into the pod campaign's own directory.

Time is accelerated by ``time_scale`` (default :data:`DEFAULT_TIME_SCALE`; 1 is real time), only where the client's
clock still resolves it (:mod:`offload_lab.core.timescale`): a TTFT or TPOT above its floor is served
``floor + (w - floor) / S``, the floors set from the load generator's measured clock error (the newest clock check
under the repository's ``data/``, :func:`clock_floors`): the TPOT's at :data:`FLOOR_MARGIN` x its per-token p99, the
TTFT's at S x :data:`TTFT_MARGIN` x its median first-token error; without a clock check decode stays real. The factor, floors and their source are in ``rehearsal.json``, every run's manifest (``time_scale``) and the
emulated server's boot log. Every duration the rehearsal sets against the pod (comparison.csv, the predicted minutes
and cost, and the measured inputs of capacity and cost) is converted back to pod time once, from the record of the
run it comes from.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from offload_lab.campaigns import rehearse_cost, rehearse_report
from offload_lab.campaigns import runner as campaigns
from offload_lab.core import environment, inputs, paths, runs
from offload_lab.core.errors import InputError
from offload_lab.core.timescale import DEFAULT_TIME_SCALE, TimeScale
from offload_lab.emulate.podmodel import load_pod_model
from offload_lab.server import stack as stackmod

DEFAULT_POD_MODEL = "configs/pods/study-published.yaml"
EMULATOR_MODULE = "offload_lab.emulate.server"
EXPERIMENT = "rehearsal"
RECORD = "rehearsal.json"
WORK = ".rehearsal-work"  # under the data root: dry runs, plans, the synthetic checkpoint (not runs)
# The TPOT floor is this many times the clock's measured per-token p99 error: a served TPOT stays at least twice what
# the client can misplace a token by, at the worst calibrated level the campaign reaches.
FLOOR_MARGIN = 2.0
# A TTFT converted back carries the client's first-token error times S. TTFTs up to S x this x the measured median
# (p50) first-token error are served in real time, so that this error stays under 1/TTFT_MARGIN (2%) of any median
# TTFT that is converted back (the long prefills: 128K-260K-token prompts wait 14-45 s on the published pod).
TTFT_MARGIN = 50.0
# Without any clock check, TTFTs up to this are served in real time (and decode is not accelerated): above the
# first-token p99 error of every committed clock check of the deferred clients (data/bench/clock_check) at <= 64
# streams.
FALLBACK_TTFT_FLOOR_S = 0.1
CLOCK_CHECK = ("bench", "clock_check")  # campaign and experiment of the load generator's clock checks


class Overrides(BaseModel):
    """A file of overrides (configs/rehearsals/*.yaml): how a rehearsal shortens a campaign, never its notebooks."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    campaign: str | None = Field(None, description="the rehearsal's campaign name (default: <name>-rehearsal)")
    pod_model: str | None = Field(None, description="pod model file (default: configs/pods/study-published.yaml)")
    experiments: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="experiment -> parameters merged over the campaign file's (mappings merge, "
                                          "null removes a key, anything else replaces)")
    skip: list[str] = Field(default_factory=list, description="experiments the rehearsal leaves out")
    why: str = Field("", description="why the campaign is shortened (recorded)")
    ready_timeout_s: float = Field(120.0, gt=0, description="the emulated servers' ready timeout")


def max_streams(campaign: campaigns.Campaign) -> int:
    """The most requests the campaign's parameters run at once (streams, users), at least 1."""
    most = 1
    for e in campaign.spec.experiments:
        p = campaigns.experiment_params(campaign, e)
        for key in ("streams", "users"):
            v = p.get(key) if isinstance(p, dict) else None
            for x in (v if isinstance(v, list) else [v]):
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    most = max(most, int(x))
    return most


def clock_floors(root: Path, streams: int, factor: float,
                 margin: float = FLOOR_MARGIN) -> tuple[float, float | None, dict[str, Any]]:
    """(TTFT floor s, TPOT floor ms or None, source) from the newest ok clock check under ``root``/data: the worst
    p50 first-token and p99 per-token error of the deferred clients (w1, w2: the sweeps' parsing) at every rate and at
    every calibrated level up to the first one at or above ``streams``; the TPOT floor is ``margin`` x the per-token
    error, the TTFT floor ``factor`` x :data:`TTFT_MARGIN` x the first-token error."""
    import pandas as pd

    run = runs.latest_run(root / "data", *CLOCK_CHECK)
    if run is None or not (run / "summary.csv").is_file():
        return FALLBACK_TTFT_FLOOR_S, None, {
            "clock_check": None, "why": f"no clock check under {root / 'data'}: decode is not accelerated, TTFTs "
                                        f"up to FALLBACK_TTFT_FLOOR_S = {FALLBACK_TTFT_FLOOR_S} s are real"}
    t = pd.read_csv(run / "summary.csv")
    t = t[~t["client"].astype(str).str.endswith("-inline")]
    levels = sorted(set(int(x) for x in t["streams"]))
    top = next((x for x in levels if x >= streams), levels[-1])
    t = t[t["streams"] <= top]
    tok, first = float(t["token_error_ms_p99"].max()), float(t["first_token_error_ms_p50"].max())
    if not (math.isfinite(tok) and math.isfinite(first)):
        raise InputError(f"clock check {run} has no per-token or first-token p99 error to set the floors from; "
                         "run `offload-lab clock-check` again or pass --time-scale 1")
    return first * factor * TTFT_MARGIN / 1000.0, tok * margin, {
        "clock_check": str(run.relative_to(root)) if run.is_relative_to(root) else str(run),
        "columns": ["token_error_ms_p99", "first_token_error_ms_p50"], "clients": sorted(set(t["client"])),
        "tpot_floor": "margin x token_error_ms_p99_worst", "ttft_floor": "factor x ttft_margin x "
        "first_token_error_ms_p50_worst", "ttft_margin": TTFT_MARGIN,
        "levels": sorted(set(int(x) for x in t["streams"])), "campaign_max_streams": streams, "margin": margin,
        "token_error_ms_p99_worst": tok, "first_token_error_ms_p50_worst": first}


def time_scale(campaign: campaigns.Campaign, factor: float) -> TimeScale:
    if not (factor >= 1.0 and math.isfinite(factor)):
        raise InputError(f"--time-scale {factor:g}: give a factor of at least 1 (1 is real time)")
    if factor == 1.0:
        return TimeScale(why="real time (--time-scale 1)")
    ttft_floor, tpot_floor, source = clock_floors(campaign.root, max_streams(campaign), factor)
    return TimeScale(factor=factor, ttft_floor_s=ttft_floor, tpot_floor_ms=tpot_floor, floor_source=source,
                     why=f"the campaign as written takes longer here than a rehearsal should (about 85-90 min at the "
                         f"published pace for study-pod.yaml); waits are served {factor:g}x faster above floors set "
                         "from the client's measured clock error, and every duration set against the pod is "
                         "converted back")


@dataclass
class RehearsalResult:
    campaign: str
    data_root: Path
    run: Path
    record: dict[str, Any]
    paper: Any = None
    failures: list[dict[str, Any]] = field(default_factory=list)


def load_overrides(path: Path | str | None) -> Overrides:
    if path is None:
        return Overrides()
    try:
        return Overrides.model_validate(inputs.read_yaml(path, "rehearsal overrides file"))
    except ValidationError as e:
        raise inputs.pydantic_input_error(e, f"rehearsal overrides file {path}") from e


def _merge(base: Any, over: Any) -> Any:
    """``over`` on ``base``: mappings merge key by key, a null value removes its key (a regime left out), anything
    else replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = {**base, **{k: _merge(base.get(k), v) for k, v in over.items()}}
        return {k: v for k, v in out.items() if not (k in over and over[k] is None)}
    return copy.deepcopy(over)


# --- stacks ----------------------------------------------------------------------------------------------------------

def stack_files(campaign: campaigns.Campaign) -> list[Path]:
    """Every stack file the campaign starts a server from, in first-use order."""
    spec = campaign.spec
    names = [spec.stack] + [b.stack for b in spec.boots] + [e.stack for e in spec.experiments if e.needs_server]
    out: list[Path] = []
    for n in names:
        p = campaign.stack_path(n)
        if p is not None and p.resolve() not in out:
            out.append(p.resolve())
    return out


def emulated_stack(st: stackmod.Stack, pod_model: Path, checkpoint: Path, plans_dir: Path,
                   ready_timeout_s: float, scale: TimeScale | None = None) -> dict[str, Any]:
    """The stack file the rehearsal boots instead of ``st``: the same server flags, arguments, environment and plan
    choice; the emulator's module in the lab environment, the synthetic checkpoint, the dry run's plans."""
    data = st.spec.model_dump(mode="json")
    data["name"] = f"{st.spec.name}-emulated"
    data["description"] = f"emulated {st.spec.name} (pod model {pod_model.name}): {st.spec.description}"
    data["extends"] = None
    lab = st.root / ".venvs" / "lab" / "bin" / "python"
    data["python"] = str(lab if lab.exists() else Path(sys.executable))
    data["model"]["path"] = str(checkpoint)
    data["model"]["build"] = None
    server = data["server"]
    server["module"] = EMULATOR_MODULE
    server["args"] = (list(server.get("args") or []) + ["--pod-model", str(pod_model)]
                      + (scale.server_args() if scale is not None and scale.accelerated else []))
    server["ready_timeout_s"] = ready_timeout_s
    server["stop_timeout_s"] = 10.0
    server["probe"] = {**server.get("probe", {}), "timeout_s": 120.0, "grace_s": 5.0}
    server["cpus"] = None
    plans = data.get("plans")
    if plans:
        fmt = plans.get("format", "offload-lab")
        for name, f in plans["files"].items():
            f["path"] = str(plans_dir / f"{name}.json")
            if "served_path" in f:
                f["served_path"] = None if fmt == "offload-lab" else str(plans_dir / f"{name}.{fmt}.json")
    return data


def _dry_runs(stacks: list[Path], root: Path, work: Path, checkpoint: Path | None,
              log: Callable[[str], None]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Each stack's install script (``stack install --dry-run``) and the problems its dry run finds."""
    from offload_lab.server import install

    try:
        from offload_lab.server.install_checks import dry_run_checks
    except ImportError:  # before the dry-run checks exist, only the script is kept
        dry_run_checks = None
    out, problems = {}, []
    for path in stacks:
        st = stackmod.load_stack(path, root=root)
        where = work / "dry-run" / st.spec.name
        where.mkdir(parents=True, exist_ok=True)
        info: dict[str, Any] = {"stack": str(path), "workdir": str(where)}
        if st.spec.install is None:  # an environment made otherwise (the embedded stack's `make server-env`)
            info["script"] = None
        else:
            try:
                script = install.plan_install(st).render()
                (where / "install-dry-run.sh").write_text(script, encoding="utf-8")
                info["script"] = str(where / "install-dry-run.sh")
            except InputError as e:
                problems.append({"step": f"stack install --dry-run {path.name}", "level": "error", "message": str(e)})
        if dry_run_checks is not None:
            log(f"dry run of {path.name}: pins, patch receipts, model revisions, plans")
            found = dry_run_checks(st, where, checkpoint=checkpoint, log=log)
            for p in found:
                problems.append({"step": f"stack install {path.name}", **p.to_dict()})
            info["problems"] = [p.to_dict() for p in found]
        out[str(path)] = info
    return out, problems


def _checkpoint(campaign: campaigns.Campaign, cache: Path, log: Callable[[str], None]) -> Path:
    """The header-only synthetic checkpoint of the campaign's stack (its plans' dry_run_checkpoint), made once."""
    st = stackmod.load_stack(campaign.stack_path(None), root=campaign.root)
    plans = st.spec.plans
    spec = getattr(plans, "dry_run_checkpoint", None) if plans is not None else None
    spec = spec or "configs/checkpoints/synthetic-dsv41-flash-exl3.yaml"
    source = st.resolve(spec)
    if source.is_dir():
        return source
    target = cache / f"{source.stem}-{runs.sha256_file(source)[:12]}"
    if not (target / "model.safetensors.index.json").is_file():
        from offload_lab.fit import synthetic

        log(f"writing the header-only checkpoint {source.name} into {target}")
        tmp = target.with_name(target.name + ".partial")
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp)
        synthetic.write_checkpoint(synthetic.load_spec(source), tmp)
        tmp.rename(target)
    return target


# --- the derived campaign --------------------------------------------------------------------------------------------

def derived_campaign(campaign: campaigns.Campaign, name: str, swap: dict[Path, Path], over: Overrides) -> dict[str, Any]:
    data = inputs.read_yaml(campaign.file, "campaign file")
    data = copy.deepcopy(data)
    data["name"] = name
    data["description"] = f"rehearsal of {campaign.spec.name} against an emulated pod: {data.get('description', '')}"
    if data.get("stack"):
        data["stack"] = str(swap[campaign.stack_path(None).resolve()])
    for b in data.get("boots") or []:
        if b.get("stack"):
            b["stack"] = str(swap[campaign.stack_path(b["stack"]).resolve()])
    # The emulated pod has no GPUs: the GPU count the campaign expects is the real pod's (recorded, not checked).
    topo = dict(data.get("topology") or {})
    topo.pop("expect_gpus", None)
    data["topology"] = topo
    # Its sessions are not pod time: the ledger prices pod sessions; what the pod would cost is in rehearsal.json.
    data["ledger"] = False
    unknown = sorted((set(over.experiments) | set(over.skip)) - {e["experiment"] for e in data["experiments"]})
    if unknown:
        raise InputError(f"the overrides name experiments {unknown} that {campaign.file} does not have")
    kept = []
    for e in data["experiments"]:
        if e["experiment"] in over.skip:
            continue
        if e.get("stack"):
            e["stack"] = str(swap[campaign.stack_path(e["stack"]).resolve()])
        overridden = over.experiments.get(e["experiment"], {})
        params = _merge(e.get("parameters") or {}, overridden)
        # What a rehearsal changes is the experiment folder's to say (e.g. both quality sides on the emulated pod).
        adapt = rehearse_cost.declared(Path(e["notebook"]).stem, "rehearsal_parameters")
        e["parameters"] = adapt(params, overridden, campaign.spec.stack) if adapt else params
        kept.append(e)
    data["experiments"] = kept
    return data


# --- the rehearsal ---------------------------------------------------------------------------------------------------

def rehearse(campaign_file: Path | str, data_root: Path | str = paths.REHEARSALS_DIR,
             overrides_file: Path | str | None = None, pod_model: Path | str | None = None,
             paper: bool = True, paper_out: Path | str | None = None,
             log: Callable[[str], None] = print, progress: Any = None,
             time_scale_factor: float = DEFAULT_TIME_SCALE) -> RehearsalResult:
    started = time.monotonic()
    campaign = campaigns.load_campaign(campaign_file)
    campaigns.validate(campaign)
    if not campaign.spec.stack:
        raise InputError(f"campaign file {campaign.file} names no stack: a rehearsal emulates the pod its stack "
                         "describes; add `stack:`")
    root = campaign.root
    over = load_overrides(overrides_file)
    model_path = Path(pod_model or over.pod_model or DEFAULT_POD_MODEL)
    model_path = (model_path if model_path.is_absolute() else root / model_path).resolve()
    model = load_pod_model(model_path)
    scale = time_scale(campaign, float(time_scale_factor))
    if scale.accelerated:
        log(f"time scale {scale.factor:g}: TTFT above {scale.ttft_floor_s:g} s and "
            + ("decode kept real" if scale.tpot_floor_ms is None else f"TPOT above {scale.tpot_floor_ms:.2f} ms")
            + " served faster; every figure set against the pod is converted back")
    name = over.campaign or f"{campaign.spec.name}-rehearsal"
    runs.check_name("campaign", name)
    if name == campaign.spec.name:
        raise InputError(f"the rehearsal's campaign name {name!r} is the pod campaign's own; rehearsals never write "
                         "into its data: give the overrides file another `campaign`")
    data_root = Path(data_root)
    data_root = (data_root if data_root.is_absolute() else root / data_root)
    data_root.mkdir(parents=True, exist_ok=True)
    env = environment.capture_environment()
    run = runs.new_run(data_root, name, EXPERIMENT, {
        "campaign_file": str(campaign.file), "overrides": str(overrides_file) if overrides_file else None,
        "pod_model": str(model_path), "time_scale": scale.factor}, kind=EXPERIMENT, environment=env,
        time_scale=scale.record())
    # Outside the run directory: the synthetic checkpoint's shards are sparse but hundreds of GB long, and a run's
    # files are all hashed when it finishes.
    work = data_root / WORK / name / run.run_id
    work.mkdir(parents=True, exist_ok=True)
    # Scratch, never data: git must not pick up the checkpoint's sparse shards (288 GiB long, 25 MiB on disk).
    (data_root / WORK / ".gitignore").write_text("*\n", encoding="utf-8")
    failures: list[dict[str, Any]] = []
    try:
        ckpt = _checkpoint(campaign, data_root / WORK / "checkpoints", log)
        stacks = stack_files(campaign)
        dry, problems = _dry_runs(stacks, root, work, ckpt, log)
        failures += problems
        swap = {}
        for path in stacks:
            st = stackmod.load_stack(path, root=root)
            plans_dir = Path(dry[str(path)]["workdir"]) / "plans"
            target = run.file("stacks") / f"{st.spec.name}-emulated.yaml"
            target.parent.mkdir(exist_ok=True)
            target.write_text(yaml.safe_dump(emulated_stack(st, model_path, ckpt, plans_dir, over.ready_timeout_s,
                                                            scale),
                                             sort_keys=False), encoding="utf-8")
            swap[path] = target
        derived = run.file("campaign.yaml")
        derived.write_text(yaml.safe_dump(derived_campaign(campaign, name, swap, over), sort_keys=False),
                           encoding="utf-8")
        if overrides_file:
            run.file("overrides.yaml").write_bytes(Path(overrides_file).read_bytes())
        rehearsal = campaigns.load_campaign(derived, root=root)
        failures += rehearse_report.length_problems(rehearsal)
        parts = rehearse_report.run_parts(rehearsal, data_root, log, progress, scale)
        failures += [f for f in parts if f.get("level") == "error"]
        record = rehearse_report.build_record(
            campaign, rehearsal, model, model_path, over, overrides_file, data_root, parts, dry, failures,
            seconds=time.monotonic() - started, scale=scale)
        rehearse_report.write(run, record)
        run.finish("ok")
    except BaseException as e:
        run.finish("stopped" if isinstance(e, KeyboardInterrupt) else "failed", error=f"{type(e).__name__}: {e}")
        raise
    result = RehearsalResult(campaign=name, data_root=data_root, run=run.path, record=record, failures=failures)
    if paper:
        result.paper = rehearse_report.build_paper(name, data_root, root, paper_out, failures, log)
    return result
