"""The campaign runner's pod features, on a stand-in server (seconds per boot): the boots section, repeat boots,
server variants, the topology policy (a fake nvidia-smi), and the ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload_lab.campaigns import runner as campaign
from offload_lab.campaigns import ledger
from offload_lab.core import runs
from offload_lab.core.errors import InputError

from pod_helpers import TOPO_NODE, TOPO_SYS, campaign_file, fake_nvidia_smi, fake_stack, probe_notebook, with_path

PRICE = {"per_hour": 3.73, "currency": "EUR", "what": "test pod", "source": "published study (E12)"}


@pytest.fixture
def setup(tmp_path):
    st = fake_stack(tmp_path, price=PRICE)
    nb = probe_notebook(tmp_path / "probe.ipynb")
    return tmp_path, st, nb


def _manifests(data: Path, name: str, experiment: str) -> list[dict]:
    return [runs.load_manifest(d) for d in runs.iter_runs(data, name, experiment)]


def test_boot_attempts_are_data_and_the_ledger_prices_the_session(setup):
    tmp, st, nb = setup
    spec = {
        "name": "pod", "stack": str(st),
        "boots": [
            {"name": "fits", "expect": "ready", "expect_source": "test"},
            {"name": "no-plan", "override": {"env": {"FAKE_VLLM": "oom_load"}}, "expect": "oom_load"},
            {"name": "uva-128", "override": {"env": {"FAKE_VLLM": "die_on_request"}, "flags": {"block_size": 128}},
             "expect": "died_first_request"},
            {"name": "surprise", "override": {"env": {"FAKE_VLLM": "kv"}}, "expect": "ready"},
        ],
        "experiments": [{"experiment": "probe", "notebook": str(nb)}],
    }
    data = tmp / "data"
    result = campaign.run_campaign(campaign_file(tmp, spec), data_root=data, log=lambda s: None)
    outcomes = {a["boot"]: (a["outcome"], a["as_expected"]) for a in result.boot_attempts}
    assert outcomes == {"fits": ("ready", True), "no-plan": ("oom_load", True),
                        "uva-128": ("died_first_request", True), "surprise": ("oom_kv_cache", False)}
    boots = _manifests(data, "pod", "boots")
    assert len(boots) == 5  # four attempts and the experiment's server
    by_name = {m["parameters"].get("boot"): m for m in boots}
    assert "--block-size" in by_name["uva-128"]["server_command"]
    assert by_name["uva-128"]["stack"]["override"]["flags"] == {"block_size": 128}
    for m in boots:
        assert runs.verify_run(Path(data, "pod", "boots", m["run_id"])) == []
        assert m["session"] == result.session
    (probe,) = _manifests(data, "pod", "probe")
    assert probe["outcome"] == "ok" and probe["session"] == result.session
    (session,) = ledger.read_ledger(data, "pod")
    assert session["open"] is False and session["outcome"] == "ok"
    assert session["price"]["per_hour"] == 3.73 and session["currency"] == "EUR"
    assert session["cost"] == pytest.approx(session["minutes"] / 60 * 3.73, abs=1e-3)
    assert len(session["runs"]) == 6
    assert ledger.totals([session])["cost"] == {"EUR": session["cost"]}


def test_repeat_boots_run_the_experiment_after_each_boot(setup):
    tmp, st, nb = setup
    spec = {"name": "rep", "stack": str(st), "repeat_boots": 3,
            "experiments": [{"experiment": "probe", "notebook": str(nb)},
                            {"experiment": "after", "notebook": str(nb), "needs_server": False}]}
    data = tmp / "data"
    result = campaign.run_campaign(campaign_file(tmp, spec), data_root=data, log=lambda s: None)
    probes = sorted(_manifests(data, "rep", "probe"), key=lambda m: m["started_at"])
    assert [m["boot"]["index"] for m in probes] == [0, 1, 2]
    assert len({m["boot"]["run"] for m in probes}) == 3  # a fresh boot each time
    for m in probes:  # how busy the machine was, sampled while the notebook ran
        assert m["host_load"]["start"]["vllm_servers"] is not None
        assert m["host_load"]["during"]["samples"] >= 1 and "vllm_servers_max" in m["host_load"]["during"]
    (after,) = _manifests(data, "rep", "after")
    assert after["boot"]["index"] is None and after["started_at"] > probes[-1]["ended_at"]
    assert len(result.boot_runs) == 3
    seen = json.loads(Path(data, "rep", "after", after["run_id"], "seen.json").read_text())
    assert seen["base_url"] is None


def test_experiments_on_a_variant_get_their_own_server(setup):
    tmp, st, nb = setup
    spec = {"name": "var", "stack": str(st), "experiments": [
        {"experiment": "a", "notebook": str(nb)},
        {"experiment": "b", "notebook": str(nb)},
        {"experiment": "eager", "notebook": str(nb), "variant": "eager", "override": {"flags": {"enforce_eager": True}}},
        {"experiment": "c", "notebook": str(nb)},
    ]}
    data = tmp / "data"
    campaign.run_campaign(campaign_file(tmp, spec), data_root=data, log=lambda s: None)
    boot_of = {e: _manifests(data, "var", e)[0]["boot"]["run"] for e in ("a", "b", "eager", "c")}
    assert boot_of["a"] == boot_of["b"] != boot_of["eager"] != boot_of["c"]
    eager_boot = runs.load_manifest(boot_of["eager"])
    assert "--enforce-eager" in eager_boot["server_command"]
    assert _manifests(data, "var", "eager")[0]["server"]["variant"] == "eager"


def test_cross_socket_gpus_stop_the_campaign_when_it_says_stop(setup, monkeypatch):
    tmp, st, nb = setup
    monkeypatch.setenv("PATH", with_path(fake_nvidia_smi(tmp / "bin", TOPO_SYS)))
    spec = {"name": "topo", "stack": str(st), "topology": {"on_cross_socket": "stop"},
            "experiments": [{"experiment": "probe", "notebook": str(nb)}]}
    data = tmp / "data"
    with pytest.raises(InputError, match=r"GPU0-GPU1 are on different NUMA nodes \(SYS"):
        campaign.run_campaign(campaign_file(tmp, spec), data_root=data, log=lambda s: None)
    assert list(runs.iter_runs(data, "topo")) == []  # nothing ran, no server started
    (session,) = ledger.read_ledger(data, "topo")
    assert session["outcome"] == "stopped" and session["pod"]["crosses_sockets"] is True
    assert session["pod"]["gpu_count"] == 2


def test_cross_socket_gpus_only_mark_the_runs_when_it_says_mark(setup, monkeypatch):
    tmp, st, nb = setup
    monkeypatch.setenv("PATH", with_path(fake_nvidia_smi(tmp / "bin", TOPO_SYS)))
    spec = {"name": "topo", "stack": str(st), "topology": {"on_cross_socket": "mark"},
            "experiments": [{"experiment": "probe", "notebook": str(nb)}]}
    data = tmp / "data"
    result = campaign.run_campaign(campaign_file(tmp, spec), data_root=data, log=lambda s: None)
    assert result.topology["marked"] is True and result.topology["sys_pairs"] == [["GPU0", "GPU1"]]
    for exp in ("boots", "probe"):
        (m,) = _manifests(data, "topo", exp)
        assert m["topology_check"]["crosses_sockets"] is True and m["topology_check"]["policy"] == "mark"
        # every manifest carries the matrix itself, raw and parsed
        assert m["environment"]["gpu"]["topology"]["links"]["GPU0"]["GPU1"] == "SYS"
        assert "SYS" in m["environment"]["gpu"]["topology_raw"]


def test_one_numa_node_is_not_marked_and_the_gpu_count_is_checked(setup, monkeypatch):
    tmp, st, nb = setup
    monkeypatch.setenv("PATH", with_path(fake_nvidia_smi(tmp / "bin", TOPO_NODE)))
    spec = {"name": "topo", "stack": str(st), "topology": {"on_cross_socket": "stop", "expect_gpus": 2},
            "experiments": [{"experiment": "probe", "notebook": str(nb), "needs_server": False}]}
    result = campaign.run_campaign(campaign_file(tmp, spec), data_root=tmp / "data", log=lambda s: None)
    assert result.topology["marked"] is False and result.topology["crosses_sockets"] is False
    spec["topology"]["expect_gpus"] = 4
    # analysis only (after a merge, on a laptop): the GPU rule applies where a server starts, and the session is
    # not priced at the pod's rate
    result = campaign.run_campaign(campaign_file(tmp, spec, "c2.yaml"), data_root=tmp / "data", log=lambda s: None)
    assert result.topology["applies"] is False
    assert [s["price"] for s in ledger.read_ledger(tmp / "data", "topo")][-1] is None
    spec["experiments"][0]["needs_server"] = True
    with pytest.raises(InputError, match="expects 4 GPU"):
        campaign.run_campaign(campaign_file(tmp, spec, "c3.yaml"), data_root=tmp / "data", log=lambda s: None)


def test_no_gpu_is_recorded_as_unchecked(setup):
    tmp, st, nb = setup
    check = campaign.topology_check(campaign.TopologyPolicy(on_cross_socket="stop"),
                                    {"gpu": {"present": False, "reason": "nvidia-smi not found", "gpus": [],
                                             "topology": None}})
    assert check["checked"] is False and check["crosses_sockets"] is None and check["marked"] is False


def test_bad_campaign_files_are_refused_before_anything_runs(setup):
    tmp, st, nb = setup
    bad = [
        ({"boots": [{"name": "x", "expect": "maybe"}]}, "expect 'maybe'"),
        ({"boots": [{"name": "x"}, {"name": "x"}]}, "given twice"),
        ({"boots": [{"name": "x", "override": {"flags": {"no_such_flag": 1}}}]}, "unknown server flag"),
        ({"topology": {"on_cross_socket": "ignore"}}, "on_cross_socket"),
        ({"repeat_boots": 0}, "repeat_boots"),
    ]
    for extra, message in bad:
        spec = {"name": "bad", "stack": str(st), "experiments": [{"experiment": "p", "notebook": str(nb)}], **extra}
        with pytest.raises(InputError, match=message):
            campaign.validate(campaign.load_campaign(campaign_file(tmp, spec, "bad.yaml"), root=tmp))
    spec = {"name": "bad", "stack": str(tmp / "missing.yaml"), "experiments": [{"experiment": "p", "notebook": str(nb)}]}
    with pytest.raises(InputError, match="missing.yaml"):
        campaign.validate(campaign.load_campaign(campaign_file(tmp, spec, "bad.yaml"), root=tmp))


def test_only_can_pick_the_boots_section(setup):
    tmp, st, nb = setup
    spec = {"name": "only", "stack": str(st), "boots": [{"name": "fits", "expect": "ready"}],
            "experiments": [{"experiment": "probe", "notebook": str(nb)}]}
    data = tmp / "data"
    result = campaign.run_campaign(campaign_file(tmp, spec), data_root=data, only=["boots"], log=lambda s: None)
    assert [a["outcome"] for a in result.boot_attempts] == ["ready"] and result.runs == []
    with pytest.raises(InputError, match="not in"):
        campaign.run_campaign(campaign_file(tmp, spec), data_root=data, only=["nope"], log=lambda s: None)
