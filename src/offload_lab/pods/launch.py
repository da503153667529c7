"""``offload-lab pod launch``: a plan's pods launched through SkyPilot's Python API, followed, their runs brought home
as each finishes, a lost pod launched again for what it had left, the pods taken down, every launch's cost recorded,
and the data merged.

SkyPilot is never imported here: every call goes through :class:`Adapter`, which runs ``sky_adapter.py`` with
SkyPilot's interpreter (``.venvs/sky`` or ``--sky-python``), one process per call. The tests replace SkyPilot behind
that boundary with a recorder that runs each task's ``run`` script in a work directory laid out as SkyPilot lays it;
no cloud has run it yet, so the first real launch is its real test (docs/runbook.md).

Per pod (one thread each):

1. ``launch`` the task (a managed job when the stack rents spot: SkyPilot itself replaces a preempted pod), with the
   launcher's safety net: the pod goes down on its own after ``pod.autodown_idle_minutes`` idle;
2. ``tail`` its log: the campaign runs with ``--json``, so each line is a progress event, shown as one line with the
   cluster's name; when an experiment is done the pod's data is fetched (``rsync`` into
   ``<plan dir>/<cluster>/data/``; a relaunch's into ``<cluster>-r<N>/data/``, so no launch's ledger overwrites
   another's);
3. when the log ends: ``status``, a last fetch, ``down``. A pod that is gone before its job ended (preempted) or whose
   job did not end is launched again, same cluster name, with only what its fetched data does not hold yet
   (:mod:`offload_lab.pods.resume`), up to ``relaunches`` times. A job that ended with a failed experiment is not
   relaunched: its failure is data, named in the summary.

Then ``cost_report``: one ledger ``pod`` line per launch (a relaunch under the same name is its own line), written
with the merge (:mod:`offload_lab.pods.merge`). Every step is appended to ``<plan dir>/launches.jsonl``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from offload_lab.campaigns.runner import Campaign
from offload_lab.core import runs
from offload_lab.core.errors import InputError, OffloadLabError
from offload_lab.pods import resume
from offload_lab.pods import skypilot as sp
from offload_lab.pods.plan import PodPart, PodPlan

ADAPTER = Path(__file__).with_name("sky_adapter.py")
LAUNCHES = "launches.jsonl"
REMOTE_DATA = "~/sky_workdir/data"  # where the task's workdir puts the checkout's data/ (SkyPilot: ~/sky_workdir)
RESULT, ERROR = "@@result ", "@@error "
SUCCEEDED = "SUCCEEDED"
ENDED_FAILED = ("FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED")


class LaunchError(OffloadLabError):
    """SkyPilot refused or failed a call (launch, tail, down): the message names the cluster and SkyPilot's error."""

    exit_code = 3


