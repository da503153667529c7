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
3. when the log ends: ``status`` (refreshed: SkyPilot's cache keeps a preempted cluster UP), a last fetch, and
   ``down`` only once that fetch worked. Every fetch is tried ``FETCH_TRIES`` times, the wait doubling from
   ``FETCH_BACKOFF_S``; a cluster whose data still cannot be fetched, or whose job still runs, is left up (its
   autodown bounds the cost), said in capitals, and recorded (``left_up`` with the reason). A pod that is gone before
   its job ended (preempted) is launched again, same cluster name, with only what its fetched data does not hold yet
   (:mod:`offload_lab.pods.resume`), up to ``relaunches`` times. A job that ended with a failed experiment is not
   relaunched: its failure is data, named in the summary.

A resumed plan (``pod launch PLAN_DIR``) asks SkyPilot first (:meth:`PodLauncher.live`): a cluster still up, or a
managed job still there, is re-attached to (:meth:`PodLauncher.attach`: followed, fetched, taken down), never
launched over (SkyPilot would reuse it: setup again, a second job). ``max_cost`` stops launching once the launches of
this run have cost that much, and takes down what it launched, each after its data is home.

Then ``cost_report``: one ledger ``pod`` line per launch (a relaunch under the same name is its own line), written
with the merge (:mod:`offload_lab.pods.merge`). Every step is appended to ``<plan dir>/launches.jsonl``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from offload_lab.campaigns.runner import Campaign
from offload_lab.core import runs
from offload_lab.core.errors import InputError, OffloadLabError
from offload_lab.pods import resume
from offload_lab.pods import skypilot as sp
from offload_lab.pods.history import (LAUNCHES, LIVE_JOB, data_dir, fetched_roots, launch_history,  # noqa: F401
                                      next_launches)
from offload_lab.pods.plan import PodPart, PodPlan

ADAPTER = Path(__file__).with_name("sky_adapter.py")
REMOTE_DATA = "~/sky_workdir/data"  # where the task's workdir puts the checkout's data/ (SkyPilot: ~/sky_workdir)
RESULT, ERROR = "@@result ", "@@error "
SUCCEEDED = "SUCCEEDED"
FETCH_TRIES = 4
FOLLOW_TRIES = 5  # a log that ends while its job still runs (a dropped connection) is followed again
FETCH_BACKOFF_S = 10.0  # the wait after the first failed fetch, doubled after each
BUDGET_CHECK_S = 60.0  # with --max-cost: how often the launcher asks SkyPilot what the pods cost so far
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
    fetch_error: str | None = None
    left_up: str | None = None  # why the cluster was not taken down (its data is not home)
    experiments: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchReport:
    launches: list[Launch]
    cost_report: list[dict[str, Any]]

    def lost(self) -> list[Launch]:
        return [ln for ln in self.launches if ln.outcome != "succeeded"]

    def left_up(self) -> list[Launch]:
        return [ln for ln in self.launches if ln.left_up]


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
                 adapter: Adapter, log: Callable[[str], None] = print, relaunches: int = 2, keep_up: bool = False,
                 max_cost: float | None = None):
        self.plan_dir, self.plan, self.campaign, self.spec, self.opts = plan_dir, plan, campaign, spec, opts
        self.adapter, self.relaunches, self.keep_up, self.max_cost = adapter, relaunches, keep_up, max_cost
        self.say = _Printer(log)
        self.launches: list[Launch] = []
        self.started: list[Launch] = []  # launched by this run: what --max-cost counts and takes down
        self.stopping = False  # --max-cost reached: launch nothing more
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

    def _status(self, launch: Launch) -> dict[str, Any]:
        """The cluster and its job as SkyPilot has them now (refreshed from the cloud: its cache says UP for a pod
        preempted since)."""
        try:
            return self.adapter.call("status", {"cluster": launch.cluster, "job_id": launch.job_id,
                                                "managed": self.managed})
        except LaunchError as e:
            return {"cluster_status": None, "job_status": None, "error": str(e)}

    def _fetch(self, launch: Launch) -> bool:
        """The launch's data home, tried ``FETCH_TRIES`` times, waiting twice as long after each failure; stops
        early when the cluster is gone (nothing left to fetch from). Every failure is in launches.jsonl."""
        delay = FETCH_BACKOFF_S
        for attempt in range(1, FETCH_TRIES + 1):
            try:
                ans = self.adapter.call("fetch", {"cluster": launch.cluster,
                                                  "remote": f"{REMOTE_DATA}/{self.plan.campaign}",
                                                  "local": str(launch.data / self.plan.campaign),
                                                  "bucket": self._bucket(launch.cluster)})
            except LaunchError as e:
                ans = {"ok": False, "error": str(e)}
            if ans.get("ok"):
                launch.fetch_error = None
                return True
            launch.fetch_error = str(ans.get("error"))
            self._record(launch, "fetch_failed", error=launch.fetch_error, attempt=attempt, of=FETCH_TRIES)
            gone = not self.managed and self._status(launch).get("cluster_status") is None
            if gone or attempt == FETCH_TRIES:
                self.say(launch.cluster, f"fetch failed ({attempt} of {FETCH_TRIES} tries"
                                         f"{', the cluster is gone' if gone else ''}): {launch.fetch_error}")
                return False
            self.say(launch.cluster, f"fetch failed (try {attempt} of {FETCH_TRIES}), again in {delay:g} s: "
                                     f"{launch.fetch_error}")
            time.sleep(delay)
            delay *= 2
        return False

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

    def _new(self, part: PodPart, number: int, task: Path) -> Launch:
        launch = Launch(cluster=part.cluster, number=number, part=part, task=task,
                        data=data_dir(self.plan_dir, part.cluster, number), managed=self.managed)
        with self._lock:
            self.launches.append(launch)
        return launch

    def _one(self, part: PodPart, number: int) -> Launch:
        if self.over_budget():
            launch = self._new(part, number, self.plan_dir / f"{part.cluster}.yaml")
            launch.outcome, launch.error = "not_launched", f"--max-cost {self.max_cost} reached"
            self.say(part.cluster, f"not launched: {launch.error}")
            return launch
        task = self._task(part, number)
        launch = self._new(part, number, task)
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
        with self._lock:
            self.started.append(launch)
        self._record(launch, "launched")
        return self._finish(launch)

    def attach(self, part: PodPart, number: int, job_id: int | None) -> Launch:
        """A launch made earlier (by a launcher since stopped) whose cluster or managed job is still there: follow
        its job if it runs, fetch what it made, and take it down once that is home."""
        launch = self._new(part, number, self.plan_dir / (f"{part.cluster}.yaml" if number == 0 else
                                                          f"{part.cluster}.r{number}.yaml"))
        launch.job_id = job_id
        self.say(part.cluster, f"launch {number} still there (job {job_id}): re-attached, not launched again")
        self._record(launch, "attached")
        return self._finish(launch)

    def _finish(self, launch: Launch) -> Launch:
        """Follow the job to its end, bring its data home, and take the cluster down only once it is."""
        for _ in range(FOLLOW_TRIES):
            self._follow(launch)
            st = self._status(launch)
            if st.get("job_status") not in LIVE_JOB or self.stopping:
                break
            self.say(launch.cluster, f"the log stopped while job {launch.job_id} still runs: following it again")
        up = st.get("cluster_status") is not None
        home = self._fetch(launch) if up or self.managed else False
        job = st.get("job_status")
        ended = up or self.managed  # a managed job's status is the controller's, whatever became of its pod
        launch.outcome = ("succeeded" if job == SUCCEEDED else "failed" if ended and job in ENDED_FAILED
                          else "lost")
        if up and job in LIVE_JOB and not self.stopping and not self.keep_up:
            launch.left_up = (f"its job {launch.job_id} still runs and its log could not be followed; left up, it "
                              f"goes down on its own {self.idle_minutes} idle minutes after the job ends")
        elif up and not home and not self.keep_up:
            launch.left_up = (f"its data could not be fetched ({launch.fetch_error}); left up so that nothing it "
                              f"made is lost; it goes down on its own after {self.idle_minutes} idle minutes")
        self._record(launch, "ended", outcome=launch.outcome, cluster_status=st.get("cluster_status"),
                     job_status=job, experiments=launch.experiments, data_home=home, left_up=launch.left_up)
        where = st.get("cluster_status") or "gone"
        self.say(launch.cluster, f"launch {launch.number} {launch.outcome} (cluster {where}, job {job or 'unknown'})")
        if launch.left_up:
            self.say(launch.cluster, f"NOT TAKEN DOWN: {launch.left_up}. Fetch it by hand (`rsync -a "
                                     f"{launch.cluster}:{REMOTE_DATA}/{self.plan.campaign}/ "
                                     f"{launch.data / self.plan.campaign}/`) or run `offload-lab pod launch "
                                     f"{self.plan_dir}` again (it re-attaches), then `offload-lab pod down "
                                     f"{launch.cluster}`")
            self._record(launch, "left_up", why=launch.left_up)
        elif up:
            self._down(launch)
        return launch

    def _down(self, launch: Launch) -> None:
        if self.keep_up:
            self.say(launch.cluster, f"left up (--keep-up): `offload-lab pod down {launch.cluster}` when done")
            return
        try:
            self.adapter.call("down", {"cluster": launch.cluster, "job_id": launch.job_id, "managed": self.managed})
            self._record(launch, "down")
            self.say(launch.cluster, "down")
        except LaunchError as e:
            self.say(launch.cluster, f"could not take it down, do it by hand (`sky down -y {launch.cluster}`): {e}")
            self._record(launch, "down_failed", error=str(e))

    def spent(self) -> float:
        """What the launches of this run have cost so far, as SkyPilot prices them (0 when it cannot)."""
        try:
            report = self.adapter.call("cost_report", {"days": 30})["records"]
        except LaunchError:
            return 0.0
        mine = {ln.cluster for ln in self.started}
        return sum(float(r.get("total_cost") or 0) for r in report if _base_name(r.get("name"), mine) in mine)

    def _watch_budget(self, done: threading.Event) -> None:
        """--max-cost while the pods run: once reached, every pod this run launched that is still running has its
        data fetched and is taken down (a pod whose data cannot be fetched is left up, as at any teardown)."""
        while not done.wait(BUDGET_CHECK_S):
            if not self.over_budget():
                continue
            self.stopping = True
            for launch in [ln for ln in self.started if ln.outcome == "launching"]:
                self.say(launch.cluster, f"--max-cost {self.max_cost} reached ({self.spent():.2f} spent): its "
                                         "data home, then down")
                self._record(launch, "budget_stop", spent=self.spent(), max_cost=self.max_cost)
                if self._fetch(launch):
                    self._down(launch)
                else:
                    launch.left_up = f"--max-cost reached and its data could not be fetched ({launch.fetch_error})"
                    self._record(launch, "left_up", why=launch.left_up)
            return

    def over_budget(self) -> bool:
        if self.stopping:
            return True
        return self.max_cost is not None and bool(self.started) and self.spent() >= self.max_cost

    def drive(self, part: PodPart, start: int = 0, first: PodPart | None = None,
              attach: dict[str, Any] | None = None) -> None:
        """Launch ``first`` (default: the plan's ``part``) as launch number ``start`` (or, with ``attach``, take up
        the launch still running), and again, for what the plan's part still has left, while it is lost."""
        todo: PodPart | None = first or part
        for number in range(start, start + self.relaunches + 1):
            if number > start:
                todo = resume.remaining(self.campaign, self.plan, part, fetched_roots(self.plan_dir, part.cluster))
                if todo is None:
                    self.say(part.cluster, "everything it was to run is in its data: not launched again")
                    return
            assert todo is not None
            if attach is not None and number == start:
                launch = self.attach(todo, number, attach.get("job_id"))
            else:
                launch = self._one(todo, number)
            if launch.outcome != "lost" or launch.left_up:
                return  # ended, failed as data, or still up: never a second pod while the first holds its runs
        self.say(part.cluster, f"lost {self.relaunches + 1} times: giving up; `offload-lab pod launch "
                               f"{self.plan_dir}` launches what is left")

    def check_tasks(self, parts: list[tuple[PodPart, PodPart, int]]) -> None:
        """Refuse, before anything is rented, a task file already in the plan folder (a plan written by an older
        offload-lab) whose setup does not install every stack its pod boots."""
        import yaml

        for part, _, number in parts:
            path = self.plan_dir / f"{part.cluster}.yaml"
            if number != 0 or not path.is_file():
                continue
            task = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            missing = sp.missing_installs(task, sp.stacks_for(self.plan, part, self.spec, self.campaign, self.opts))
            if missing:
                raise InputError(f"task file {path} boots {', '.join(missing)} and its setup does not install it: "
                                 "remove the task file (`pod launch` writes it again from the plan) or plan anew")

    def live(self) -> dict[str, dict[str, Any]]:
        """The plan's clusters (or managed jobs) SkyPilot still has, by cluster name, with their latest job."""
        jobs = {c: h["job_id"] for c, h in launch_history(self.plan_dir).items() if h.get("job_id") is not None}
        ans = self.adapter.call("live", {"clusters": [p.cluster for p in self.plan.parts], "managed": self.managed,
                                         "jobs": jobs})
        return ans.get("clusters") or {}

    def run(self, parts: list[tuple[PodPart, PodPart, int, dict[str, Any] | None]]) -> LaunchReport:
        """Every (plan part, what to launch, launch number, launch to re-attach to) at once, a thread each; then the
        launcher's costs. With --max-cost, once it is reached nothing more is launched and what this run launched
        is taken down (after its data is home)."""
        self.check_tasks([(p, w, n) for p, w, n, a in parts if a is None])
        threads = [threading.Thread(target=self.drive, args=(p, n, first, attach), name=p.cluster, daemon=True)
                   for p, first, n, attach in parts]
        for t in threads:
            t.start()
        done = threading.Event()
        watcher = None
        if self.max_cost is not None:
            watcher = threading.Thread(target=self._watch_budget, args=(done,), name="budget", daemon=True)
            watcher.start()
        for t in threads:
            t.join()
        done.set()
        if watcher is not None:
            watcher.join()
        report = self.adapter.call("cost_report", {"days": 30})["records"]
        (self.plan_dir / "cost-report.json").write_text(json.dumps(report, indent=1, default=str) + "\n",
                                                        encoding="utf-8")
        return LaunchReport(launches=sorted(self.launches, key=lambda ln: (ln.cluster, ln.number)),
                            cost_report=report)


def _base_name(name: Any, clusters: set[str]) -> str | None:
    """The plan's cluster a SkyPilot cluster name is: itself, or a managed job's ``<name>-<job_id>``."""
    name = str(name)
    if name in clusters:
        return name
    base, _, job = name.rpartition("-")
    return base if job.isdigit() and base in clusters else None
