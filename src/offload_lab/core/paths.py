"""Where the repository and its data are, from any working directory.

A notebook started by Jupyter or nbconvert runs in ``notebooks/``; papermill and the CLI usually run at the root;
Quarto's hooks run wherever Quarto was started. Every one of them must find the same ``configs/`` and write into the
same ``data/``, so the roots are found here and nowhere else:

* the repository root: ``$OFFLOAD_LAB_ROOT`` when someone sets it, else the nearest directory up from the start (the
  working directory by default) that holds ``pyproject.toml`` and ``configs/``, else the checkout this package was
  installed from (an editable install), else the working directory. The notebook kernel sets no root of its own (the
  Makefile bakes no path into its spec): Jupyter starts it in the notebook's folder and papermill in the campaign's
  root, so a moved or second checkout finds itself and writes into its own ``data/``;
* the data root: an explicit path (relative ones are taken from the repository root, so ``data`` means the
  repository's ``data/`` whether a notebook runs from the root or from ``notebooks/``), else ``$OFFLOAD_LAB_DATA_ROOT``,
  else ``<root>/data``.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT_ENV = "OFFLOAD_LAB_ROOT"
DATA_ENV = "OFFLOAD_LAB_DATA_ROOT"
DATA_DIR = "data"
REHEARSALS_DIR = "data/rehearsals"  # a rehearsal's data root: never the pod campaign's data


def is_root(path: Path) -> bool:
    return (path / "pyproject.toml").is_file() and (path / "configs").is_dir()


def _walk_up(start: Path) -> Path | None:
    for p in (start, *start.parents):
        if is_root(p):
            return p
    return None


def find_root(start: Path | str | None = None) -> Path:
    """The repository root (see the module's docstring for the order in which it is looked for)."""
    env = os.environ.get(ROOT_ENV)
    if env and is_root(Path(env)):
        return Path(env).resolve()
    found = _walk_up(Path(start or Path.cwd()).resolve())
    if found is None:
        found = _walk_up(Path(__file__).resolve().parent)
    return found or Path.cwd().resolve()


def data_root(explicit: Path | str | None = None, root: Path | None = None) -> Path:
    """The data root; a relative ``explicit`` path is taken from the repository root."""
    if explicit is None or str(explicit) == "":
        env = os.environ.get(DATA_ENV)
        if env:
            return Path(env).resolve()
        explicit = DATA_DIR
    path = Path(explicit).expanduser()
    if not path.is_absolute():
        path = (root or find_root()) / path
    return path.resolve()


def resolve_in_root(path: Path | str, root: Path | None = None) -> Path:
    """A repository file named relative to the root (``configs/stacks/embedded.yaml``) from any working directory."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    base = root or find_root()
    return (base / p).resolve()


def relative_to_root(path: Path | str, root: Path | None = None) -> str:
    """A path as the repository names it (``data/embedded/...``) when inside it, else absolute."""
    p = Path(path).resolve()
    base = (root or find_root()).resolve()
    try:
        return str(p.relative_to(base))
    except ValueError:
        return str(p)
