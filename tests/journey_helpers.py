"""A bare copy of the repository, as a user's fresh clone is: nothing beside it, no ``../shared``, no
``OFFLOAD_LAB_*`` variables, ``HOME`` in a temporary folder, and the Makefile's own targets run in it.

Installing the environments again for every journey would cost minutes and gigabytes, so the copy gets *overlay*
environments instead: a new virtual environment whose ``site-packages`` puts the copy's own ``src/`` first and then
reads the checkout's installed packages, with every console script re-pointed at the overlay's interpreter. Code,
configs, notebooks, data and the notebooks' kernel are the copy's; only third-party packages are shared. The server's
and SkyPilot's environments hold no project code and are linked. ``make`` is told never to remake the install
markers (``-o``), so nothing can reinstall into the checkout through a link.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENVS = ROOT / ".venvs"
LAB = VENVS / "lab"
PY_DIR = f"python{sys.version_info.major}.{sys.version_info.minor}"
# Install markers make must take as they are: the copy's environments are overlays, never installed into.
KEEP = (".venvs/lab/.installed", ".venvs/server/.installed", ".venvs/sky/.installed")


def working_tree_files(root: Path = ROOT) -> list[str]:
    """What a clone of the working tree holds: tracked files and untracked ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout.decode()
    return [p for p in out.split("\0") if p and (root / p).is_file()]


def _overlay_lab(copy: Path) -> None:
    lab = copy / ".venvs" / "lab"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(lab)], check=True)
    site = lab / "lib" / PY_DIR / "site-packages"
    base_site = LAB / "lib" / PY_DIR / "site-packages"
    # The copy's src/ first, then the checkout's packages (and their .pth files: addsitedir runs them).
    (site / "00_journey_overlay.pth").write_text(
        f"{copy / 'src'}\nimport site; site.addsitedir({str(base_site)!r})\n")
    python = lab / "bin" / "python"
    for script in (LAB / "bin").iterdir():
        target = lab / "bin" / script.name
        if target.exists() or script.is_dir():
            continue
        head = script.read_bytes()[:200]
        if head.startswith(b"#!") and str(LAB).encode() in head.split(b"\n", 1)[0]:
            text = script.read_text(encoding="utf-8")
            first, rest = text.split("\n", 1)
            target.write_text(f"#!{python}\n{rest}", encoding="utf-8")
            target.chmod(0o755)
    (lab / ".installed").touch()


def make_bare_copy(dest: Path) -> Path:
    """Copy the working tree to ``dest/repo`` (whose parent holds nothing else) with overlay environments."""
    copy = dest / "repo"
    for rel in working_tree_files():
        target = copy / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    (copy / ".venvs").mkdir()
    _overlay_lab(copy)
    for name in ("server", "sky"):
        if (VENVS / name).is_dir():
            (copy / ".venvs" / name).symlink_to(VENVS / name, target_is_directory=True)
    return copy


def bare_env(home: Path) -> dict[str, str]:
    """The environment of a new user's shell: none of the project's variables, a HOME of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OFFLOAD_LAB_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH",
                                                             "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), XDG_STATE_HOME=str(home / ".local/state"),
               XDG_DATA_HOME=str(home / ".local/share"), XDG_CONFIG_HOME=str(home / ".config"), MPLBACKEND="Agg")
    return env


def make(copy: Path, env: dict[str, str], *targets: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    """``make TARGET...`` in the copy, as the README says, with the install markers kept as they are."""
    args = ["make", "-C", str(copy)]
    for marker in KEEP:
        args += ["-o", marker]
    return subprocess.run([*args, *targets], env=env, capture_output=True, text=True, timeout=timeout)


def tail(done: subprocess.CompletedProcess, n: int = 6000) -> str:
    return (done.stdout + "\n" + done.stderr)[-n:]
