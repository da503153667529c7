"""`pod plan --check` places each pod offline from a snapshot of SkyPilot's own catalog rows
(resources/skypilot_catalog, each file's sha256 and source recorded), and refuses a request no row can meet; the
matching is checked against SkyPilot's own catalog code over the same rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from offload_lab.cli.main import main
from offload_lab.core.errors import InputError
from offload_lab.pods import catalog
from offload_lab.server import stack as stackmod

ROOT = Path(__file__).resolve().parents[1]
SKY_PY = ROOT / ".venvs" / "sky" / "bin" / "python"


def test_the_study_pod_is_placed_on_runpod_with_its_price():
    pod = stackmod.load_stack(ROOT / "configs/stacks/study-pod.yaml").spec.pod
    offers = catalog.check(pod, "study-pod.yaml")
    assert offers["runpod"].instance == "2x_RTXPRO6000_SECURE" and offers["runpod"].price == 4.18
    assert offers["runpod"].memory_gib == 250.0
    # B300 is not in the snapshot: not checked, not refused
    b300 = stackmod.load_stack(ROOT / "configs/stacks/study-b300.yaml").spec.pod
    assert catalog.check(b300, "study-b300.yaml") == {}


def test_a_request_no_instance_meets_is_refused_before_anything_is_written(tmp_path, capsys):
    """Before: memory 256+ could not be placed on RunPod (250 GiB) and `--check` checked only the schema."""
    from pod_helpers import pod_checkout

    repo = pod_checkout(tmp_path, experiments="a", pods={"fake": {
        "accelerator": "RTXPRO6000", "count": 2, "disk_gib": 100, "memory": "256+", "infra": "runpod"}})
    code = main(["pod", "plan", str(repo / "configs/campaigns/camp.yaml"), "--check", "--out", str(tmp_path / "p")])
    assert code == 2 and not (tmp_path / "p").exists()
    err = capsys.readouterr().err
    assert "no 2 x RTXPRO6000 instance in SkyPilot's catalog (runpod) meets memory 256+" in err
    assert "250 GiB, 28 vCPUs" in err


def test_a_changed_snapshot_is_refused(tmp_path):
    copy = tmp_path / "snap"
    shutil.copytree(catalog.SNAPSHOT_DIR, copy)
    (copy / "runpod_vms.csv").write_text((copy / "runpod_vms.csv").read_text().replace("4.18", "0.18"))
    with pytest.raises(InputError, match="missing or changed"):
        catalog.load_snapshot(copy)
    meta = json.loads((catalog.SNAPSHOT_DIR / catalog.SNAPSHOT_FILE).read_text())
    assert meta["files"]["runpod"]["source"].startswith("https://github.com/skypilot-org/skypilot-catalog/")


@pytest.mark.skipif(not SKY_PY.exists(), reason=f"no SkyPilot environment at {SKY_PY}: `make sky-env` creates it")
def test_matching_is_skypilots_own(tmp_path):
    """SkyPilot's catalog code (sky/catalog/common.py) over the snapshot's rows picks what catalog.place picks."""
    code = ("import json, sys, pandas as pd\n"
            "from sky.catalog import common\n"
            "df = pd.read_csv(sys.argv[1])\n"
            "out = {}\n"
            "for mem in ('256+', '250+', '250', None):\n"
            "    types, _ = common.get_instance_type_for_accelerator_impl(df=df, acc_name='RTXPRO6000', acc_count=2,\n"
            "                                                             memory=mem)\n"
            "    out[str(mem)] = types or []\n"
            "print(json.dumps(out))\n")
    env = {**os.environ, "HOME": str(tmp_path), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    res = subprocess.run([str(SKY_PY), "-c", code, str(catalog.SNAPSHOT_DIR / "runpod_vms.csv")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    theirs = json.loads(res.stdout.strip().splitlines()[-1])
    snap = catalog.load_snapshot()
    pod = stackmod.load_stack(ROOT / "configs/stacks/study-pod.yaml").spec.pod
    for mem, types in theirs.items():
        offers, _ = catalog.place(pod.model_copy(update={"memory": None if mem == "None" else mem,
                                                         "infra": "runpod"}), snap)
        ours = [] if offers.get("runpod") is None else [offers["runpod"].instance]
        assert ours == types[:1], (mem, ours, types)
    assert sys.version_info >= (3, 10)
