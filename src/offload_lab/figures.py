"""Figures of the paper, drawn by code from data files, each with a sidecar that says what it read.

A figure is registered with :func:`figure` like a claim: a name, the experiment whose latest ``ok`` run it reads, the
files it cites, and a function that draws on a matplotlib Axes through :class:`~offload_lab.claims.Sources` (which
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

from . import runs
from .claims import HashCache, SourceFile, Sources, bind, context_summary, experiments_of, find_runs
from .errors import ClaimError

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


FIGURES: dict[str, FigureDef] = {}


def figure(
    name: str,
    *,
    experiment: str,
    files: Iterable[str],
    size_in: tuple[float, float] = (6.0, 2.7),
    registry: dict[str, FigureDef] | None = None,
) -> Callable[[DrawFn], DrawFn]:
    target = FIGURES if registry is None else registry

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


def _context_axis(ax: Any, tokens: Any) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(tokens))
    ax.set_xticklabels([f"{int(t):,}" for t in tokens])
    ax.minorticks_off()
    ax.set_xlabel("prompt tokens")


def _band(ax: Any, x: Any, median: Any, lo: Any, hi: Any, color: str, label: str) -> None:
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0, label="p5–p95")
    ax.plot(x, median, marker="o", markersize=3.5, color=color, linewidth=1.4, label=label)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="upper left")


@figure("context_tpot", experiment="context", files=["summary.csv"])
def context_tpot(src: Sources, ax: Any) -> None:
    """Median decode time per output token against prompt length, with the p5–p95 band."""
    s = context_summary(src)
    x = s["context_tokens"]
    _band(ax, x, s["tpot_median_ms"], s["tpot_p5_ms"], s["tpot_p95_ms"], "#1f5f9e", "median TPOT")
    _context_axis(ax, x)
    ax.set_ylabel("TPOT (ms)")


@figure("context_ttft", experiment="context", files=["summary.csv"])
def context_ttft(src: Sources, ax: Any) -> None:
    """Median time to first token against prompt length, with the p5–p95 band."""
    s = context_summary(src)
    x = s["context_tokens"]
    _band(ax, x, s["ttft_median_s"], s["ttft_p5_s"], s["ttft_p95_s"], "#b0461b", "median TTFT")
    _context_axis(ax, x)
    ax.set_ylabel("TTFT (s)")


_REGIME_COLORS = {"short": "#1b5e9e", "cold_prefill": "#7a7a7a", "shared_prefix": "#b0461b",
                  "private_context": "#2e7d32", "agent_turns": "#6a3d9a"}


def _streams_axis(src: Sources, ax: Any) -> None:
    """Median output tok/s per stream against streams, one line per regime, p5 dashed, the bar drawn."""
    t = src.csv("regimes.csv")
    for regime, g in t.groupby("regime", sort=False):
        g = g.sort_values("streams")
        color = _REGIME_COLORS.get(str(regime), None)
        ax.plot(g["streams"], g["tok_s_median"], marker="o", markersize=3.5, linewidth=1.4, color=color,
                label=str(regime).replace("_", " "))
        ax.plot(g["streams"], g["tok_s_p5"], linestyle=":", linewidth=1.0, color=color)
    bar = float(src.parameters.get("bar_tok_s", 40.0))
    ax.axhline(bar, color="black", linestyle="--", linewidth=1.0, label="bar")
    ax.plot([], [], linestyle=":", color="grey", label="p5 (dotted)")
    ax.set_xticks(sorted(t["streams"].unique()))
    ax.set_xlabel("streams")
    ax.set_ylabel("output tok/s per stream")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=5)


@figure("concurrency_tok_s", experiment="concurrency", files=["regimes.csv", "manifest.json"], size_in=(6.0, 3.0))
def concurrency_tok_s(src: Sources, ax: Any) -> None:
    """Output tokens per second per stream against streams, for every regime, with the bar."""
    _streams_axis(src, ax)


@figure("agent_turns_tok_s", experiment="agent_turns", files=["regimes.csv", "manifest.json"])
def agent_turns_tok_s(src: Sources, ax: Any) -> None:
    """Agent turns: output tokens per second per stream against streams, with the bar."""
    _streams_axis(src, ax)


def _render(d: FigureDef, src: Sources, out_dir: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    outputs = {}
    with matplotlib.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=d.size_in, layout="constrained")
        try:
            d.draw(src, ax)
            for ext in IMAGE_FORMATS:
                target = out_dir / f"{d.name}.{ext}"
                meta = {"Date": None} if ext == "svg" else {"Software": None}
                runs.atomic_savefig(fig, target, format=ext, dpi=200, metadata=meta)
                outputs[target.name] = runs.sha256_file(target)
        finally:
            plt.close(fig)
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
    registry = FIGURES if registry is None else registry
    repo = Path(repo_root) if repo_root is not None else None
    latest = find_runs(Path(data_root), campaign, [e for d in registry.values() for e in d.experiments])
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
        raise ClaimError(f"{owner}: no sidecar {sidecar}; figures must be drawn by offload_lab.figures from data")
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
    registry = FIGURES if registry is None else registry
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


# --------------------------------------------------------------------------------------------------------------------
# Figures of the study's other sections (claims in offload_lab.claims_study)
# --------------------------------------------------------------------------------------------------------------------


@figure("prefill_cold_cached", experiment="context",
        files=["summary.csv", "concurrency:regimes.csv", "concurrency:manifest.json"], size_in=(6.0, 2.9))
def prefill_cold_cached(src: Sources, ax: Any) -> None:
    """Time to first token against prompt length: fresh prompts (the context experiment, one request at a time) and
    prompts whose prefix the server had cached (the concurrency regimes, one stream)."""
    from .claims_study import cached_points

    s = context_summary(src)
    x = s["context_tokens"]
    ax.fill_between(x, s["ttft_p5_s"], s["ttft_p95_s"], color="#b0461b", alpha=0.2, linewidth=0)
    ax.plot(x, s["ttft_median_s"], marker="o", markersize=3.5, color="#b0461b", linewidth=1.4,
            label="cold: a fresh prompt (median, p5–p95)")
    cached = cached_points(src)
    markers = {"shared_prefix": "s", "private_context": "D"}
    for kind, g in cached.groupby("kind", sort=False):
        ax.errorbar(g["prompt_tokens"], g["ttft_median_s"],
                    yerr=[[0] * len(g), (g["ttft_p95_s"] - g["ttft_median_s"]).clip(lower=0)],
                    fmt=markers.get(str(kind), "o"), markersize=5, color="#1f5f9e", capsize=2, linewidth=1.0,
                    label=f"cached: {str(kind).replace('_', ' ')} (median, to p95)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(x))  # the cold lengths; a cached prompt sits at its own length between them
    ax.set_xticklabels([f"{int(t):,}" for t in x])
    ax.minorticks_off()
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TTFT (s), log scale")
    ax.legend(frameon=False, loc="upper left")


@figure("audit_fit", experiment="audit", files=["fit.csv", "manifest.json"], size_in=(6.0, 2.2))
def audit_fit(src: Sources, ax: Any) -> None:
    """What each GPU must hold of the study-scale layout, with no plan and with each plan, against its usable
    memory."""
    f = src.csv("fit.csv")
    f = f[(f["checkpoint"] == "synthetic") & (f["ep"].astype(str) == "False")].reset_index(drop=True)
    labels = {"none": "every weight on the GPUs"}
    names = [labels.get(p, str(p).split("+")[0] + " plan") for p in f["plan"]]
    colors = ["#b0461b" if not bool(x) else "#1f5f9e" for x in f["fits"]]
    y = list(range(len(f)))
    ax.barh(y, f["per_gpu_gib"], color=colors, height=0.55, label="on each GPU")
    ax.barh(y, f["host_gib_per_gpu"], left=f["per_gpu_gib"], color="#c9ced6", height=0.55,
            label="in pinned host memory")
    usable = float(f["usable_gib"].dropna().iloc[0])
    ax.axvline(usable, color="black", linestyle="--", linewidth=1.0, label="usable per GPU")
    reserve = float(src.parameters.get("reserve_gib", 0.0))
    if reserve > 0:
        ax.axvline(usable - reserve, color="black", linestyle=":", linewidth=0.9, label="usable less the reserve")
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlabel("GiB per GPU")
    ax.set_xlim(left=0)
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=7)


@figure("plan_traffic", experiment="audit", files=["generators.csv"], size_in=(6.0, 2.6))
def plan_traffic(src: Sources, ax: Any) -> None:
    """Share of routed-expert traffic served from host memory, for each plan on the tiny model, on the text it was
    planned on, on held-out text of the same kind and on shifted text."""
    g = src.csv("generators.csv")
    width = 0.26
    sets = (("calibration", "planned on", "#1f5f9e"), ("heldout", "held out", "#6f93bf"),
            ("shifted", "shifted", "#c9ced6"))
    for k, (name, label, color) in enumerate(sets):
        ax.bar([i + (k - 1) * width for i in range(len(g))], 100 * g[f"host_share_{name}"], width, color=color,
               label=label)
    ax.set_xticks(range(len(g)))
    ax.set_xticklabels([str(p).replace("-", " ") for p in g["plan"]], fontsize=7)
    ax.set_ylabel("traffic from host (%)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3)


@figure("published_agent_turns", experiment="published", files=["agent_turns.csv", "figures.json"])
def published_agent_turns(src: Sources, ax: Any) -> None:
    """The published agent-turn sweep: output tokens/s per agent (median and p5) against agents, with the bar."""
    t = src.csv("agent_turns.csv").sort_values("streams")
    figs = {f["key"]: f["value"] for f in src.json("figures.json")}
    ax.plot(t["streams"], t["median_tok_s"], marker="o", markersize=3.5, linewidth=1.4, color="#6a3d9a",
            label="median")
    ax.plot(t["streams"], t["p5_tok_s"], linestyle=":", linewidth=1.0, color="#6a3d9a", label="p5")
    bar = float(figs.get("bar_tok_s_per_stream", 40))
    ax.axhline(bar, color="black", linestyle="--", linewidth=1.0, label="bar")
    margin = figs.get("provisioning_margin")
    if margin is not None:
        ax.axhline(bar * (1 + float(margin)), color="black", linestyle=":", linewidth=0.8, label="bar with margin")
    ax.set_xticks(list(t["streams"]))
    ax.set_xlabel("agents at once")
    ax.set_ylabel("output tok/s per agent")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False)


@figure("boot_spread", experiment="boot_spread", files=["per_boot.csv"], size_in=(6.0, 2.7))
def boot_spread(src: Sources, ax: Any) -> None:
    """Median TPOT of each boot at each context length, with that boot's p5 to p95: the spread between boots beside
    the spread within one."""
    per = src.csv("per_boot.csv")
    per = per[per["metric"] == "tpot_ms"]
    groups = sorted(per["group"].unique())
    boots = sorted(per["boot"].unique())
    width = 0.8 / max(len(boots), 1)
    colors = ("#1f5f9e", "#b0461b", "#2e7d32", "#6a3d9a", "#7a7a7a")
    for j, b in enumerate(boots):
        sub = per[per["boot"] == b].set_index("group").reindex(groups)
        x = [i + (j - (len(boots) - 1) / 2) * width for i in range(len(groups))]
        ax.errorbar(x, sub["median"], yerr=[sub["median"] - sub["p5"], sub["p95"] - sub["median"]], fmt="o",
                    markersize=3.5, capsize=2.5, linewidth=1.0, color=colors[j % len(colors)],
                    label=f"boot {int(b) + 1}")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{int(g):,}" for g in groups])
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TPOT (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(boots))
