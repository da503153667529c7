"""One folder that holds the HTML paper and every file it links to, so that its links still work once moved.

The HTML is self-contained (styles and figures inside), but each number links to the data file it came from and to
the notebook that wrote it. ``paper build --bundle DIR`` copies the page to ``DIR/paper.html``, beside the PDF, the
claims and the lock, and every linked file to ``DIR/data/<experiment>/<run>/...`` (``DIR/files/...`` for a file
outside a run, such as a notebook template), and rewrites each link to point there: relative, inside the folder.
"""

from __future__ import annotations

import html as html_lib
import re
import shutil
import urllib.parse
from pathlib import Path

from offload_lab.core.errors import InputError
from offload_lab.paper.figures import _run_dir_of

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
    targets = linked_files(page)
    missing = [t for t in targets if not t.is_file()]
    if missing:
        raise InputError(f"{page}: {len(missing)} link(s) point to no file, e.g. {missing[0]}; build the paper again")
    if dest.exists() and not (dest / "paper.html").is_file() and any(dest.iterdir()):
        raise InputError(f"--bundle {dest}: a folder that is not empty and holds no earlier bundle; choose another")
    if (dest / "data").is_dir():
        shutil.rmtree(dest / "data")
    dest.mkdir(parents=True, exist_ok=True)
    where = {t: _bundle_path(t) for t in targets}
    if len(set(where.values())) != len(where):
        raise InputError(f"{page}: two linked files would share one place in the bundle; report this")
    for t, rel in where.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(t, dest / rel)

    def rewrite(m: re.Match[str]) -> str:
        if not _local(m.group(3)):
            return m.group(0)
        rel = where[_target(m.group(3), page.parent)]
        return f"{m.group(1)}{m.group(2)}{urllib.parse.quote(rel.as_posix())}{m.group(2)}"

    out = dest / "paper.html"
    out.write_text(_HREF.sub(rewrite, page.read_text(encoding="utf-8")), encoding="utf-8")
    for f in extra or []:
        if Path(f).is_file():
            shutil.copy2(f, dest / Path(f).name)
    return out
