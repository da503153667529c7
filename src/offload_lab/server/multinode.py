"""The machine a stack runs on (``pod:`` in a stack file) and a server across several nodes over Ray.

``pod:`` says what to rent, launcher-neutral: the accelerator by SkyPilot's canonical name, GPUs per node, nodes,
disk, host RAM, image, where (``infra``), spot, and the idle time after which the launcher tears the pod down.
``offload-lab pod plan`` turns it into a SkyPilot task. ``pod.ray`` makes the server span ``pod.nodes`` nodes:

.. code-block:: yaml

    pod:
      accelerator: B300
      count: 2                 # GPUs per node
      nodes: 2
      ray: {port: 6379}
    server:
      flags: {tensor_parallel_size: 2}
      args: [--pipeline-parallel-size, "2", --distributed-executor-backend, ray]

The head node starts Ray (``ray start --head``), every other node joins it (``ray start --address``), each with
``VLLM_HOST_IP`` set to its own address first; vLLM then runs on the head only with the Ray executor and spreads
``tensor_parallel_size x pipeline_parallel_size`` workers over the cluster (vLLM docs/serving/parallelism_scaling.md,
examples/online_serving/multi-node-serving.sh). The Ray cluster is started once per pod session and outlives every
vLLM boot of a campaign; vLLM's multiprocessing backend (``--nnodes/--node-rank/--headless``) would need its workers
restarted on every node at every boot, so only Ray is offered across nodes.

The check (:func:`check_pod`) runs when the stack file is validated, so a stack that asks for GPUs a launcher cannot
express, or whose server does not use the GPUs it rents, is refused before anything is rented.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from offload_lab.core.errors import InputError

# Every accelerator name SkyPilot knows offline, from its installed package, not a list of our own: a snapshot with
# provenance (version, module, file, sha256) written by pods/sky_registry.py in SkyPilot's environment, since this
# environment never imports SkyPilot (its parser accepts any name; only its optimizer, with a cloud catalog fetched at
# launch, refuses an unknown one). Which clouds offer a name: `sky gpus list NAME` on a machine with credentials.
ACCELERATORS_FILE = Path(__file__).resolve().parents[1] / "resources" / "skypilot_accelerators.json"


def _registry() -> dict[str, Any]:
    import json

    return json.loads(ACCELERATORS_FILE.read_text(encoding="utf-8"))


KNOWN_ACCELERATORS: dict[str, list[str]] = _registry()["accelerators"]
SKYPILOT_VERSION: str = _registry()["skypilot"]
SKYPILOT_RAY_PORT = 6380  # SkyPilot runs its own Ray on every node (sky/skylet/constants.py); ours must not share it
RAY_WORKER_PORTS = range(10002, 20000)  # Ray's default worker port range: a head port inside it collides
RAY_HEAD_PID = ".ray-head.pid"
RAY_HEAD_LOG = "ray-head.log"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RayCluster(_Strict):
    """``pod.ray``: one vLLM server over every node of the pod, through Ray."""

    port: int = Field(6379, ge=1024, le=65535, description="the head's GCS port")
    wait_s: float = Field(600, gt=0, description="how long the head waits for every node to join")
    ray: str | None = Field(None, description="the ray executable; default: beside the stack's python")

    @field_validator("port")
    @classmethod
    def _free_port(cls, v: int) -> int:
        if v == SKYPILOT_RAY_PORT:
            raise ValueError(f"port {v} is SkyPilot's own Ray port on every node; use another (6379)")
        if v in RAY_WORKER_PORTS:
            raise ValueError(f"port {v} is inside Ray's worker port range {RAY_WORKER_PORTS.start}-"
                             f"{RAY_WORKER_PORTS.stop - 1}; use one outside it (6379)")
        return v


class PodSpec(_Strict):
    """``pod:`` in a stack file: the machine a campaign on this stack is run on."""

    accelerator: str = Field(description="SkyPilot's canonical name, e.g. RTXPRO6000, B300")
    count: int = Field(ge=1, le=16, description="GPUs per node, a whole number")
    nodes: int = Field(1, ge=1, le=16)
    disk_gib: int = Field(256, ge=50, description="disk per node (the model is downloaded on every node)")
    memory: str | None = Field(None, description="host RAM in GB, e.g. '256+' (pinned host experts need it)")
    cpus: str | None = Field(None, description="e.g. '32+'")
    image: str | None = Field(None, description="e.g. docker:nvidia/cuda:12.8.1-devel-ubuntu24.04; null: provider's")
    infra: str | None = Field(None, description="SkyPilot infra: runpod, aws, aws/us-east-1, k8s ...; null: any")
    use_spot: bool = False
    autodown_idle_minutes: int = Field(60, ge=5, description="the launcher tears the pod down after this long idle")
    bootstrap: list[str] = Field(default_factory=list,
                                 description="commands before the README's install, e.g. apt-get install -y make")
    ray: RayCluster | None = Field(None, description="a server across the pod's nodes (needs nodes > 1)")

    @field_validator("accelerator")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in KNOWN_ACCELERATORS:
            squashed = re.sub(r"[^A-Za-z0-9]", "", v).upper()
            # the longest known name inside what was typed, spaces and case aside ("RTX PRO 6000", "l40s")
            near = sorted((k for k in KNOWN_ACCELERATORS if re.sub(r"[^A-Za-z0-9]", "", k).upper() in squashed),
                          key=len, reverse=True)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise ValueError(f"accelerator {v!r} is not a name SkyPilot {SKYPILOT_VERSION} knows{hint} (`sky gpus "
                             f"list` shows them; {len(KNOWN_ACCELERATORS)} names in {ACCELERATORS_FILE.name})")
        return v

    @property
    def gpus(self) -> int:
        return self.count * self.nodes


def arg_value(args: list[str], flag: str) -> str | None:
    """The value of ``--flag V`` or ``--flag=V`` in a server's argument list (the last one wins, as argparse)."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def parallel_sizes(server: Any) -> tuple[int, int, str | None]:
    """(tensor, pipeline, executor backend) of a ``server:`` section: tp is a typed flag, pp and the backend are
    arguments (``server.args``), as vLLM spells them."""
    tp = server.flags.tensor_parallel_size or 1
    pp_text = arg_value(server.args, "--pipeline-parallel-size") or arg_value(server.args, "-pp") or "1"
    try:
        pp = int(pp_text)
    except ValueError:
        raise ValueError(f"server.args: --pipeline-parallel-size {pp_text!r} is not a whole number") from None
    return tp, pp, arg_value(server.args, "--distributed-executor-backend")


