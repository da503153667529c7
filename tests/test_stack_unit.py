"""Boot classification on log excerpts as vLLM and PyTorch print them, and stack-file validation."""

import pytest

from offload_lab.server import stack
from offload_lab.core.errors import InputError

# vllm/v1/core/kv_cache_utils.py::_check_enough_kv_cache_memory
KV_TOO_SMALL = (
    "ValueError: To serve at least one request with the model's max seq len (262144), (12.50 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (3.10 GiB). Based on the available memory, the "
    "estimated maximum model length is 65024. Try increasing `gpu_memory_utilization`"
)
KV_NONE = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
# torch/csrc/... as raised by the caching allocator while weights load
TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of "
    "94.97 GiB of which 1.12 GiB is free."
)
BAD_FLAG = "api_server.py: error: unrecognized arguments: --no-such-flag"


@pytest.mark.parametrize("log,returncode,expected", [
    (KV_TOO_SMALL, 1, "oom_kv_cache"),
    (KV_NONE, 1, "oom_kv_cache"),
    (TORCH_OOM, 1, "oom_load"),
    ("RuntimeError: DefaultCPUAllocator: not enough memory: you tried to allocate 8589934592 bytes.", 1, "oom_load"),
    ("", -9, "oom_load"),
    (BAD_FLAG, 2, "exited"),
])
def test_failed_boots_are_classified(log, returncode, expected):
    assert stack.classify_boot(returncode, log, ready=False, timed_out=False) == expected


def test_ready_and_timeout():
    assert stack.classify_boot(None, TORCH_OOM, ready=True, timed_out=False) == "ready"
    assert stack.classify_boot(None, "loading...", ready=False, timed_out=True) == "timeout"


def test_stack_file_errors_name_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\npython: p\nmodel: {path: m}\nserver: {argz: []}\n")
    with pytest.raises(InputError, match=r"bad\.yaml[\s\S]*server\.argz"):
        stack.load_stack(bad)
    with pytest.raises(InputError, match="does not exist"):
        stack.load_stack(tmp_path / "missing.yaml")


def test_taken_port_is_a_clear_error(tmp_path):
    import socket

    f = tmp_path / "s.yaml"
    f.write_text(f"name: s\npython: {__import__('sys').executable}\nmodel: {{path: {tmp_path}}}\n")
    st = stack.load_stack(f, root=tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(InputError, match=f"port {port} .* in use"):
            stack.start_server(st, tmp_path / "data", "c", port=port)
