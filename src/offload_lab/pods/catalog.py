"""Where SkyPilot could place a pod, offline: rows of SkyPilot's own hosted catalog (``catalogs/v8/<cloud>/vms.csv``
of skypilot-org/skypilot-catalog, the files SkyPilot's optimizer reads), shipped as a snapshot in
``resources/skypilot_catalog/`` with each file's source and sha256 (``snapshot.json``; a file whose sha256 differs is
refused). ``pod plan --check`` prints, per pod and cloud of the snapshot, the cheapest instance that meets the stack's
``pod:`` request, as SkyPilot matches it (accelerator name and count exactly; ``memory``/``cpus`` "N+" at least N,
"N" exactly N, in GiB and vCPUs), and refuses a request no row of a cloud it may use can meet.

The snapshot is a subset: a cloud or accelerator it does not hold is reported as not checked, never refused.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from offload_lab.core.errors import InputError
from offload_lab.server.multinode import PodSpec

SNAPSHOT_DIR = Path(__file__).resolve().parents[1] / "resources" / "skypilot_catalog"
SNAPSHOT_FILE = "snapshot.json"


@dataclass(frozen=True)
class Offer:
    cloud: str
    instance: str
    region: str
    vcpus: float
    memory_gib: float
    price: float  # one node, an hour, USD (the catalog's Price, or SpotPrice for spot)
    nodes: int

    @property
    def total(self) -> float:
        return round(self.price * self.nodes, 4)


def load_snapshot(folder: Path = SNAPSHOT_DIR) -> dict[str, list[dict[str, str]]]:
    """cloud -> its rows; InputError when a file is missing or is not the one snapshot.json records."""
    meta = json.loads((folder / SNAPSHOT_FILE).read_text(encoding="utf-8"))
    out = {}
    for cloud, f in meta["files"].items():
        path = folder / f["file"]
        data = path.read_bytes() if path.is_file() else b""
        if hashlib.sha256(data).hexdigest() != f["sha256"]:
            raise InputError(f"catalog snapshot {path} is missing or changed (sha256 not {f['sha256']} as "
                             f"{folder / SNAPSHOT_FILE} records); restore it from {f['source']}")
        out[cloud] = list(csv.DictReader(data.decode("utf-8").splitlines()))
    return out


def _meets(request: str | None, have: float) -> bool:
    if not request:
        return True
    text = str(request).strip()
    if text.endswith("+"):
        return have >= float(text[:-1])
    return have == float(text)


def _cloud_of(infra: str | None) -> str | None:
    return infra.split("/")[0].lower() if infra else None


def place(pod: PodSpec, snapshot: dict[str, list[dict[str, str]]] | None = None
          ) -> tuple[dict[str, Offer | None], list[str]]:
    """Per cloud of the snapshot the pod may use: the cheapest offer that meets it (None: the cloud has the
    accelerator at that count but no row meets the memory or cpus asked), and the clouds not checked."""
    snap = load_snapshot() if snapshot is None else snapshot
    want = _cloud_of(pod.infra)
    clouds = [c for c in snap if want in (None, c)]
    offers: dict[str, Offer | None] = {}
    for cloud in clouds:
        rows = [r for r in snap[cloud] if r["AcceleratorName"] == pod.accelerator
                and float(r["AcceleratorCount"] or 0) == pod.count]
        if not rows:
            continue  # this accelerator at this count is not in the snapshot: not checked
        fits = [r for r in rows if _meets(pod.memory, float(r["MemoryGiB"])) and _meets(pod.cpus, float(r["vCPUs"]))]
        if not fits:
            offers[cloud] = None
            continue
        key = "SpotPrice" if pod.use_spot else "Price"
        best = min(fits, key=lambda r: float(r[key] or "inf"))
        offers[cloud] = Offer(cloud, best["InstanceType"], best["AvailabilityZone"] or best["Region"],
                              float(best["vCPUs"]), float(best["MemoryGiB"]), float(best[key]), pod.nodes)
    unchecked = [c for c in ([want] if want else []) if c not in snap]
    return offers, unchecked


def check(pod: PodSpec, stack_file: str, snapshot: dict[str, list[dict[str, str]]] | None = None
          ) -> dict[str, Offer | None]:
    """The offers; InputError when every cloud of the snapshot that has the accelerator refuses the request and the
    pod may use no other (its ``infra`` names one of them, or the snapshot's clouds are all it could be checked
    against)."""
    snap = load_snapshot() if snapshot is None else snapshot
    offers, _ = place(pod, snap)
    if offers and all(o is None for o in offers.values()):
        clouds = ", ".join(offers)
        rows = [r for c in offers for r in snap[c] if r["AcceleratorName"] == pod.accelerator
                and float(r["AcceleratorCount"] or 0) == pod.count]
        have = sorted({(float(r["MemoryGiB"]), float(r["vCPUs"])) for r in rows})
        raise InputError(f"stack file {stack_file}: no {pod.count} x {pod.accelerator} instance in SkyPilot's "
                         f"catalog ({clouds}) meets memory {pod.memory or 'any'} and cpus {pod.cpus or 'any'}: it "
                         f"has " + "; ".join(f"{m:g} GiB, {c:g} vCPUs" for m, c in have)
                         + ". Lower pod.memory/pod.cpus to what one of them has, or name another infra")
    return offers
