"""Which tests see Quarto (issue 30). `.ci/run` puts Quarto on PATH, as a user who installed it has it; every test
then runs without it (the pandoc + Typst build, what a user without Quarto gets, and what the bare-clone journeys
check), except those that ask for it through :func:`use_quarto`, which skip, with the reason, where there is none.

conftest.py calls :func:`hide_quarto` once per process. The path found first is kept in QUARTO_ENV, so that
pytest-xdist workers, started from a process whose PATH has already lost it, still find it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

QUARTO_ENV = "OFFLOAD_LAB_TEST_QUARTO"  # an OFFLOAD_LAB_ variable: the bare-clone journeys drop it with the rest
NO_QUARTO = ("quarto is not on PATH: install Quarto 1.7 (CI: ../shared/tools/quarto/install-quarto, as .ci/run "
             "does) to render the paper through it")


def _without_quarto(path: str) -> str:
    return os.pathsep.join(d for d in path.split(os.pathsep) if not (d and (Path(d) / "quarto").is_file()))


def hide_quarto() -> str | None:
    """Take every directory holding a ``quarto`` off PATH; returns the quarto found first (or kept from before)."""
    found = os.environ.get(QUARTO_ENV) or shutil.which("quarto")
    if found:
        os.environ[QUARTO_ENV] = found
    os.environ["PATH"] = _without_quarto(os.environ.get("PATH", ""))
    return found


def quarto() -> str | None:
    return os.environ.get(QUARTO_ENV) or shutil.which("quarto")


def use_quarto(monkeypatch: pytest.MonkeyPatch) -> str:
    """Put the real Quarto back on PATH for one test (or skip it, saying why)."""
    q = quarto()
    if not q:
        pytest.skip(NO_QUARTO)
    monkeypatch.setenv("PATH", f"{Path(q).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return q


def env_with_quarto(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default: this process's) with the real Quarto's directory first on PATH."""
    env = dict(os.environ if env is None else env)
    q = quarto()
    if q:
        env["PATH"] = f"{Path(q).parent}{os.pathsep}{env.get('PATH', '')}"
    return env
