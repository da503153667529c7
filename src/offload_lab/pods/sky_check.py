"""Run in SkyPilot's own environment (not offload-lab's): load each task YAML with SkyPilot's parser and print a JSON
summary per file. Exit 0: every file loads; 1: some file is refused (see "error"); 3: SkyPilot is not importable.
Contacts no cloud: sky.Task.from_yaml validates against sky/utils/schemas.py and builds Resources and Storage objects
offline. Imports nothing of offload-lab, so that it runs with any interpreter that has skypilot."""
import json
import sys
import time

t0 = time.monotonic()
try:
    import sky
except ImportError as e:  # pragma: no cover - exercised by the missing-SkyPilot test
    print(f"cannot import sky: {e}", file=sys.stderr)
    sys.exit(3)
imported = time.monotonic() - t0
out = []
for path in sys.argv[1:]:
    try:
        task = sky.Task.from_yaml(path)
        res = sorted(task.resources, key=str)
        out.append({
            "path": path, "ok": True, "sky_version": sky.__version__, "name": task.name,
            "num_nodes": task.num_nodes,
            "resources": [{"accelerators": r.accelerators, "disk_size": r.disk_size,
                           "image_id": r.image_id, "cloud": str(r.cloud) if r.cloud else None,
                           "use_spot": r.use_spot} for r in res],
            "setup": task.setup, "run": task.run, "envs": dict(task.envs),
            "secrets": sorted(getattr(task, "secrets", {}) or {}),
            # null-valued secrets are references, filled at launch by `sky launch --secret NAME`
            "secret_refs": sorted(r.name for r in getattr(task, "managed_secret_refs", []) or []),
            "workdir": task.workdir, "file_mounts": task.file_mounts or {},
            "storage_mounts": {k: {"name": v.name, "mode": v.mode.value}
                               for k, v in (task.storage_mounts or {}).items()},
        })
    except Exception as e:  # noqa: BLE001 - SkyPilot raises several kinds; all mean "refused"
        out.append({"path": path, "ok": False, "error": f"{type(e).__name__}: {e}"[:800]})
print(json.dumps({"import_s": round(imported, 2), "seconds": round(time.monotonic() - t0, 2)}), file=sys.stderr)
print(json.dumps(out, default=str))
sys.exit(0 if all(r["ok"] for r in out) else 1)