def check_pod(pod: PodSpec | None, info: ValidationInfo) -> PodSpec | None:
    """The GPUs rented and the GPUs the server uses agree (``info.data``: the stack's fields validated before
    ``pod``, i.e. ``server`` and ``parts``; one that failed its own validation is reported on its own)."""
    server, parts = info.data.get("server"), info.data.get("parts")
    if pod is None or server is None:
        return pod
    tp, pp, backend = parallel_sizes(server)
    world = tp * pp
    if pod.nodes == 1:
        if pod.ray is not None:
            raise ValueError("pod.ray is for a server across nodes; with nodes: 1 leave it out")
        if world > pod.count:
            raise ValueError(f"the server uses tensor x pipeline parallel = {tp} x {pp} = {world} GPUs but the pod "
                             f"has {pod.count}")
        return pod
    if pod.ray is None:
        raise ValueError(f"pod.nodes is {pod.nodes} but pod.ray is not set: a server across nodes runs over Ray "
                         "(add `ray: {port: 6379}`)")
    if world != pod.gpus:
        raise ValueError(f"tensor x pipeline parallel = {tp} x {pp} = {world}, but the pod has {pod.nodes} nodes x "
                         f"{pod.count} GPUs = {pod.gpus}; vLLM over Ray uses every GPU of the cluster")
    if tp > pod.count:
        raise ValueError(f"tensor_parallel_size {tp} is more than one node's {pod.count} GPUs: tensor parallelism "
                         "across nodes goes over the network at every layer; split nodes by pipeline parallelism "
                         f"(tensor_parallel_size {pod.count}, --pipeline-parallel-size {pod.nodes})")
    if backend != "ray":
        raise ValueError("a server across nodes needs `--distributed-executor-backend ray` in server.args (it is "
                         f"{backend!r})")
    if not any(p.name == "ray" or getattr(p.source, "package", None) in ("ray", "ray[default]") for p in parts or []):
        raise ValueError("pod.ray starts Ray from the stack's environment, but no part installs it (add a part: "
                         "{name: ray, source: {kind: pypi, package: ray, version: 2.60.0}})")
    return pod


# The type of ``StackFile.pod``; declared after ``server`` and ``parts`` so that check_pod sees them.
PodField = Annotated[PodSpec | None, AfterValidator(check_pod)]


