"""Where a command may write, and what a path that is not the regular file a reader wants really is.

Every writer (``--out``, ``--data-dir``, ``--bundle``) calls :func:`check_output` before any work, so that a bad place
is an :class:`InputError` naming the flag (exit 2) and never a half-done job or a traceback: the place must exist or
be creatable, be of the kind the flag wants, be writable, lie on no kernel file system (``/proc``, ``/sys``,
``/dev``), lie inside no run directory (a run's files are sealed by its manifest), stay out of the places the caller
names (a paper's outputs out of the data tree) and be none of the command's other outputs.

Readers call :func:`require_file`: a FIFO, a device, a directory or a broken link is named for what it is, never
"does not exist", and is never opened (a FIFO would block the reader for ever).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Mapping

from offload_lab.core.errors import InputError

# Kernel file systems: their "files" are not files (reading /proc/self/environ prints the environment; writing
# /proc/... fails half way).
SPECIAL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))

# A run's manifest, named here because this is the lowest module that recognises a run folder (a folder holding
# one); core.runs, above, uses it.
MANIFEST = "manifest.json"


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(path: Path | str) -> str | None:
    """What ``path`` is, in words ("a directory", "a symbolic link to a named pipe (FIFO)"); None when nothing is
    there. Never opens it."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # the latter: a file stands where a folder of the path would
        if p.is_symlink():
            return f"a broken symbolic link (to {os.readlink(p)})"
        return None
    except OSError as e:
        return f"unreachable ({e.strerror or e})"
    kind = next((word for test, word in _KINDS if test(mode)), "neither a file nor a folder")
    return ("a symbolic link to " + kind) if p.is_symlink() else kind


def special_root(path: Path | str) -> Path | None:
    """The kernel file system (/proc, /sys, /dev) that ``path`` lies on, if any."""
    resolved = Path(path).expanduser().resolve()
    return next((r for r in SPECIAL_ROOTS if resolved == r or r in resolved.parents), None)


def require_file(path: Path | str, what: str, hint: str = "") -> Path:
    """``path`` as a regular file to read; else an InputError saying what is there instead (``hint``: what to give)."""
    p = Path(path)
    tail = f"; {hint}" if hint else ""
    if "\x00" in str(path):
        raise InputError(f"{what} {str(path)!r}: a path cannot hold a NUL byte{tail}")
    kind = kind_of(p)
    if kind is None:
        raise InputError(f"{what} {p} does not exist{tail}")
    if (root := special_root(p)) is not None:
        raise InputError(f"{what} {p}: is on {root}, a kernel file system, not a file of yours{tail}")
    if not kind.endswith("a file"):
        raise InputError(f"{what} {p}: is {kind}, not a file{tail or '; give a file'}")
    return p


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def _run_above(resolved: Path) -> Path | None:
    """The run directory (a folder with a manifest) that holds ``resolved``, if any."""
    for d in (resolved, *resolved.parents):
        if (d / MANIFEST).is_file():
            return d
    return None


def _not_writable(folder: Path) -> str | None:
    """Why nothing can be written in an existing folder, or None."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return f"{folder} is on a read-only file system"
    except OSError:
        pass
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable by this user"
    return None


def check_output(path: Path | str, flag: str, kind: str = "dir", *, force: bool = True,
                 outside: Mapping[str, Path | str | None] | None = None,
                 others: Mapping[str, Path | str | None] | None = None, allow_run: bool = False) -> Path:
    """Refuse a place a command cannot or must not write (see the module's docstring); return it.

    ``kind`` is "dir" (a folder, created if missing) or "file" (a file, its folders created if missing; an existing
    one needs ``force``). ``outside``: places it must not be in, by what to call them ("the data tree"). ``others``:
    the command's other outputs by flag. ``allow_run``: the writer adds to a run directory on purpose."""
    text = str(path)
    if not text or "\x00" in text:
        raise InputError(f"{flag} {text!r}: not a path; give a {'folder' if kind == 'dir' else 'file name'}")
    p = Path(path).expanduser()
    resolved = p.resolve()
    if (root := special_root(p)) is not None:
        raise InputError(f"{flag} {p}: is on {root}, a kernel file system; give a folder of yours")
    for name, place in (outside or {}).items():
        if place is not None and _inside(resolved, Path(place).expanduser().resolve()):
            raise InputError(f"{flag} {p}: is inside {name} ({place}), whose files are data; write it elsewhere "
                             "(the default is fine)")
    if not allow_run and (run := _run_above(resolved)) is not None:
        raise InputError(f"{flag} {p}: is inside the run directory {run}, whose files its manifest seals; "
                         "give a place outside every run")
    for other_flag, other in (others or {}).items():
        if other is None:
            continue
        o = Path(other).expanduser().resolve()
        if _inside(resolved, o) or _inside(o, resolved):
            same = "the same place as" if o == resolved else "inside" if _inside(resolved, o) else "around"
            raise InputError(f"{flag} {p}: is {same} {other_flag} {other}; give the two separate places")
    found = kind_of(p)
    want = "a directory" if kind == "dir" else "a file"
    if found is not None and not found.endswith(want):
        what = "not a directory; give a folder" if kind == "dir" else "not a file; give a file name"
        raise InputError(f"{flag} {p}: is {found}, {what}")
    if found is not None and kind == "file" and not force:
        raise InputError(f"{flag} {p} exists; pass --force to replace it, or choose another name")
    # The nearest folder that exists must let us create (or write) the rest.
    start = p if (found is not None and kind == "dir") else p.parent
    folder = start if str(start) else Path(".")
    while kind_of(folder) is None and folder != folder.parent:
        folder = folder.parent
    folder_kind = kind_of(folder) or "missing"
    if not folder_kind.endswith("a directory"):
        raise InputError(f"{flag} {p}: {folder} is {folder_kind}, not a folder, so nothing can be written there")
    if (why := _not_writable(folder)) is not None:
        raise InputError(f"{flag} {p}: cannot be written: {why}; choose a writable place")
    return p
