"""`offload-lab pod plan`: SkyPilot tasks for the study's pod, its B300 baseline, the repeat-boot campaign and a
2-node Ray server, each loaded with SkyPilot's own parser; and the bad inputs, exit 2.

SkyPilot is never imported here: its parser runs in its own environment (`make sky-env` makes .venvs/sky; or
$OFFLOAD_LAB_SKY_PYTHON names an interpreter with skypilot), through `pods/sky_check.py`, offline, with HOME in a
temporary folder. The tests that need it skip, saying so, when that environment is absent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from offload_lab.campaigns.runner import load_campaign
from offload_lab.cli.main import main
from offload_lab.core.errors import InputError
from offload_lab.pods import plan as planmod
from offload_lab.pods import skypilot as sp
from offload_lab.server import stack as stackmod

ROOT = Path(__file__).resolve().parents[1]
SKY_PY = sp.sky_python(None, ROOT)
needs_sky = pytest.mark.skipif(not SKY_PY.exists(), reason=f"no SkyPilot environment at {SKY_PY}: `make sky-env` "
                                                           "creates it (or set $OFFLOAD_LAB_SKY_PYTHON)")


def _plan(tmp: Path, campaign: str, stack: str | None = None, *extra: str) -> dict:
    out = tmp / "plan"
    args = ["pod", "plan", str(ROOT / campaign), "--out", str(out), "--plan-id", "t001", "--allow-unpinned",
            "--json", *extra]
    if stack:
        args += ["--stack", str(ROOT / stack)]
    assert main(args) == 0
    return json.loads((out / "plan.json").read_text())


def _check(tmp: Path) -> list[dict]:
    return sp.check_tasks(sorted((tmp / "plan").glob("ol-*.yaml")), SKY_PY)


@needs_sky
def test_study_pod_task_loads_with_skypilots_parser(tmp_path):
    record = _plan(tmp_path, "configs/campaigns/study-pod.yaml", None, "--bucket", "ol-data")
    [r] = _check(tmp_path)
    assert r["num_nodes"] == 1
    assert r["resources"][0]["accelerators"] == {"RTXPRO6000": 2} and r["resources"][0]["disk_size"] == 1000
    # setup: the README's install, then the stack's, on the pod
    assert "make lab-env" in r["setup"]
    assert "offload-lab stack install configs/stacks/study-pod.yaml --allow-unpinned" in r["setup"]
    # run: topology first, the whole campaign, then the data to the bucket, run directories whole
    assert r["run"].index("nvidia-smi topo -m") < r["run"].index("campaign run configs/campaigns/study-pod.yaml")
    assert "rsync -a data/study-pod/ /offload-lab-out/t001/ol-study-pod-t001-0/study-pod/" in r["run"]
    assert r["storage_mounts"] == {"/offload-lab-out": {"name": "ol-data", "mode": "MOUNT"}}
    assert r["envs"]["OFFLOAD_LAB_POD"] == "ol-study-pod-t001-0" and r["envs"]["OFFLOAD_LAB_POD_PROVIDER"] == "skypilot"
    # only the secrets its experiments use: the quality comparison's key (HF_TOKEN when set here: a gated model)
    assert r["secrets"] == [] and r["secret_refs"] == (["HF_TOKEN"] if os.environ.get("HF_TOKEN") else []) + [
        "OFFLOAD_LAB_REFERENCE_API_KEY"]
    assert r["workdir"] == str(ROOT)
    cmds = record["commands"]
    # with a bucket the pod goes down when the job ends; without one it waits an hour idle for the rsync
    assert cmds["launch"][0].startswith("sky launch -y -d -c ol-study-pod-t001-0 ")
    assert " --down --secret OFFLOAD_LAB_REFERENCE_API_KEY" in cmds["launch"][0] and " -i " not in cmds["launch"][0]
    assert cmds["fetch"] == [f"aws s3 sync s3://ol-data/t001/ol-study-pod-t001-0/ {tmp_path}/plan/ol-study-pod-t001-0/data/"]
    assert cmds["down"] == ["sky down -y ol-study-pod-t001-0"]
    assert record["plan"]["after_merge"] == []


@needs_sky
def test_b300_baseline_over_two_pods_by_experiment(tmp_path):
    record = _plan(tmp_path, "configs/campaigns/study-b300.yaml", None, "--pods", "2", "--git-url",
                   "https://example.org/offload-lab.git", "--git-ref", "0" * 40)
    assert [p["only"] for p in record["plan"]["parts"]] == [
        ["boots"], ["context", "concurrency", "agent_turns", "interference"]]
    results = _check(tmp_path)
    assert [r["resources"][0]["accelerators"] for r in results] == [{"B300": 2}] * 2
    assert "--only boots " in results[0]["run"]
    assert "--only context,concurrency,agent_turns,interference " in results[1]["run"]
    assert all(r["workdir"] == {"url": "https://example.org/offload-lab.git", "ref": "0" * 40} for r in results)
    # data return without a bucket: rsync from each cluster into <plan>/<cluster>/data/<campaign>/
    assert all("rsync -a ol-study-b300-t001-" in f and "/data/study-b300/" in f for f in record["commands"]["fetch"])
    assert all(c.endswith(" -i 60 --down") for c in record["commands"]["launch"])  # no secret: none used
    c = load_campaign(ROOT / "configs/campaigns/study-b300.yaml")
    three = planmod.plan_pods(c, ROOT / "configs/stacks/study-b300.yaml", pods=3, plan_id="t002")
    assert [p.only for p in three.parts] == [["boots"], ["context", "concurrency"], ["agent_turns", "interference"]]


@needs_sky
def test_repeat_boots_spread_over_three_pods(tmp_path):
    record = _plan(tmp_path, "configs/campaigns/study-pod-repeat.yaml", None, "--pods", "3")
    plan = record["plan"]
    assert plan["split"] == "repeat_boots" and [p["repeat_boots"] for p in plan["parts"]] == [1, 1, 1]
    assert plan["after_merge"] == ["boot_spread"]
    assert record["commands"]["after_merge"] == [
        "offload-lab campaign run configs/campaigns/study-pod-repeat.yaml --data-dir data --only boot_spread"]
    results = _check(tmp_path)
    assert len({r["name"] for r in results}) == 3
    for r in results:
        # each pod runs its share from the campaign file with its own repeat_boots, same campaign name
        part_file = f"data/.pod-campaigns/{r['name']}.yaml"
        assert f"campaign run {part_file} --data-dir data --json --only context_repeat" in r["run"]
        text = r["run"].split("<<'OFFLOAD_LAB_CAMPAIGN'\n", 1)[1].split("\nOFFLOAD_LAB_CAMPAIGN\n", 1)[0]
        part = yaml.safe_load(text)
        assert part["name"] == "study-pod" and part["repeat_boots"] == 1
    c = load_campaign(ROOT / "configs/campaigns/study-pod-repeat.yaml")
    two = planmod.plan_pods(c, ROOT / "configs/stacks/study-pod.yaml", pods=2)
    assert [p.repeat_boots for p in two.parts] == [2, 1]


@needs_sky
def test_two_node_ray_server_task(tmp_path):
    _plan(tmp_path, "configs/campaigns/study-b300.yaml", "configs/stacks/study-b300-2node.yaml")
    [r] = _check(tmp_path)
    assert r["num_nodes"] == 2 and r["resources"][0]["accelerators"] == {"B300": 2}
    run = r["run"]
    assert 'if [ "$SKYPILOT_NODE_RANK" != "0" ]; then' in run
    assert "ray start --address=\"$HEAD_IP\":6379" in run and "ray start --head --port=6379" in run
    assert run.index('export VLLM_HOST_IP="$HEAD_IP"') < run.index("ray start --head")
    assert run.index('export RAY_ADDRESS="$HEAD_IP":6379') < run.index("campaign run")
    assert "kill -TERM -- -$(cat .ray-head.pid)" in run
    st = stackmod.load_stack(ROOT / "configs/stacks/study-b300-2node.yaml")
    cmd = stackmod.server_command(st, "127.0.0.1", 8000)
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2" and cmd[cmd.index("--pipeline-parallel-size") + 1] == "2"
    assert cmd[cmd.index("--distributed-executor-backend") + 1] == "ray"


@needs_sky
def test_skypilot_refuses_a_bad_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources: {accelerators: RTXPRO6000:2, gpus_please: 2}\nrun: echo\n")
    with pytest.raises(InputError, match="unsupported field 'gpus_please'"):
        sp.check_tasks([bad], SKY_PY)


def test_missing_skypilot_is_exit_2(tmp_path, capsys):
    args = ["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--out", str(tmp_path / "p"),
            "--allow-unpinned", "--check"]
    assert main([*args, "--sky-python", str(tmp_path / "no-such-python")]) == 2
    assert "make sky-env" in capsys.readouterr().err
    # an interpreter without SkyPilot: sky_check exits 3, reported as not installed
    assert main([*args, "--force", "--sky-python", sys.executable]) == 2
    assert "SkyPilot is not installed" in capsys.readouterr().err


def _bad_stack(tmp: Path, **fields) -> Path:
    p = tmp / "bad.yaml"
    p.write_text(yaml.safe_dump({"name": "bad", "extends": "configs/stacks/study-b300.yaml", **fields}))
    return p


@pytest.mark.parametrize("pod, server, match", [
    ({"accelerator": "RTX PRO 6000", "count": 2}, {}, "did you mean RTXPRO6000"),
    ({"accelerator": "B300", "count": 1.5}, {}, "pod.count"),
    ({"accelerator": "B300", "count": "2 x B300"}, {}, "pod.count"),
    ({"accelerator": "B300", "count": 1}, {}, "2 x 1 = 2 GPUs but the pod has 1"),
    ({"accelerator": "B300", "count": 2, "nodes": 2}, {}, "pod.ray is not set"),
    ({"accelerator": "B300", "count": 2, "nodes": 2, "ray": {}}, {"args": ["--pipeline-parallel-size", "3"]},
     "2 x 3 = 6, but the pod has 2 nodes x 2 GPUs"),
    ({"accelerator": "B300", "count": 2, "nodes": 2, "ray": {}}, {"args": ["--pipeline-parallel-size", "2"]},
     "distributed-executor-backend ray"),
    ({"accelerator": "B300", "count": 2, "nodes": 2, "ray": {}},
     {"args": ["--pipeline-parallel-size", "2", "--distributed-executor-backend", "ray"]}, "no part installs it"),
    ({"accelerator": "B300", "count": 2, "nodes": 2, "ray": {"port": 6380}}, {}, "SkyPilot's own Ray port"),
])
def test_stacks_a_launcher_cannot_express_exit_2(tmp_path, capsys, pod, server, match):
    stack = _bad_stack(tmp_path, pod=pod, **({"server": server} if server else {}))
    code = main(["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--stack", str(stack),
                 "--out", str(tmp_path / "p")])
    assert code == 2
    assert match in capsys.readouterr().err


def test_stack_without_pod_and_unpinned_stack_exit_2(tmp_path, capsys):
    out = ["--out", str(tmp_path / "p")]
    assert main(["pod", "plan", str(ROOT / "configs/campaigns/embedded.yaml"), *out]) == 2
    assert "has no `pod:` section" in capsys.readouterr().err
    assert main(["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), *out]) == 2
    assert "unpinned item(s)" in capsys.readouterr().err and not (tmp_path / "p" / "plan.json").exists()


def test_more_pods_than_experiments_exit_2(tmp_path, capsys):
    base = ["pod", "plan", "--allow-unpinned", "--out", str(tmp_path / "p")]
    assert main([*base[:2], str(ROOT / "configs/campaigns/study-b300.yaml"), *base[2:], "--pods", "6"]) == 2
    assert "it cannot be spread over 6 pods. Use --pods 5 or fewer" in capsys.readouterr().err
    assert main([*base[:2], str(ROOT / "configs/campaigns/study-pod-repeat.yaml"), *base[2:], "--pods", "4"]) == 2
    assert "repeats 3 boots; it cannot be spread over 4 pods" in capsys.readouterr().err
    assert main([*base[:2], str(ROOT / "configs/campaigns/study-b300.yaml"), *base[2:], "--pods", "2",
                 "--split", "repeat_boots"]) == 2
    assert "no repeat boots to spread" in capsys.readouterr().err
    assert main([*base[:2], str(ROOT / "configs/campaigns/study-b300.yaml"), *base[2:], "--plan-id", "Bad_Id"]) == 2
    assert "--plan-id 'Bad_Id'" in capsys.readouterr().err


def test_ablations_keep_variant_groups_together():
    c = load_campaign(ROOT / "configs/campaigns/study-ablations.yaml")
    groups = planmod.variant_groups(c)
    assert groups[0] == ["boots"]
    assert ["concurrency_base", "interference_base", "interference_3streams"] in groups
    assert ["concurrency_mtp_off", "interference_mtp_off"] in groups
    plan = planmod.plan_pods(c, ROOT / "configs/stacks/study-pod.yaml", pods=len(groups))
    assert [p.only for p in plan.parts] == groups  # a pod per variant: no variant booted twice


def test_task_for_a_stack_file_outside_the_checkout_is_refused(tmp_path):
    outside = tmp_path / "s.yaml"
    outside.write_text((ROOT / "configs/stacks/study-b300.yaml").read_text())
    c = load_campaign(ROOT / "configs/campaigns/study-b300.yaml")
    with pytest.raises(InputError, match="outside the repository"):
        planmod.plan_pods(c, outside)


def test_plan_refuses_to_write_over_a_plan(tmp_path, capsys):
    args = ["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--allow-unpinned", "--out",
            str(tmp_path / "p")]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2 and "--force" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    assert os.path.isfile(tmp_path / "p" / "plan.json")


def test_repeat_boot_part_is_a_valid_campaign_of_the_same_name(tmp_path):
    from offload_lab.campaigns import runner

    c = load_campaign(ROOT / "configs/campaigns/study-pod-repeat.yaml")
    plan = planmod.plan_pods(c, ROOT / "configs/stacks/study-pod.yaml", pods=2)
    f = tmp_path / "part.yaml"
    f.write_text(planmod.part_campaign_text(c, plan.parts[0]))
    part = load_campaign(f, root=ROOT)
    runner.validate(part)  # notebooks, parameters and stacks resolve from the checkout, as on the pod
    assert part.spec.name == "study-pod" and part.spec.repeat_boots == 2
    assert [e.experiment for e in part.spec.experiments] == [e.experiment for e in c.spec.experiments]
    assert planmod.part_campaign_text(c, planmod.PodPart(index=0, of=1, cluster="x")) is None


def test_a_named_part_of_the_campaign(tmp_path, capsys):
    c = load_campaign(ROOT / "configs/campaigns/study-b300.yaml")
    one = planmod.plan_pods(c, ROOT / "configs/stacks/study-b300.yaml", only=["context", "agent_turns"])
    assert [p.only for p in one.parts] == [["context", "agent_turns"]]
    two = planmod.plan_pods(c, ROOT / "configs/stacks/study-b300.yaml", pods=2, only=["boots", "context", "agent_turns"])
    assert [p.only for p in two.parts] == [["boots"], ["context", "agent_turns"]]
    r = load_campaign(ROOT / "configs/campaigns/study-pod-repeat.yaml")
    rep = planmod.plan_pods(r, ROOT / "configs/stacks/study-pod.yaml", pods=3, only=["context_repeat"])
    assert rep.after_merge == [] and all(p.only == ["context_repeat"] for p in rep.parts)
    assert main(["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--allow-unpinned", "--out",
                 str(tmp_path / "p"), "--only", "contxt"]) == 2
    assert "--only names experiments not in" in capsys.readouterr().err
    assert main(["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--allow-unpinned", "--out",
                 str(tmp_path / "p"), "--only", "context", "--pods", "2"]) == 2
    assert "cannot be spread over 2 pods. Use --pods 1 or fewer" in capsys.readouterr().err


def test_every_accelerator_skypilot_knows_is_accepted():
    from offload_lab.server import multinode

    names = multinode.KNOWN_ACCELERATORS
    assert {"L40S", "A100", "H100-MEGA", "RTXPRO6000", "B300", "GB300", "T4"} <= set(names) and len(names) >= 34
    for name in names:
        multinode.PodSpec(accelerator=name, count=1)
    with pytest.raises(ValueError, match="did you mean L40S"):
        multinode.PodSpec(accelerator="l40s", count=1)


@needs_sky
def test_the_accelerator_snapshot_is_skypilots_installed_registry(tmp_path):
    """The snapshot the lab reads is what SkyPilot's installed package says now (remade by pods/sky_registry.py)."""
    import subprocess

    from offload_lab.server import multinode

    proc = subprocess.run([str(SKY_PY), str(ROOT / "src/offload_lab/pods/sky_registry.py")], capture_output=True,
                          text=True, env={**os.environ, "HOME": str(tmp_path), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"},
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-500:]
    fresh = json.loads(proc.stdout)
    assert fresh == json.loads(multinode.ACCELERATORS_FILE.read_text())
    canonical = next(s for s in fresh["sources"] if s["name"].endswith("CANONICAL_GPU_NAMES"))
    assert canonical["count"] == 34 and fresh["skypilot"] == "0.14.1"


def test_plan_json_names_its_task_files_and_a_refused_plan_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--allow-unpinned", "--out",
                 str(out), "--pods", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [Path(f).name for f in doc["task_files"]] == [f"{p['cluster']}.yaml" for p in doc["plan"]["parts"]]
    assert all(Path(f).is_file() for f in doc["task_files"]) and doc["out"] == str(out)
    refused = tmp_path / "refused"
    assert main(["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--out", str(refused)]) == 2
    assert "unpinned" in capsys.readouterr().err and not refused.exists()
    # the check refuses after the tasks were written: they and the folder go again
    assert main(["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--allow-unpinned", "--check",
                 "--out", str(refused), "--sky-python", sys.executable]) == 2
    assert not refused.exists()


def test_a_two_node_task_asks_for_the_best_network(tmp_path):
    record = _plan(tmp_path, "configs/campaigns/study-b300.yaml", "configs/stacks/study-b300-2node.yaml")
    task = yaml.safe_load((tmp_path / "plan" / record["tasks"][0]).read_text())
    assert task["resources"]["network_tier"] == "best"
    one = yaml.safe_load((tmp_path / "plan" / record["tasks"][0]).read_text())
    assert one["num_nodes"] == 2


def test_secrets_only_for_the_experiments_that_use_them():
    c = load_campaign(ROOT / "configs/campaigns/study-pod.yaml")
    st = stackmod.load_stack(ROOT / "configs/stacks/study-pod.yaml")
    assert sp.secrets_for(c, st.spec, environ={}) == ["OFFLOAD_LAB_REFERENCE_API_KEY"]
    assert sp.secrets_for(c, st.spec, only=["context"], environ={}) == []
    assert sp.secrets_for(c, st.spec, only=["context"], environ={"HF_TOKEN": "x"}) == ["HF_TOKEN"]


def test_a_plan_over_ray_must_reach_the_other_nodes_workers(tmp_path, capsys):
    """vLLM 0.32's default Ray executor (V2) copies the driver's environment; the legacy one forwards only some
    variables to its workers: there the plan's must be named."""
    from offload_lab.server import multinode

    assert multinode.ray_executor({}) == "v2"
    assert multinode.not_forwarded_to_ray_workers({"EXL3_HOST_EXPERTS": "x"}) == []
    legacy = {"VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "0", "EXL3_HOST_EXPERTS": "x", "FLASH_ATTENTION_X": "1"}
    assert multinode.not_forwarded_to_ray_workers(legacy) == ["EXL3_HOST_EXPERTS"]
    with_plan = tmp_path / "plan2.yaml"
    with_plan.write_text(yaml.safe_dump({"name": "p2", "extends": "configs/stacks/study-b300-2node.yaml",
                                         "plans": {"use": "gen30"}}))
    assert main(["stack", "check", str(with_plan), "--json"]) == 0  # the 2-node stack names EXL3_HOST_EXPERTS
    capsys.readouterr()
    dropped = tmp_path / "dropped.yaml"
    dropped.write_text(yaml.safe_dump({"name": "p3", "extends": str(with_plan),
                                       "server": {"env": {"VLLM_RAY_EXTRA_ENV_VARS_TO_COPY": "NCCL_DEBUG"}}}))
    assert main(["stack", "check", str(dropped), "--json"]) == 0  # the default executor copies it anyway
    capsys.readouterr()
    dropped.write_text(yaml.safe_dump({"name": "p3", "extends": str(with_plan), "server": {"env": {
        "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY": "NCCL_DEBUG", "VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "0"}}}))
    assert main(["stack", "check", str(dropped)]) == 2
    assert "EXL3_HOST_EXPERTS would not reach the workers on the other nodes" in capsys.readouterr().err
    assert main(["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--stack", str(dropped),
                 "--allow-unpinned", "--out", str(tmp_path / "p")]) == 2
    assert "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY" in capsys.readouterr().err and not (tmp_path / "p").exists()


def test_plan_outputs_are_checked_before_anything_is_written(tmp_path, capsys):
    afile = tmp_path / "a-file"
    afile.write_text("x")
    base = ["pod", "plan", str(ROOT / "configs/campaigns/study-b300.yaml"), "--allow-unpinned"]
    assert main([*base, "--out", str(afile)]) == 2
    assert "--out" in capsys.readouterr().err and afile.read_text() == "x"
    assert main([*base, "--out", "/proc/ol-plan"]) == 2
    assert "kernel file system" in capsys.readouterr().err
    data = tmp_path / "data"
    assert main(["pod", "launch", str(ROOT / "configs/campaigns/study-b300.yaml"), "--allow-unpinned",
                 "--data-dir", str(data), "--out", str(data / "plan")]) == 2
    assert "inside the data tree" in capsys.readouterr().err and not data.exists()


def test_the_study_pods_install_every_stack_they_boot_and_run_the_planned_one(tmp_path, capsys):
    """Issue 34, 1 and 2, on the study's own files: study-b300 planned on the 2-node stack installs and runs that
    stack (it used to install it and run the 1-node one); study-pod installs the UVA stack its boots use."""
    record = _plan(tmp_path, "configs/campaigns/study-b300.yaml", "configs/stacks/study-b300-2node.yaml")
    [cluster] = record["stacks"]
    assert record["stacks"][cluster] == ["configs/stacks/study-b300-2node.yaml"]
    task = yaml.safe_load((tmp_path / "plan" / f"{cluster}.yaml").read_text())
    assert "stack install configs/stacks/study-b300-2node.yaml" in task["setup"]
    assert "stack install configs/stacks/study-b300.yaml " not in task["setup"] + " "
    part = task["run"].split("<<'OFFLOAD_LAB_CAMPAIGN'\n", 1)[1].split("\nOFFLOAD_LAB_CAMPAIGN", 1)[0]
    assert yaml.safe_load(part)["stack"] == "configs/stacks/study-b300-2node.yaml"
    assert f"campaign run data/.pod-campaigns/{cluster}.yaml" in task["run"]
    capsys.readouterr()
    pod = _plan(tmp_path / "b", "configs/campaigns/study-pod.yaml")
    assert list(pod["stacks"].values()) == [["configs/stacks/study-pod.yaml", "configs/stacks/study-pod-uva.yaml"]]
