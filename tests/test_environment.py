from offload_lab.core import environment

# As `nvidia-smi topo -m` prints it on a two-socket host with one GPU per socket (the study's pod 2).
TOPO_SYS = """\
\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tSYS\t0-31,64-95\t0\t\tN/A
GPU1\tSYS\t X \t32-63,96-127\t1\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
"""

TOPO_NODE = """\
        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NODE    0-47    0               N/A
GPU1    NODE     X      0-47    0               N/A

Legend:
  X    = Self
"""


def test_topology_with_gpus_on_two_sockets_is_flagged():
    t = environment.parse_topology(TOPO_SYS)
    assert t["devices"] == ["GPU0", "GPU1"]
    assert t["links"]["GPU0"]["GPU1"] == "SYS"
    assert t["affinity"]["GPU1"]["NUMA Affinity"] == "1"
    assert t["crosses_sockets"] is True


def test_topology_on_one_numa_node_is_not_flagged():
    t = environment.parse_topology(TOPO_NODE)
    assert t["links"]["GPU1"]["GPU0"] == "NODE"
    assert t["affinity"]["GPU0"]["CPU Affinity"] == "0-47"
    assert t["crosses_sockets"] is False


def test_gpu_query_parses():
    rows = environment.parse_gpu_query(
        "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB, 580.65.06, 00000000:01:00.0\n"
        "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB, 580.65.06, 00000000:81:00.0\n")
    assert [r["index"] for r in rows] == [0, 1]
    assert rows[0]["memory_total_mib"] == 97887


def test_capture_records_absent_gpus_and_no_environment_variables(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value-that-must-not-leak")
    env = environment.capture_environment()
    assert env["cpu"]["logical_cores"] >= 1
    assert env["memory"]["total_bytes"] > 0
    if not env["gpu"]["present"]:
        assert env["gpu"]["gpus"] == []
    assert "sk-test-secret" not in str(env)
