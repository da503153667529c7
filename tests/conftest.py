"""Shared fixtures. The embedded vLLM CPU server is started once per test session, from the real stack file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED_STACK = ROOT / "configs" / "stacks" / "embedded.yaml"

# Quarto off PATH for every test but those that ask for it (tests/quarto_env.py, issue 30).
from quarto_env import hide_quarto  # noqa: E402

hide_quarto()


# Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`) every test gets an xdist group, so that:
# - every test that starts a real vLLM runs on ONE worker, one at a time, first (the longest chain): those marked
#   `server`, those using a fixture below (a server of their own or through `make run`);
# - every other test runs with the rest of its module on whichever worker is free, so module- and class-scoped
#   fixtures are built once, as in a serial run.
# A new test that starts vLLM by another path must take the `server` marker (or one of these fixtures).
VLLM_GROUP = "vllm"
STARTS_VLLM_FIXTURES = frozenset({"embedded_server", "embedded_journey"})


def starts_vllm(item: pytest.Item) -> bool:
    return item.get_closest_marker("server") is not None or bool(STARTS_VLLM_FIXTURES & set(item.fixturenames))


GROUPS_KEY = "offload_lab_test_groups"  # xdist workerinput: the file where workers write each test's group


def group_of(item: pytest.Item) -> str:
    return VLLM_GROUP if starts_vllm(item) else item.nodeid.split("::", 1)[0]


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.xdist_group(group_of(item)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups_file = getattr(config, "workerinput", {}).get(GROUPS_KEY)
    if groups_file is None:
        return
    # An xdist worker. The vLLM chain is the longest unit: scheduled first (with --no-loadscope-reorder), it
    # overlaps with everything else instead of running last on an otherwise idle machine. Order inside each part is
    # kept. Every worker collects the same tests and writes the same map; the controller's scheduler reads it.
    vllm = [i for i in items if starts_vllm(i)]
    ids = {id(i) for i in vllm}
    items[:] = vllm + [i for i in items if id(i) not in ids]
    tmp = f"{groups_file}.{os.getpid()}"
    Path(tmp).write_text(json.dumps({i.nodeid: group_of(i) for i in items}))
    os.replace(tmp, groups_file)


# xdist's own loadgroup reads the group from a suffix it adds to each test's node id, which pytest 9.2's node ids
# no longer take (the groups are silently ignored); so the controller schedules by the map the workers wrote.
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[GROUPS_KEY] = _groups_file(node.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") not in ("load", "loadgroup"):  # plain `-n N` too: never two vLLMs at once
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = json.loads(Path(_groups_file(config)).read_text())
            plain = nodeid.rsplit("@", 1)[0] if nodeid not in self.groups else nodeid
            return self.groups.get(plain) or plain.split("::", 1)[0]

    return ByGroup(config, log)


def _groups_file(config: pytest.Config) -> str:
    if not hasattr(config, "_offload_lab_groups"):
        fd, path = tempfile.mkstemp(prefix="offload-lab-test-groups-", suffix=".json")
        os.close(fd)
        config._offload_lab_groups = path
        config.add_cleanup(lambda: Path(path).unlink(missing_ok=True))
    return config._offload_lab_groups


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
