"""Find the experiments at run time: the paper engine never imports one by name.

Every folder of :mod:`offload_lab.experiments` is an experiment (or a paper section that reads other experiments'
runs, such as ``boots`` and ``topology``). Its modules whose names start with ``claims`` declare claims into their own
``SECTION``, and those whose names start with ``figures`` declare figures the same way; this module imports them by
the names it finds on disk and merges their sections; its ``section*.qmd`` files are its prose in the paper
(:mod:`offload_lab.paper.sections`). A new experiment is one new folder: nothing here changes.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any

EXPERIMENTS_PACKAGE = "offload_lab.experiments"
CLAIM_MODULES = "claims"
FIGURE_MODULES = "figures"
SECTION_GLOB = "section*.qmd"  # an experiment's prose for the paper (offload_lab.paper.sections reads it)


def _package() -> ModuleType:
    return importlib.import_module(EXPERIMENTS_PACKAGE)


def experiment_names() -> list[str]:
    """Every experiment folder, in name order."""
    return sorted(m.name for m in pkgutil.iter_modules(_package().__path__) if m.ispkg and not m.name.startswith("_"))


def experiment_module(name: str, part: str) -> ModuleType | None:
    """``offload_lab.experiments.<name>.<part>``, or None when that experiment has no such module."""
    if not name.isidentifier() or not part.isidentifier():
        return None  # a campaign's own notebook named `my-notebook.ipynb` (or `.ipynb`): no module of ours
    full = f"{EXPERIMENTS_PACKAGE}.{name}.{part}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as e:
        # The module, or the experiment's whole folder: a campaign file that runs the user's own notebook (whose
        # runs sit beside the project's when it reuses a campaign's name) has no folder in offload_lab.experiments.
        if e.name in (full, f"{EXPERIMENTS_PACKAGE}.{name}"):
            return None
        raise


def experiment_dir(name: str) -> Path:
    """The folder of experiment ``name``, wherever the package is installed."""
    return Path(_package().__path__[0]) / name


def section_files() -> list[tuple[str, Path]]:
    """(experiment, file) for every experiment folder's prose fragment, in folder then file name order."""
    return [(name, p) for name in experiment_names() for p in sorted(experiment_dir(name).glob(SECTION_GLOB))]


def _modules(prefix: str) -> list[ModuleType]:
    out = []
    for name in experiment_names():
        pkg = importlib.import_module(f"{EXPERIMENTS_PACKAGE}.{name}")
        for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            if m.name.startswith(prefix):
                out.append(importlib.import_module(f"{pkg.__name__}.{m.name}"))
    return out


def _merged(prefix: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for mod in _modules(prefix):
        section = getattr(mod, "SECTION", None)
        if section is None:
            raise TypeError(f"{mod.__name__} declares no SECTION: a {prefix} module declares into its own SECTION")
        twice = sorted(set(merged) & set(section))
        if twice:
            raise ValueError(f"{', '.join(twice)} declared twice (again in {mod.__name__})")
        merged.update(section)
    return merged


@functools.cache
def claim_registry() -> dict[str, Any]:
    """Every claim of every experiment, by name."""
    return _merged(CLAIM_MODULES)


@functools.cache
def figure_registry() -> dict[str, Any]:
    """Every figure of every experiment, by name."""
    return _merged(FIGURE_MODULES)