def pp_layer_ranges(num_layers: int, pp: int, partition: list[int] | None = None) -> list[range]:
    """Decoder layers of each pipeline stage, as vLLM splits them (vllm/distributed/utils.py get_pp_indices, 0.32:
    equal shares, the remainder to the stages before the last; ``VLLM_PP_LAYER_PARTITION`` overrides)."""
    if pp < 1 or num_layers < pp:
        raise InputError(f"pipeline parallel size {pp} needs at least as many layers as stages (the model has "
                         f"{num_layers})")
    if partition is not None:
        if len(partition) != pp or sum(partition) != num_layers or min(partition) < 1:
            raise InputError(f"layer partition {partition} must have {pp} positive entries summing to {num_layers}")
        parts = list(partition)
    else:
        parts = [num_layers // pp] * pp
        for i in range(2, num_layers % pp + 2):
            parts[-i] += 1
    out, start = [], 0
    for n in parts:
        out.append(range(start, start + n))
        start += n
    return out


def parse_partition(text: str | None) -> list[int] | None:
    """``VLLM_PP_LAYER_PARTITION`` ("31,30") as a list; InputError naming it when it is not whole numbers."""
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"VLLM_PP_LAYER_PARTITION {text!r} is not comma-separated whole numbers") from None


# --- what reaches the other nodes' workers ------------------------------------------------------------------------
#
# What the other nodes' workers see of the server's environment depends on vLLM's Ray executor (vLLM 0.32.0):
# - RayExecutorV2, the default (vllm/envs.py VLLM_USE_RAY_V2_EXECUTOR_BACKEND, default "1";
#   vllm/v1/executor/abstract.py picks it): the driver's whole os.environ (vllm/v1/executor/ray_env_utils.py
#   get_driver_env_vars), less the worker-specific variables and ~/.config/vllm/ray_non_carry_over_env_vars.json,
#   applied with setdefault: a value already set on the worker's node wins;
# - the legacy RayDistributedExecutor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0): only what vllm/ray/ray_env.py's
#   get_env_vars_to_copy returns: vLLM's registered variables, names with one of DEFAULT_ENV_VAR_PREFIXES,
#   DEFAULT_EXTRA_ENV_VARS, and what VLLM_RAY_EXTRA_ENV_VARS_TO_COPY / _PREFIXES_TO_COPY add (comma-separated). There
#   the plan's EXL3_HOST_EXPERTS would be missing on the other nodes unless named.
RAY_COPIED_PREFIXES = ("VLLM_", "FLASH_ATTENTION_", "LMCACHE_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_")
RAY_COPIED_NAMES = frozenset({"PYTHONHASHSEED"})
RAY_EXTRA_VARS, RAY_EXTRA_PREFIXES = "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY", "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"
RAY_V2_SWITCH = "VLLM_USE_RAY_V2_EXECUTOR_BACKEND"


def _csv(text: str | None) -> set[str]:
    return {x.strip() for x in (text or "").split(",") if x.strip()}


def ray_executor(env: dict[str, str | None]) -> str:
    """``v2`` (vLLM 0.32's default: the driver's environment copied) or ``legacy`` (prefixes only)."""
    value = env.get(RAY_V2_SWITCH)
    return "legacy" if value is not None and value.strip() in ("0", "") else "v2"


def not_forwarded_to_ray_workers(env: dict[str, str | None], inherited: list[str] | None = None) -> list[str]:
    """The variables of a server's environment (set ones, and ``inherited`` names) that vLLM's Ray executor would
    not give its workers: none under the default executor (V2), the unnamed ones under the legacy one."""
    if ray_executor(env) == "v2":
        return []
    prefixes = RAY_COPIED_PREFIXES + tuple(sorted(_csv(env.get(RAY_EXTRA_PREFIXES))))
    named = RAY_COPIED_NAMES | _csv(env.get(RAY_EXTRA_VARS))
    names = [k for k, v in env.items() if v is not None] + list(inherited or [])
    return sorted({k for k in names if not k.startswith(prefixes) and k not in named})


def check_ray_env(pod: PodSpec | None, env: dict[str, str | None], inherited: list[str], stack_file: str) -> None:
    """Refuse a server over Ray whose environment would not reach the other nodes' workers."""
    if pod is None or pod.ray is None:
        return
    lost = not_forwarded_to_ray_workers(env, inherited)
    if lost:
        have = env.get(RAY_EXTRA_VARS)
        fix = ",".join(sorted(_csv(have) | set(lost)))
        raise InputError(f"stack file {stack_file}: the server runs over Ray across {pod.nodes} nodes with vLLM's "
                         f"legacy Ray executor ({RAY_V2_SWITCH}=0), which gives its workers only VLLM_*, "
                         f"FLASH_ATTENTION_*, NCCL_*, HF_* ... variables: {', '.join(lost)} would not reach the "
                         f"workers on the other nodes (a plan there would not be read on those nodes). Add to "
                         f"server.env: {RAY_EXTRA_VARS}: \"{fix}\", or leave {RAY_V2_SWITCH} unset (the default "
                         "executor copies the driver's environment)")


