"""One folder that holds the HTML paper and every file it links to, so that its links still work once moved.

The HTML is self-contained (styles and figures inside), but each number links to the data file it came from and to
the notebook that wrote it. ``paper build --bundle DIR`` copies the page to ``DIR/paper.html``, beside the PDF, the
claims and the lock, and every linked file to ``DIR/data/<experiment>/<run>/...`` (``DIR/files/...`` for a file
outside a run, such as a notebook template), and rewrites each link to point there: relative, inside the folder.
"""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import shutil
import urllib.parse
from pathlib import Path

from offload_lab.core.errors import InputError
from offload_lab.paper.figures import _run_dir_of

# Written into every bundle, listing the files it wrote: only a folder holding it is a previous bundle, and only the
# files it lists are ever removed (a folder that holds the user's own paper.html or data/ is never touched).
MARKER = ".offload-lab-bundle.json"
_HREF = re.compile(r"""(<a\b[^>]*?\bhref=)(["'])(.*?)\2""", re.IGNORECASE | re.DOTALL)


def _local(href: str) -> bool:
    parsed = urllib.parse.urlparse(href)
    return not (parsed.scheme and parsed.scheme != "file") and not href.startswith(("#", "//")) and bool(parsed.path)


def _target(href: str, page_dir: Path) -> Path:
    parsed = urllib.parse.urlparse(html_lib.unescape(href))
    path = Path(urllib.parse.unquote(parsed.path))
    return (path if parsed.scheme == "file" or path.is_absolute() else page_dir / path).resolve()


def _bundle_path(target: Path) -> Path:
    """``data/<experiment>/<run>/<file>`` for a file of a run (the folder its manifest is in), else
    ``files/<folder>/<name>``."""
    run = _run_dir_of(target)
    if run is not None:
        return Path("data") / run.parent.name / run.name / target.relative_to(run)
    return Path("files") / target.parent.name / target.name


def linked_files(page: Path) -> list[Path]:
    """Every local file the page's links point to, in order, once each."""
    text = Path(page).read_text(encoding="utf-8")
    seen: dict[Path, None] = {}
    for m in _HREF.finditer(text):
        if _local(m.group(3)):
            seen.setdefault(_target(m.group(3), Path(page).parent), None)
    return list(seen)


def make_bundle(page: Path, dest: Path, extra: list[Path] | None = None) -> Path:
    """Write the bundle into ``dest`` (made, or emptied of a previous bundle); returns the bundle's page."""
    page, dest = Path(page).resolve(), Path(dest).resolve()
    if dest.exists() and not dest.is_dir():
        raise InputError(f"--bundle {dest}: a file, not a folder; choose a folder")
    previous = _previous_files(dest)
    if previous is None:
        raise InputError(f"--bundle {dest}: a folder that is not empty and was not written by `paper build "
                         "--bundle` (no bundle marker); its files are not ours to replace: choose a new or empty "
                         "folder")
    targets = linked_files(page)
    missing = [t for t in targets if not t.is_file()]
    if missing:
        raise InputError(f"{page}: {len(missing)} link(s) point to no file, e.g. {missing[0]}; build the paper again")
    for rel in previous:
        p = dest / rel
        if p.is_file() and not p.is_symlink() and dest in p.resolve().parents:
            p.unlink()
    for d in sorted({(dest / rel).parent for rel in previous}, key=lambda d: len(d.parts), reverse=True):
        while d != dest and d.is_dir() and dest in d.parents and not any(d.iterdir()):
            d.rmdir()
            d = d.parent
    dest.mkdir(parents=True, exist_ok=True)
    where = {t: _bundle_path(t) for t in targets}
    if len(set(where.values())) != len(where):
        raise InputError(f"{page}: two linked files would share one place in the bundle; report this")
    for t, rel in where.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(t, dest / rel)
        if rel.suffix == ".ipynb":  # a run's notebook, perhaps kept before notebooks were redacted: never shared as is
            _redacted(dest / rel, t)

    def rewrite(m: re.Match[str]) -> str:
        if not _local(m.group(3)):
            return m.group(0)
        rel = where[_target(m.group(3), page.parent)]
        return f"{m.group(1)}{m.group(2)}{urllib.parse.quote(rel.as_posix())}{m.group(2)}"

    out = dest / "paper.html"
    written = [rel.as_posix() for rel in where.values()] + ["paper.html"]
    (dest / MARKER).write_text(json.dumps({"files": written}), encoding="utf-8")  # before: a crash leaves it right
    out.write_text(_HREF.sub(rewrite, page.read_text(encoding="utf-8")), encoding="utf-8")
    for f in extra or []:
        if Path(f).is_file():
            shutil.copy2(f, dest / Path(f).name)
            written.append(Path(f).name)
    (dest / MARKER).write_text(json.dumps({"files": written}), encoding="utf-8")
    return out


def _redacted(copy: Path, source: Path) -> None:
    from offload_lab.core.notebooks import redact_notebook

    try:
        redact_notebook(copy)
    except Exception as e:  # not a notebook nbformat reads: it is not shared unredacted
        copy.unlink()
        raise InputError(f"{source}: the paper links this notebook, which cannot be read to redact it "
                         f"({type(e).__name__}); check the run with `offload-lab runs verify`") from e


def _previous_files(dest: Path) -> list[str] | None:
    """The files a previous bundle in ``dest`` wrote ([] for a new or empty folder); None when ``dest`` holds files
    that no bundle of ours wrote."""
    if not dest.exists() or not any(dest.iterdir()):
        return []
    marker = dest / MARKER
    if not marker.is_file() or marker.is_symlink():
        return None
    try:
        files = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return [f for f in files if not os.path.isabs(f) and ".." not in Path(f).parts]
