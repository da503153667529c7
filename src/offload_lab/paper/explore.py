"""Every run of a campaign as tidy tables, for people who would rather look than read.

:func:`load_campaign` reads every run directory of a campaign, whatever its outcome, into one :class:`CampaignTables`:
one table per kind of record, each row carrying the run it came from, the run's outcome, the boot (server start) that
served it and the machine it ran on, so that runs and boots can be set side by side with a group-by or a pivot
(:meth:`CampaignTables.compare`). ``notebooks/explore.ipynb`` is its front end: :func:`show` displays one experiment as
tidy tables (:func:`tidy`: short run names, a few significant digits) and a picture (:func:`plot`,
:mod:`offload_lab.paper.explore_plots`), and nothing here touches matplotlib's backend.

Each experiment folder says how its runs read and look: its ``explore.py`` (found at run time like its claims and
figures, :func:`explore_module`) holds ``TABLES``, table name -> ``read(run_dir) -> DataFrame`` (a table of the same
name from several experiments is one table), optionally ``COMPARE`` (``(table, value, index)`` set side by side per
run, :func:`side_by_side`) and ``plot(tables, view) -> Figure | None``. The folder is the run's notebook's name, so
``quality_float32`` runs of ``notebooks/quality.ipynb`` read as ``quality``. A run whose folder has no ``explore.py``
reads as every top-level CSV it holds, drawn by :func:`~offload_lab.paper.explore_plots.plot_generic`. This module
names no experiment.

Nothing here is what the paper prints: the paper reads only through claims (:mod:`offload_lab.paper.claims`), which check
every file against its manifest. This module reads what is there, checks each run with :func:`runs.verify_run`, and
reports what did not match in ``problems`` instead of failing, so that a damaged or half-written run can still be
looked at.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.core import runs
from offload_lab.core import paths
from offload_lab.paper import discovery, explore_plots
from offload_lab.paper.run_labels import differing, run_labels, short_run  # noqa: F401  (explore.run_labels: the notebook's API)

EXPLORE_MODULE = "explore"  # an experiment folder's explore.py
BOOT_RECORD = "boot.json"  # a run holding it is a boot (server start)
# Columns of the raw event logs too bulky for a table (one entry per token).
_BULKY = ("token_times_ns", "chunk_tokens", "server_sent_ns")


@dataclass
class CampaignTables:
    """Every run of one campaign, as tables. Each table has ``experiment``, ``run_id``, ``outcome``, ``boot`` and
    ``host`` columns besides its own. The experiments' tables are attributes too (``t.context``, ``t.levels``): every
    table an ``explore.py`` declares, empty when the campaign has no run of it."""

    campaign: str
    data_root: Path
    runs: pd.DataFrame  # one row per run: experiment, outcome, times, notebook, boot, host, git, parameters
    files: pd.DataFrame  # every file of every run with its sha256 as the manifest records it
    problems: pd.DataFrame  # files missing, changed or added since their run ended; files a table could not read
    declared: dict[str, pd.DataFrame] = field(default_factory=dict)  # the tables the explore.py files declare
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)  # "<experiment>.<csv stem>" of the others

    def __getattr__(self, name: str) -> pd.DataFrame:
        declared = self.__dict__.get("declared") or {}
        if name in declared:
            return declared[name]
        raise AttributeError(f"no table {name!r}: the tables are {', '.join(sorted(self.tables()))}")

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table by name (``extra`` ones prefixed with their experiment)."""
        return {"runs": self.runs, "files": self.files, "problems": self.problems, **self.declared, **self.extra}

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
    """The boot (server start) a run was measured against: the one the runner names, else its own id when the run
    is a boot (it holds the boot record)."""
    boot = (manifest.get("server") or {}).get("boot_run")
    if boot:
        return Path(boot).name
    return manifest.get("run_id", run_dir.name) if BOOT_RECORD in (manifest.get("files") or {}) else None


