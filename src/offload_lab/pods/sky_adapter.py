"""Run in SkyPilot's environment (not offload-lab's): one call into SkyPilot's Python API per process, for
``offload-lab pod launch`` (``pods/launch.py``). Imports nothing of offload-lab, so that any interpreter with
skypilot runs it; the launcher never imports ``sky`` itself (SkyPilot pins its own pydantic, pandas, sqlalchemy).

Usage: ``python sky_adapter.py OP JSON``. Whatever SkyPilot prints (provisioning, the job's log) goes to stdout as it
comes; the last line is ``@@result {...}`` (the call's answer) or ``@@error {...}`` with exit status 1.

Calls (SkyPilot 0.14.1's client SDK, sky/client/sdk.py and sky/jobs/client/sdk.py):

``launch``       ``sky.launch(task, cluster_name, down, idle_minutes_to_autostop)``, or for a task on spot
                 ``sky.jobs.launch(task, name)`` (a managed job: SkyPilot recovers it on a new pod when the old
                 one is preempted); the secrets the task names are filled from this process's environment
                 (``Task.update_secrets``), never written anywhere. Answer: ``job_id``.
``tail``         ``sky.tail_logs(cluster, job_id, follow=True)`` / ``sky.jobs.tail_logs(job_id=..., follow=True)``:
                 the job's log, line by line, until it ends. Answer: ``exit_code`` (SkyPilot's JobExitCode).
``status``       ``sky.status([cluster], refresh=FORCE)`` (SkyPilot's cache keeps a preempted cluster UP) and
                 ``sky.job_status(cluster, [job_id])``, or ``sky.jobs.queue``.
                 Answer: ``cluster_status`` (None: no such cluster, e.g. preempted and gone), ``job_status``.
``fetch``        ``rsync -a CLUSTER:REMOTE/ LOCAL/`` through the ssh entry SkyPilot writes for every cluster
                 (0.14.1 has no rsync-down in its SDK), or from the bucket (``aws s3 sync``, ``gsutil rsync``) for a
                 managed job. Answer: ``ok``, ``error``.
``down``         ``sky.down(cluster)`` / ``sky.jobs.cancel(job_ids=[job_id])``.
``live``         the plan's clusters still up (``sky.status`` refreshed) with their latest job (``sky.queue``), or its
                 managed jobs' states (``sky.jobs.queue``): what a resumed launcher re-attaches to.
``logs``         a job's log so far, or followed: ``sky.tail_logs`` / ``sky.jobs.tail_logs``.
``cost_report``  ``sky.cost_report(days)``, each record as ``sky cost-report -o json`` writes it (resources as
                 YAML config with secrets redacted, status as text: TERMINATED when gone).
"""
import json
import os
import re
import subprocess
import sys


def _status_text(s):
    return None if s is None else getattr(s, "value", str(s))


def _launch(sky, a):
    task = sky.Task.from_yaml(a["task"])
    present = {k: os.environ[k] for k in a.get("secrets", []) if os.environ.get(k)}
    if present:
        task.update_secrets(present)
    if a.get("managed"):
        job_ids, _ = sky.stream_and_get(sky.jobs.launch(task, name=a["cluster"]))
        return {"job_id": (job_ids or [None])[0], "managed": True}
    job_id, _ = sky.stream_and_get(sky.launch(task, cluster_name=a["cluster"], down=bool(a.get("down")),
                                              idle_minutes_to_autostop=a.get("idle_minutes")))
    return {"job_id": job_id, "managed": False}


def _tail(sky, a):
    if a.get("managed"):
        rc = sky.jobs.tail_logs(job_id=a["job_id"], follow=True)
    else:
        rc = sky.tail_logs(a["cluster"], a["job_id"], follow=True)
    return {"exit_code": rc}


def _status(sky, a):
    if a.get("managed"):
        recs = sky.get(sky.jobs.queue(refresh=False, skip_finished=False, job_ids=[a["job_id"]]))
        rec = recs[0] if recs else None
        return {"cluster_status": None, "job_status": _status_text(rec["status"]) if rec else None}
    # refreshed: without it SkyPilot answers from its cache, where a preempted cluster is still UP
    recs = sky.get(sky.status(cluster_names=[a["cluster"]], refresh=sky.StatusRefreshMode.FORCE))
    cluster = _status_text(recs[0]["status"]) if recs else None
    job = None
    if cluster is not None and a.get("job_id") is not None:
        job = _status_text(sky.get(sky.job_status(a["cluster"], [a["job_id"]])).get(a["job_id"]))
    return {"cluster_status": cluster, "job_status": job}