@dataclass
class Adapter:
    """SkyPilot's Python API, one call per process of SkyPilot's own interpreter."""

    python: Path
    env: dict[str, str] | None = None

    def call(self, op: str, args: dict[str, Any], on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
        if not self.python.exists():
            raise InputError(f"SkyPilot's environment {self.python} does not exist: `make sky-env` creates "
                             f".venvs/sky, or give --sky-python for an interpreter with skypilot installed")
        proc = subprocess.Popen([str(self.python), str(ADAPTER), op, json.dumps(args)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1, env=self.env)
        answer: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            if line.startswith(RESULT):
                answer = json.loads(line[len(RESULT):])
            elif line.startswith(ERROR):
                error = json.loads(line[len(ERROR):])
            elif on_line is not None:
                on_line(line)
        rc = proc.wait()
        if rc == 3:
            raise InputError(f"SkyPilot is not installed for {self.python}: `make sky-env`, or give --sky-python "
                             "for an interpreter with skypilot installed")
        if error is not None or answer is None:
            what = (error or {}).get("error") or f"no answer (exit {rc})"
            raise LaunchError(f"SkyPilot {op} {args.get('cluster', '')}: {what}".replace("  ", " "))
        return answer


@dataclass
class Launch:
    """One launch of one cluster: what it ran, where its data came back to, how it ended."""

    cluster: str
    number: int
    part: PodPart
    task: Path
    data: Path
    managed: bool
    job_id: int | None = None
    outcome: str = "launching"
    error: str | None = None
    experiments: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchReport:
    launches: list[Launch]
    cost_report: list[dict[str, Any]]

    def lost(self) -> list[Launch]:
        return [ln for ln in self.launches if ln.outcome != "succeeded"]


def data_dir(plan_dir: Path, cluster: str, number: int) -> Path:
    """Where a launch's data comes back: ``<cluster>/data`` for the first, ``<cluster>-r<N>/data`` for relaunch N."""
    return plan_dir / (cluster if number == 0 else f"{cluster}-r{number}") / "data"


def fetched_roots(plan_dir: Path, cluster: str) -> list[Path]:
    """Every launch's data folder of this cluster, in launch order (what ``pod merge`` reads)."""
    roots = [data_dir(plan_dir, cluster, 0)]
    n = 1
    while data_dir(plan_dir, cluster, n).parent.is_dir():
        roots.append(data_dir(plan_dir, cluster, n))
        n += 1
    return [r for r in roots if r.is_dir()]


class _Printer:
    """Lines from every pod's thread, each whole and named by its cluster."""

    def __init__(self, log: Callable[[str], None]):
        self._log, self._lock = log, threading.Lock()

    def __call__(self, cluster: str, text: str) -> None:
        with self._lock:
            self._log(f"[{cluster}] {text}")


def progress_text(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """A pod's log line as the launcher shows it (None: not shown), and its progress event if it is one."""
    try:
        ev = json.loads(line)
    except ValueError:
        return line, None
    if not isinstance(ev, dict) or "event" not in ev:
        return line, None
    kind = ev["event"]
    if kind == "experiment":
        return f"{ev.get('experiment')}: started ({ev.get('cells')} cells)", ev
    if kind == "count":
        who = f"{ev['experiment']}: " if ev.get("experiment") else ""
        return f"{who}{ev.get('label')}: {ev.get('done')}/{ev.get('total')} {ev.get('unit')}", ev
    if kind in ("done", "skipped"):
        extra = f" after {ev['seconds']:.0f} s" if isinstance(ev.get("seconds"), (int, float)) else ""
        why = f": {ev.get('error') or ev.get('reason')}" if ev.get("error") or ev.get("reason") else ""
        return f"{ev.get('experiment')}: {ev.get('outcome')}{extra}{why}", ev
    if kind == "summary":
        return f"campaign {'ok' if ev.get('ok') else 'ended with failures'}", ev
    if kind == "log":
        return str(ev.get("text")), ev
    return None, ev  # cell events: the counts say enough


class PodLauncher:
    """Drives every part of a plan; see the module docstring."""

    def __init__(self, plan_dir: Path, plan: PodPlan, campaign: Campaign, spec: Any, opts: sp.TaskOptions,
                 adapter: Adapter, log: Callable[[str], None] = print, relaunches: int = 2, keep_up: bool = False):
        self.plan_dir, self.plan, self.campaign, self.spec, self.opts = plan_dir, plan, campaign, spec, opts
        self.adapter, self.relaunches, self.keep_up = adapter, relaunches, keep_up
        self.say = _Printer(log)
        self.launches: list[Launch] = []
        self._lock = threading.Lock()
        pod = sp.pod_of(spec, plan.stack_file)
        self.managed = pod.use_spot
        self.idle_minutes = pod.autodown_idle_minutes

    # -- the record ---------------------------------------------------------------------------------------------

    def _record(self, launch: Launch, event: str, **facts: Any) -> None:
        line = {"event": event, "cluster": launch.cluster, "launch": launch.number, "at": runs.utc_now(),
                "job_id": launch.job_id, "only": launch.part.only, "repeat_boots": launch.part.repeat_boots,
                "task": launch.task.name, **facts}
        with self._lock, open(self.plan_dir / LAUNCHES, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    # -- one pod ------------------------------------------------------------------------------------------------

    def _task(self, part: PodPart, number: int) -> Path:
        path = self.plan_dir / (f"{part.cluster}.yaml" if number == 0 else f"{part.cluster}.r{number}.yaml")
        if number > 0 or not path.is_file():
            path.write_text(sp.task_yaml(sp.task_dict(self.plan, part, self.spec, self.campaign, self.opts)),
                            encoding="utf-8")
        return path

    def _bucket(self, cluster: str) -> dict[str, str] | None:
        """Where a managed job's pod copies its data (the task's bucket mount, sp.REMOTE_OUT)."""
        if not self.managed or not self.opts.bucket:
            return None
        scheme = {"s3": "s3", "gcs": "gs"}.get(self.opts.store, self.opts.store)
        return {"store": self.opts.store,
                "url": f"{scheme}://{self.opts.bucket}/{self.plan.plan_id}/{cluster}/{self.plan.campaign}/"}

    def _fetch(self, launch: Launch) -> bool:
        try:
            ans = self.adapter.call("fetch", {"cluster": launch.cluster,
                                              "remote": f"{REMOTE_DATA}/{self.plan.campaign}",
                                              "local": str(launch.data / self.plan.campaign),
                                              "bucket": self._bucket(launch.cluster)})
        except LaunchError as e:
            ans = {"ok": False, "error": str(e)}
        if not ans.get("ok"):
            self.say(launch.cluster, f"fetch failed: {ans.get('error')}")
        return bool(ans.get("ok"))

    def _follow(self, launch: Launch) -> None:
        def on_line(line: str) -> None:
            text, ev = progress_text(line)
            if text:
                self.say(launch.cluster, text)
            if ev and ev.get("event") in ("done", "skipped") and ev.get("experiment"):
                launch.experiments[str(ev["experiment"])] = str(ev.get("outcome"))
                if ev.get("event") == "done":
                    self._fetch(launch)  # each run home as soon as it is finished

        try:
            self.adapter.call("tail", {"cluster": launch.cluster, "job_id": launch.job_id, "managed": self.managed},
                              on_line=on_line)
        except LaunchError as e:
            self.say(launch.cluster, f"log ended: {e}")

    def _one(self, part: PodPart, number: int) -> Launch:
        task = self._task(part, number)
        launch = Launch(cluster=part.cluster, number=number, part=part, task=task,
                        data=data_dir(self.plan_dir, part.cluster, number), managed=self.managed)
        with self._lock:
            self.launches.append(launch)
        what = "the whole campaign" if part.only is None else ",".join(part.only)
        self.say(part.cluster, f"launch {number}: {what}" + (f", {part.repeat_boots} boot(s)" if part.repeat_boots
                                                               else ""))
        self._record(launch, "launch")
        try:
            ans = self.adapter.call("launch", {"task": str(task), "cluster": part.cluster, "managed": self.managed,
                                               "down": True, "idle_minutes": self.idle_minutes,
                                               "secrets": self.opts.secrets},
                                    on_line=lambda s: self.say(part.cluster, s))
        except LaunchError as e:
            launch.outcome, launch.error = "launch_failed", str(e)
            self._record(launch, "ended", outcome=launch.outcome, error=launch.error)
            self._down(launch)  # SkyPilot keeps a cluster whose setup failed, billed: take it down
            return launch
        launch.job_id = ans.get("job_id")
        self._record(launch, "launched")
        self._follow(launch)
        try:
            st = self.adapter.call("status", {"cluster": part.cluster, "job_id": launch.job_id,
                                              "managed": self.managed})
        except LaunchError as e:
            st = {"cluster_status": None, "job_status": None, "error": str(e)}
        up = st.get("cluster_status") is not None
        if up or self.managed:
            self._fetch(launch)
        job = st.get("job_status")
        ended = up or self.managed  # a managed job's status is the controller's, whatever became of its pod
        launch.outcome = ("succeeded" if job == SUCCEEDED else "failed" if ended and job in ENDED_FAILED
                          else "lost")
        self._record(launch, "ended", outcome=launch.outcome, cluster_status=st.get("cluster_status"),
                     job_status=job, experiments=launch.experiments)
        self.say(part.cluster, f"launch {number} {launch.outcome} (cluster {st.get('cluster_status') or 'gone'}, "
                               f"job {job or 'unknown'})")
        if up:
            self._down(launch)
        return launch

    def _down(self, launch: Launch) -> None:
        if self.keep_up:
            self.say(launch.cluster, f"left up (--keep-up): `sky down -y {launch.cluster}` when done")
            return
        try:
            self.adapter.call("down", {"cluster": launch.cluster, "job_id": launch.job_id, "managed": self.managed})
            self._record(launch, "down")
            self.say(launch.cluster, "down")
        except LaunchError as e:
            self.say(launch.cluster, f"could not take it down, do it by hand (`sky down -y {launch.cluster}`): {e}")
            self._record(launch, "down_failed", error=str(e))

    def drive(self, part: PodPart, start: int = 0, first: PodPart | None = None) -> None:
        """Launch ``first`` (default: the plan's ``part``) as launch number ``start``, and again, for what the plan's
        part still has left, while it is lost."""
        todo: PodPart | None = first or part
        for number in range(start, start + self.relaunches + 1):
            if number > start:
                todo = resume.remaining(self.campaign, self.plan, part, fetched_roots(self.plan_dir, part.cluster))
                if todo is None:
                    self.say(part.cluster, "everything it was to run is in its data: not launched again")
                    return
            assert todo is not None
            launch = self._one(todo, number)
            if launch.outcome != "lost":
                return
        self.say(part.cluster, f"lost {self.relaunches + 1} times: giving up; `offload-lab pod launch "
                               f"{self.plan_dir}` launches what is left")

    def run(self, parts: list[tuple[PodPart, PodPart, int]]) -> LaunchReport:
        """Every (plan part, what to launch, launch number) at once, a thread each; then the launcher's costs."""
        threads = [threading.Thread(target=self.drive, args=(p, n, first), name=p.cluster, daemon=True)
                   for p, first, n in parts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report = self.adapter.call("cost_report", {"days": 30})["records"]
        (self.plan_dir / "cost-report.json").write_text(json.dumps(report, indent=1, default=str) + "\n",
                                                        encoding="utf-8")
        return LaunchReport(launches=sorted(self.launches, key=lambda ln: (ln.cluster, ln.number)),
                            cost_report=report)


def next_launches(plan_dir: Path, campaign: Campaign, plan: PodPlan) -> list[tuple[PodPart, PodPart, int]]:
    """(plan part, what to launch, launch number) for every part with work left: a part never launched as it is,
    a part launched before (``launches.jsonl``) with what its fetched data does not hold yet."""
    numbers: dict[str, int] = {}
    path = plan_dir / LAUNCHES
    if path.is_file():
        for e in runs.read_events(path):
            if e.get("event") == "launch":
                numbers[str(e["cluster"])] = max(numbers.get(str(e["cluster"]), -1), int(e["launch"]))
    out = []
    for part in plan.parts:
        if part.cluster not in numbers:
            out.append((part, part, 0))
            continue
        left = resume.remaining(campaign, plan, part, fetched_roots(plan_dir, part.cluster))
        if left is not None:
            out.append((part, left, numbers[part.cluster] + 1))
    return out