# --- Ray commands ------------------------------------------------------------------------------------------------

def _q(s: str) -> str:
    """Quote for the shell; a ``$VAR`` stays expandable."""
    return f'"{s}"' if re.fullmatch(r"\$[A-Z_][A-Z0-9_]*", s) else shlex.quote(s)


def ray_executable(spec: Any) -> str:
    pod: PodSpec = spec.pod
    return (pod.ray.ray if pod.ray and pod.ray.ray else None) or str(Path(spec.python).parent / "ray")


def head_commands(spec: Any, head_ip: str, extra: list[str] | None = None) -> list[str]:
    """The head node: export VLLM_HOST_IP, start Ray in its own session (its process group is what
    :func:`stop_commands` stops), wait until every node has joined, point vLLM's ``ray.init()`` at this cluster.

    Never ``ray stop``: it stops every Ray process on the machine, SkyPilot's own Ray (port 6380) among them."""
    pod: PodSpec = spec.pod
    if pod is None or pod.ray is None:
        return []
    cl = pod.ray
    more = "".join(f" {shlex.quote(x)}" for x in extra or [])
    wait = (f"{shlex.quote(spec.python)} -c 'import sys,time,ray; ray.init(address=sys.argv[1]); t=time.time()\n"
            'while sum(n["Alive"] for n in ray.nodes())<int(sys.argv[2]):\n'
            "  time.sleep(2)\n"
            "  if time.time()-t>float(sys.argv[3]): sys.exit(\"ray: not every node joined\")' "
            f"{_q(head_ip)}:{cl.port} {pod.nodes} {cl.wait_s:g}"
            # a cluster short of nodes would only fail later, inside vLLM: stop here, Ray included
            f" || {{ {stop_commands(spec)[0]}; exit 3; }}")
    return [f"export VLLM_HOST_IP={_q(head_ip)}",
            f"setsid {shlex.quote(ray_executable(spec))} start --head --port={cl.port} "
            f"--node-ip-address={_q(head_ip)} --num-gpus={pod.count} --disable-usage-stats --block{more} "
            f"> {RAY_HEAD_LOG} 2>&1 & echo $! > {RAY_HEAD_PID}",
            wait,
            f"export RAY_ADDRESS={_q(head_ip)}:{cl.port}"]


def worker_commands(spec: Any, head_ip: str, node_ip: str, extra: list[str] | None = None) -> list[str]:
    """Any other node: export VLLM_HOST_IP (its own address), join the head and block until the head goes away;
    its exit status is not the job's (the head's run decides)."""
    pod: PodSpec = spec.pod
    if pod is None or pod.ray is None:
        return []
    more = "".join(f" {shlex.quote(x)}" for x in extra or [])
    tries = max(1, int(pod.ray.wait_s // 5))
    # Every node's run starts together, the head's Ray a little later: wait for its port (bash's /dev/tcp) rather
    # than retry `ray start --block`, which also exits, non-zero, when the head goes away at the end.
    wait = (f"for i in $(seq {tries}); do (echo > /dev/tcp/{head_ip}/{pod.ray.port}) 2>/dev/null && break; "
            "sleep 5; done")
    return [f"export VLLM_HOST_IP={_q(node_ip)}", wait,
            f"{shlex.quote(ray_executable(spec))} start --address={_q(head_ip)}:{pod.ray.port} "
            f"--node-ip-address={_q(node_ip)} --num-gpus={pod.count} --disable-usage-stats --block{more} || true"]


def stop_commands(spec: Any) -> list[str]:
    """Stop the head's Ray: its process group, by the pid the head command wrote."""
    if spec.pod is None or spec.pod.ray is None:
        return []
    return [f"kill -TERM -- -$(cat {RAY_HEAD_PID}) 2>/dev/null || true"]


__all__ = ["KNOWN_ACCELERATORS", "check_ray_env", "not_forwarded_to_ray_workers",
           "PodSpec", "RayCluster", "PodField", "check_pod", "parallel_sizes",
           "pp_layer_ranges", "parse_partition", "head_commands", "worker_commands", "stop_commands"]