def _live(sky, a):
    """Which of the plan's clusters (or managed jobs) are still there, and their latest job."""
    out = {}
    if a.get("managed"):
        ids = [j for j in a.get("jobs", {}).values() if j is not None]
        recs = sky.get(sky.jobs.queue(refresh=False, skip_finished=False, job_ids=ids)) if ids else []
        by_id = {r["job_id"]: _status_text(r["status"]) for r in recs}
        for cluster, job_id in a.get("jobs", {}).items():
            out[cluster] = {"cluster_status": None, "job_id": job_id, "job_status": by_id.get(job_id)}
        return {"clusters": out}
    recs = sky.get(sky.status(cluster_names=a["clusters"], refresh=sky.StatusRefreshMode.FORCE))
    for rec in recs:
        jobs = sky.get(sky.queue(rec["name"], skip_finished=False))
        latest = max(jobs, key=lambda j: j["job_id"]) if jobs else None
        out[rec["name"]] = {"cluster_status": _status_text(rec["status"]),
                            "job_id": latest["job_id"] if latest else None,
                            "job_status": _status_text(latest["status"]) if latest else None}
    return {"clusters": out}


def _logs(sky, a):
    """A job's log so far (``follow`` false) or until it ends."""
    if a.get("managed"):
        rc = sky.jobs.tail_logs(job_id=a["job_id"], follow=bool(a.get("follow")))
    else:
        rc = sky.tail_logs(a["cluster"], a.get("job_id"), follow=bool(a.get("follow")))
    return {"exit_code": rc}


BUCKET_SYNC = {"s3": ["aws", "s3", "sync"], "gcs": ["gsutil", "-m", "rsync", "-r"]}


def _fetch(sky, a):
    os.makedirs(a["local"], exist_ok=True)
    if a.get("bucket"):  # from the bucket the pod copies to (a managed job's pod has no ssh entry of ours)
        store, url = a["bucket"]["store"], a["bucket"]["url"]
        if store not in BUCKET_SYNC:
            return {"ok": False, "error": f"fetching from a {store} bucket is not supported here; copy {url} by hand"}
        cmd = [*BUCKET_SYNC[store], url, a["local"].rstrip("/") + "/"]
    else:
        cmd = ["rsync", "-a", f"{a['cluster']}:{a['remote'].rstrip('/')}/", a["local"].rstrip("/") + "/"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return {"ok": proc.returncode == 0, "error": proc.stderr.strip()[-300:] or None}


def _down(sky, a):
    if a.get("managed"):
        sky.get(sky.jobs.cancel(job_ids=[a["job_id"]]))
    else:
        sky.get(sky.down(a["cluster"]))
    return {"down": True}


def _cost_report(sky, a):
    out = []
    for rec in sky.get(sky.cost_report(days=a.get("days"))):
        r = dict(rec)
        if r.get("resources") is not None and hasattr(r["resources"], "to_yaml_config"):
            r["resources"] = r["resources"].to_yaml_config(redact_secrets=True)
        r["status"] = _status_text(r.get("status")) or "TERMINATED"
        out.append(r)
    return {"records": out}


OPS = {"launch": _launch, "tail": _tail, "status": _status, "fetch": _fetch, "down": _down,
       "cost_report": _cost_report, "live": _live, "logs": _logs}


def main(argv):
    if len(argv) != 3 or argv[1] not in OPS:
        print(f"usage: sky_adapter.py {{{','.join(OPS)}}} JSON", file=sys.stderr)
        return 2
    try:
        import sky
    except ImportError as e:
        print("@@error " + json.dumps({"error": f"cannot import sky: {e}", "kind": "ImportError"}), flush=True)
        return 3
    try:
        result = OPS[argv[1]](sky, json.loads(argv[2]))
    except Exception as e:  # noqa: BLE001 - SkyPilot raises many kinds; the launcher reports each by name
        text = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(e).__name__}: {e}")  # SkyPilot colours its messages
        print("@@error " + json.dumps({"error": text[:800], "kind": type(e).__name__}), flush=True)
        return 1
    print("@@result " + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
