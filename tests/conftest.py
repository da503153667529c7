"""Shared fixtures. The embedded vLLM CPU server is started once per test session, from the real stack file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED_STACK = ROOT / "configs" / "stacks" / "embedded.yaml"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def server_data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("server-data")


@pytest.fixture(scope="session")
def embedded_server(server_data_root: Path):
    """A real vLLM CPU server serving the tiny MoE; stopped (and checked gone) when the session ends.

    OFFLOAD_LAB_TEST_URL points the tests at a server that is already running instead (for quick iteration).
    """
    from offload_lab.server import stack

    url = os.environ.get("OFFLOAD_LAB_TEST_URL")
    if url:
        yield _External(url)
        return
    st = stack.load_stack(EMBEDDED_STACK, root=ROOT)
    server = stack.start_server(st, server_data_root, "test")
    try:
        yield server
    finally:
        server.stop()


class _External:
    def __init__(self, url: str):
        from offload_lab.load import client as load

        self.url = url
        self.model_name = load.first_model(url)
        self.run = None
