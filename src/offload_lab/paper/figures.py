"""Figures of the paper, drawn by code from data files, each with a sidecar that says what it read.

A figure is registered with :func:`figure` like a claim: a name, the experiment whose latest ``ok`` run it reads, the
files it cites, and a function that draws on a matplotlib Axes through :class:`~offload_lab.paper.claims.Sources` (which
refuses files the figure does not cite). :func:`draw_figures` checks the cited files against the run's manifest,
draws ``<name>.svg`` (used by the paper: vector, and its text is outlined so the PDF audit sees only the caption) and
``<name>.png``, and writes ``<name>.json``, the sidecar: source files with sha256, run id, producer, and the sha256 of
each image. :func:`verify_figure` re-checks a sidecar before the paper is rendered.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from offload_lab.core import runs
from offload_lab.core.errors import ClaimError
from offload_lab.paper.claims import (
    HashCache,
    SourceFile,
    Sources,
    bind,
    experiments_of,
    find_runs,
)

SIDECAR_SCHEMA = 1
IMAGE_FORMATS = ("svg", "png")

DrawFn = Callable[[Sources, Any], None]


@dataclass(frozen=True)
class FigureDef:
    name: str
    experiment: str
    files: tuple[str, ...]
    draw: DrawFn
    description: str
    size_in: tuple[float, float] = (6.0, 2.7)

    @property
    def experiments(self) -> tuple[str, ...]:
        return experiments_of(self.experiment, self.files)


@dataclass
class FigureRecord:
    """What the sidecar holds."""

    name: str
    experiment: str
    run_id: str
    run_path: str
    notebook: str | None
    producer: str
    description: str
    files: list[SourceFile]
    outputs: dict[str, str] = field(default_factory=dict)  # image file name -> sha256
    notebook_output: str | None = None  # the executed notebook that wrote the data

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = SIDECAR_SCHEMA
        return d


def figure(
    name: str,
    *,
    experiment: str,
    files: Iterable[str],
    size_in: tuple[float, float] = (6.0, 2.7),
    registry: dict[str, FigureDef],
) -> Callable[[DrawFn], DrawFn]:
    target = registry

    def deco(fn: DrawFn) -> DrawFn:
        if name in target:
            raise ValueError(f"figure {name} is defined twice")
        doc = (fn.__doc__ or "").strip().splitlines()
        target[name] = FigureDef(name, experiment, tuple(files), fn, doc[0] if doc else name, size_in)
        return fn

    return deco


# --------------------------------------------------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------------------------------------------------

_STYLE = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "svg.fonttype": "path",  # outlines: no font needed to view it, and no stray numbers in the PDF's text layer
    "svg.hashsalt": "offload-lab",  # stable element ids, so the same data gives the same bytes
}


def legend_problems(fig: Any) -> list[str]:
    """Legends that run past the figure's edge, which savefig would cut ("in pinned host memor"): each legend's box
    must lie inside the figure (a legend above or beside the axes is fine while the layout makes room for it)."""
    fig.draw_without_rendering()  # the constrained layout places everything on draw (any canvas, or none)
    edge = fig.bbox
    problems = []
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes)]
    for legend in (lg for lg in legends if lg is not None and lg.get_visible()):
        box = legend.get_window_extent()
        if box.x0 < edge.x0 - 1 or box.y0 < edge.y0 - 1 or box.x1 > edge.x1 + 1 or box.y1 > edge.y1 + 1:
            labels = ", ".join(repr(t.get_text()) for t in legend.get_texts()[:3])
            problems.append(f"the legend ({labels}) runs past the figure's edge and would be clipped")
    return problems


def _data_boxes(ax: Any) -> list[Any]:
    """Display-space boxes of what an Axes draws from data: each point of its lines and collections (markers,
    scatter, error bars), and each bar or patch. Lines that span the axes (a bar, a y = x guide) are left out: a
    legend may sit over a reference line, not over a measurement."""
    from matplotlib.collections import Collection, PolyCollection
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import Bbox

    boxes = []
    for line in ax.get_lines():
        if line.get_gid() == "guide" or not line.get_visible():
            continue
        xy = line.get_xydata()
        if len(xy) == 0:
            continue
        pts = line.get_transform().transform(xy)
        boxes += [Bbox.from_extents(x - 2, y - 2, x + 2, y + 2) for x, y in pts]
    for coll in ax.collections:
        if not coll.get_visible() or coll.get_gid() == "guide":
            continue
        if isinstance(coll, PolyCollection):  # a band (fill_between): a legend over a band hides no point
            continue
        if isinstance(coll, Collection) and len(coll.get_offsets()):
            pts = coll.get_offset_transform().transform(coll.get_offsets())
            boxes += [Bbox.from_extents(x - 2, y - 2, x + 2, y + 2) for x, y in pts]
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_width() and patch.get_height():
            boxes.append(patch.get_window_extent())
    return boxes


def legend_covers(fig: Any) -> list[str]:
    """Legends inside an Axes that lie over what it draws from data (a point, a bar): one sentence each."""
    fig.draw_without_rendering()
    problems = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        box = legend.get_window_extent()
        hidden = [b for b in _data_boxes(ax) if b.overlaps(box)]
        if hidden:
            labels = ", ".join(repr(t.get_text()) for t in legend.get_texts()[:3])
            problems.append(f"the legend ({labels}) covers {len(hidden)} drawn point(s) or bar(s)")
    return problems


def _render(d: FigureDef, src: Sources, out_dir: Path) -> dict[str, str]:
    import matplotlib
    from matplotlib.figure import Figure

    outputs = {}
    with matplotlib.rc_context(_STYLE):
        # A Figure outside pyplot needs no backend: the caller's (a notebook's inline one) is left as it was.
        fig = Figure(figsize=d.size_in, layout="constrained")
        ax = fig.subplots()
        try:
            d.draw(src, ax)
            problems = legend_problems(fig)
            if problems:
                raise ClaimError(f"figure {d.name}: " + "; ".join(problems) + ": place it inside the axes "
                                 "(loc=...), in fewer columns, or give the figure more room (size_in)")
            for ext in IMAGE_FORMATS:
                target = out_dir / f"{d.name}.{ext}"
                meta = {"Date": None} if ext == "svg" else {"Software": None}
                runs.atomic_savefig(fig, target, format=ext, dpi=200, metadata=meta)
                outputs[target.name] = runs.sha256_file(target)
        finally:
            fig.clear()
    return outputs


def draw_one(
    d: FigureDef, run_dir: Path | None, out_dir: Path, repo_root: Path | None, hashes: HashCache | None = None,
    latest: Mapping[str, Path | None] | None = None,
) -> FigureRecord | None:
    """Draw one figure from the runs in ``latest`` (``run_dir`` for its own experiment); None when one is absent."""
    owner = f"figure {d.name}"
    latest = dict(latest or {})
    if run_dir is not None:
        latest[d.experiment] = Path(run_dir)
    bound = bind(owner, d.experiment, d.files, latest, repo_root, hashes)
    if isinstance(bound, str):
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        outputs = _render(d, bound.sources, out_dir)
    except ClaimError:
        raise
    except Exception as e:
        cited = ", ".join(f.path for f in bound.files)
        raise ClaimError(f"{owner}: drawing it from {cited} failed: {type(e).__name__}: {e}") from e
    info = bound.info
    record = FigureRecord(
        name=d.name,
        experiment=d.experiment,
        run_id=info.run_id,
        run_path=info.path,
        notebook=info.notebook,
        producer=f"{d.draw.__module__}:{d.draw.__name__}",
        description=d.description,
        files=bound.files,
        outputs=outputs,
        notebook_output=info.notebook_output,
    )
    runs.atomic_write_json(out_dir / f"{d.name}.json", record.to_dict())
    return record


def draw_figures(
    campaign: str,
    data_root: Path | str,
    out_dir: Path | str,
    repo_root: Path | str | None = None,
    registry: Mapping[str, FigureDef] | None = None,
) -> dict[str, FigureRecord | None]:
    """Draw every registered figure whose experiments all have an ok run; ``None`` marks a figure left out."""
    if registry is None:
        from offload_lab.paper.discovery import figure_registry

        registry = figure_registry()
    repo = Path(repo_root) if repo_root is not None else None
    latest = find_runs(Path(data_root), campaign, [e for d in registry.values() for e in d.experiments], repo)
    hashes = HashCache()
    out: dict[str, FigureRecord | None] = {}
    for name, d in sorted(registry.items()):
        out[name] = draw_one(d, None, Path(out_dir), repo, hashes, latest)
    return out


def _run_dir_of(path: Path) -> Path | None:
    """The run directory a data file lies in: the nearest directory above it holding a manifest."""
    for d in path.parents:
        if (d / runs.MANIFEST).is_file():
            return d
    return None


def _abs(path: str, repo_root: Path | None) -> Path:
    p = Path(path)
    return p if p.is_absolute() or repo_root is None else Path(repo_root) / p


def verify_figure(sidecar: Path, repo_root: Path | None = None) -> FigureRecord:
    """Re-check a drawn figure: its sidecar exists, its images are the ones drawn, its data still match the manifest."""
    sidecar = Path(sidecar)
    name = sidecar.stem
    owner = f"figure {name}"
    if not sidecar.is_file():
        raise ClaimError(f"{owner}: no sidecar {sidecar}; figures must be drawn by offload_lab.paper.figures from data")
    d = json.loads(sidecar.read_text(encoding="utf-8"))
    record = FigureRecord(
        name=d["name"],
        experiment=d["experiment"],
        run_id=d["run_id"],
        run_path=d["run_path"],
        notebook=d.get("notebook"),
        producer=d["producer"],
        description=d.get("description", ""),
        files=[SourceFile(**f) for f in d["files"]],
        outputs=dict(d.get("outputs") or {}),
        notebook_output=d.get("notebook_output"),
    )
    for image, want in record.outputs.items():
        p = sidecar.parent / image
        if not p.is_file() or runs.sha256_file(p) != want:
            raise ClaimError(f"{owner}: {p} is missing or is not the image its sidecar records; redraw it")
    for f in record.files:
        p = _abs(f.path, repo_root)
        if not p.is_file():
            raise ClaimError(f"{owner}: {f.path} is missing (the figure was drawn from it)")
        if Path(f.path).name == runs.MANIFEST:
            continue
        actual = runs.sha256_file(p)
        if actual != f.sha256:
            raise ClaimError(f"{owner}: {f.path} changed since the figure was drawn (sha256 {actual[:12]}…)")
        run_dir = _run_dir_of(p)
        manifest = runs.load_manifest(run_dir) if run_dir is not None else {}
        rel = p.resolve().relative_to(run_dir.resolve()).as_posix() if run_dir is not None else p.name
        if ((manifest.get("files") or {}).get(rel) or {}).get("sha256") != actual:
            raise ClaimError(f"{owner}: {f.path} does not match the manifest of run "
                             f"{manifest.get('run_id', record.run_id)}")
    return record


def draw_run_figures(run_dir: Path | str, experiment: str, out_dir: Path | str | None = None,
                     registry: Mapping[str, FigureDef] | None = None) -> list[Path]:
    """Draw an experiment's figures from one run while it is still being written (the notebook's own figures).

    Same drawing code as the paper's, so the notebook and the paper cannot disagree; no sidecar and no manifest check,
    because the run's manifest is finished (and these images hashed into it) only after the notebook ends.
    """
    if registry is None:
        from offload_lab.paper.discovery import figure_registry

        registry = figure_registry()
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "figures"
    out.mkdir(parents=True, exist_ok=True)
    manifest = runs.load_manifest(run_dir)
    written = []
    for name, d in sorted(registry.items()):
        if d.experiment != experiment or d.experiments != (experiment,):
            continue  # a figure that also reads other experiments' runs is drawn by the paper only
        outputs = _render(d, Sources(f"figure {name}", run_dir, manifest, d.files), out)
        written += [out / image for image in outputs]
    return written