def _tag(frame: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    """The table with its run's columns in front; a column of the file's own with one of those names gets a
    ``_in_file`` suffix (an analysis run's table names the runs it read)."""
    keys = ("experiment", "run_id", "outcome", "boot", "host")
    frame = frame.rename(columns={k: f"{k}_in_file" for k in keys if k in frame.columns})
    for i, key in enumerate(keys):
        frame.insert(i, key, row[key])
    return frame


# Readers the experiments' explore.py files share. A missing file is a problem, not an error.

def events(run_dir: Path, pattern: str) -> pd.DataFrame:
    """Every request of the event logs matching ``pattern`` (bulky per-token columns left out), with the regime."""
    frames = []
    for path in sorted(run_dir.glob(pattern)):
        # Of the per-token times, each request's token gaps (ITL, ms): the latency tables' ITL percentiles.
        rows = [{**{k: v for k, v in e.items() if k not in _BULKY}, **_itl(e)} for e in runs.read_events(path)]
        rows = [r for r in rows if r.get("kind", "request") == "request"]
        if rows:
            f = pd.DataFrame(rows)
            rel = path.parent.relative_to(run_dir).as_posix()
            if "regime" not in f.columns:
                f.insert(0, "regime", rel if rel != "." else None)
            frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _itl(event: dict[str, Any]) -> dict[str, Any]:
    t = event.get("token_times_ns") or []
    return {"itl_ms": [(b - a) / 1e6 for a, b in zip(t, t[1:])]} if len(t) > 1 else {}


def verdicts(run_dir: Path) -> pd.DataFrame:
    """A sweep's ``verdicts.json``: one row per regime."""
    d = _read_json(run_dir / "verdicts.json")
    rows = [{"regime": name, **{k: v for k, v in v.items() if not isinstance(v, dict) and k != "regime"}}
            for name, v in d.items()]
    return pd.DataFrame(rows)


def csv(name: str) -> Callable[[Path], pd.DataFrame]:
    """A reader of one CSV file of the run."""
    return lambda run_dir: pd.read_csv(Path(run_dir) / name)


def kind_of(manifest: dict[str, Any], experiment: str) -> str:
    """The experiment folder a run belongs to: its notebook's name (``notebooks/quality.ipynb`` -> ``quality``),
    else its experiment's name."""
    nb = manifest.get("notebook")
    path = nb.get("path") if isinstance(nb, dict) else nb
    return Path(str(path)).stem if path else experiment


def explore_module(kind: str) -> Any | None:
    """``offload_lab.experiments.<kind>.explore`` when that folder has one."""
    if kind not in discovery.experiment_names():
        return None
    return discovery.experiment_module(kind, EXPLORE_MODULE)


def declared_tables() -> list[str]:
    """Every table name the experiments' explore.py files declare, in folder order."""
    names: list[str] = []
    for exp in discovery.experiment_names():
        module = explore_module(exp)
        names += [n for n in getattr(module, "TABLES", {}) if n not in names]
    return names


def _generic(run_dir: Path) -> dict[str, pd.DataFrame]:
    """Every top-level CSV of a run of an experiment without a reader, by file stem."""
    return {p.stem: pd.read_csv(p) for p in sorted(run_dir.glob("*.csv"))}


def _gpu_words(gpu: dict[str, Any]) -> str:
    if not gpu.get("present"):
        return "none"
    names = [g.get("name", "GPU") for g in gpu.get("gpus") or []]
    topo = gpu.get("topology") or {}
    return f"{len(names)} x {names[0] if names else 'GPU'}" + (" (SYS)" if topo.get("crosses_sockets") else "")


def load_campaign(campaign: str, data_root: Path | str = paths.DATA_DIR, experiments: list[str] | None = None,
                  outcomes: tuple[str, ...] | None = None) -> CampaignTables:
    """Read every run of ``campaign`` under ``data_root`` into tables (every outcome unless ``outcomes`` says which).

    Runs still marked ``running`` are listed in ``runs`` but their files are not read.
    """
    data_root = Path(data_root)
    if not (data_root / campaign).is_dir():
        raise FileNotFoundError(f"no campaign {campaign!r} under {data_root}: {data_root / campaign} does not exist")
    run_rows: list[dict[str, Any]] = []
    collected: dict[str, list[pd.DataFrame]] = {name: [] for name in declared_tables()}
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
        module = explore_module(row["kind"]) or explore_module(experiment)
        readers = getattr(module, "TABLES", None)
        if not readers:
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
    for name, frame in tables.items():
        # A boot's number in the campaign, beside its id: how many server starts came before it.
        if "boot_outcome" in frame.columns and not frame.empty:
            tables[name] = frame.sort_values("run_id").reset_index(drop=True)
            tables[name].insert(5, "boot_number", range(1, len(frame) + 1))
    return CampaignTables(
        campaign=campaign, data_root=data_root, runs=pd.DataFrame(run_rows), files=pd.DataFrame(file_rows),
        problems=pd.DataFrame(problems, columns=["experiment", "run_id", "problem"]), declared=tables,
        extra={name: cat(frames) for name, frames in extra.items()},
    )


# ---- display: what the notebook shows ------------------------------------------------------------------------------

# Shown per experiment: bulky or repeated columns left out (they are in the tables themselves).
_HIDDEN = ("experiment", "kind", "outcome", "host", "path", "parameters", "git_commit", "started_at", "ended_at",
           "command", "notebook")
MAX_ROWS = 25


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


def short_labels(frame: pd.DataFrame) -> pd.DataFrame:
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
    shown = short_labels(shown)
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


# A load experiment's per-level percentiles, as `vllm bench serve` and GuideLLM print them.
LATENCY_TABLE = "latency percentiles per level (TTFT, TPOT, ITL in ms; end to end in s)"


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
        if name == "requests" and "ttft_s" in rows.columns:
            out[LATENCY_TABLE] = explore_plots.latency_percentiles(rows)
        if name == "requests" and "tok_s" in rows.columns:
            keys = ["run_id", *explore_plots.level_keys(rows)]
            ok = rows[rows["ok"].fillna(False).astype(bool)] if "ok" in rows.columns else rows
            # n, mean, median, p95, p99 as the latency table has them: each percentile only where n supports it.
            rows = pd.DataFrame([{**dict(zip(keys, k if isinstance(k, tuple) else (k,))),
                                  **explore_plots.percentile_row(pd.to_numeric(g["tok_s"], errors="coerce").dropna())}
                                 for k, g in ok.groupby(keys, dropna=False, sort=True)])
            name = "requests (output tok/s per request)"
        out[name] = rows.reset_index(drop=True)
    return out


@dataclass(frozen=True)
class View:
    """What an experiment's ``plot(tables, view)`` may use besides its tables."""

    short: Callable[[Any], str]  # a run id as a reader tells it apart (short_run)
    runs: pd.DataFrame  # the experiment's rows of CampaignTables.runs (``parameters`` as JSON text)

    def parameters(self) -> list[dict[str, Any]]:
        """Each run's parameters."""
        return [json.loads(p) for p in self.runs.get("parameters", pd.Series(dtype=str)) if isinstance(p, str)]


def _kind(t: CampaignTables, experiment: str) -> str:
    kinds = t.runs.loc[t.runs["experiment"] == experiment, "kind"] if "kind" in t.runs else pd.Series(dtype=str)
    return kinds.iloc[0] if len(kinds) else experiment


def plot(t: CampaignTables, experiment: str) -> Any | None:
    """One figure for the experiment (a matplotlib Figure outside pyplot), or None when it has nothing to draw:
    its folder's ``plot(tables, view)`` when it has one and draws, else the first of its tables that
    :func:`~offload_lab.paper.explore_plots.plot_generic` can draw."""
    module = explore_module(_kind(t, experiment)) or explore_module(experiment)
    tables = experiment_tables(t, experiment)
    if module is not None and hasattr(module, "plot"):
        fig = module.plot(tables, View(short_run, t.runs[t.runs["experiment"] == experiment]))
        if fig is not None:
            return explore_plots.finish(fig, experiment)
    for name, frame in tables.items():
        if name in ("runs", LATENCY_TABLE) or frame.empty:
            continue
        fig = explore_plots.plot_generic(frame, short_run, f"{experiment}: {name}")
        if fig is not None:
            return explore_plots.finish(fig, experiment)
    return None


def figures(t: CampaignTables, experiment: str) -> list[Any]:
    """Every figure of the experiment: :func:`plot`'s, then for a load experiment its latency distributions."""
    out = [f for f in [plot(t, experiment)] if f is not None]
    requests = t.tables().get("requests", pd.DataFrame())
    if not requests.empty and "experiment" in requests:
        fig = explore_plots.plot_latency(requests[requests["experiment"] == experiment], short_run)
        if fig is not None:
            out.append(explore_plots.finish(fig, experiment))
    return out


def side_by_side(t: CampaignTables) -> list[tuple[str, pd.DataFrame]]:
    """(title, table) for each comparison the explore.py files declare (``COMPARE``) whose table has rows."""
    out, seen = [], set()
    for exp in discovery.experiment_names():
        for table, value, index in getattr(explore_module(exp), "COMPARE", ()):
            key = (table, value, str(index))  # two experiments sharing a table may declare the same comparison
            frame = t.declared.get(table, pd.DataFrame())
            if key in seen or frame.empty or value not in frame.columns:
                continue
            seen.add(key)
            by = ", ".join([index] if isinstance(index, str) else index)
            labelled = frame.assign(run=frame["run_id"].map(labels(t)).fillna(frame["run_id"].map(short_run)))
            out.append((f"{table}: {value} by {by}, one column per run, named by what differs",
                        t.compare(labelled, value, index, by="run").reset_index()))
    return out


def labels(t: CampaignTables) -> dict[str, str]:
    """Every run's name by what differs from the other runs of its experiment (:func:`run_labels`)."""
    out: dict[str, str] = {}
    experiment_of: dict[str, str] = {}
    for experiment, runs_of in t.runs.groupby("experiment") if not t.runs.empty else []:
        out.update(run_labels(runs_of))
        experiment_of.update(dict.fromkeys(runs_of["run_id"], str(experiment)))
    # Two experiments' runs may differ in the same way ("commit=..."): a comparison of both names its experiment.
    taken = pd.Series(out).value_counts() if out else pd.Series(dtype=int)
    return {r: f"{experiment_of[r]}: {name}" if taken[name] > 1 else name for r, name in out.items()}
