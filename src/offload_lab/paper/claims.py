"""Claims: the only way a number reaches the paper.

A claim is a dotted name, a function that computes a value from named files of one experiment's latest ``ok`` run, a
format, a unit and a one-line description. Claims are declared with :func:`claim` into a registry; later sections of
the paper add their claims the same way, next to the ones below.

Resolving a claim locates the run (:func:`offload_lab.core.runs.latest_run`), checks that every file the claim cites is
listed in that run's manifest and still has the recorded sha256, and only then computes and formats the value. A claim
function can read only the files it cites (:class:`Sources` refuses any other), so the provenance in ``claims.json`` is
complete by construction. Any failure raises :class:`~offload_lab.core.errors.ClaimError` naming the claim and the file.

A claim whose experiment has no ``ok`` run in the campaign is *absent*: it is reported as such in ``claims.json`` and
never given a made-up value; the paper leaves out the section that needs it, with a visible note.

Three extensions keep that shape:

* a cited file may name another experiment, ``"concurrency:regimes.csv"``: it is read from that experiment's latest
  ok run, checked against that run's manifest, and the claim is absent unless every experiment it names has one;
* ``scope="all"`` reads the cited files of *every* finished run of the experiment (ok, failed or stopped; never one
  still marked running), for facts about the runs themselves, such as how many boots failed and how;
* ``kind="table"``: the value is a table (:func:`table_value`), printed as a pipe table in place of a shortcode
  that stands alone on its line; every cell with a number is traced like any other claim.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from offload_lab.core import paths, runs
from offload_lab.paper import selection
from offload_lab.core.errors import ClaimError
from offload_lab.paper.formats import fmt_table
from offload_lab.paper.sources import (HashCache, RunSet, SourceFile, Sources, display_path,  # noqa: F401
                                       experiments_of, split_cited, verify_cited)

CLAIMS_SCHEMA = 1
_CLAIM_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")

Formatter = str | Callable[[Any], str]


# --------------------------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------------------------


# What a claim prints where it does not apply to the run it reads (a side answered once has no noise floor; inputs
# taken from published figures have no measured run ids). The text guards such claims (`.when NAME not="n/a"`) or
# prints the placeholder where a table cell is honestly empty; it holds no number, so the audit passes it.
NA = "n/a"


class NotApplicable(Exception):
    """Raised by a claim function: the claim does not apply to this run; it resolves to :data:`NA`."""


@dataclass(frozen=True)
class RunInfo:
    """The run of an experiment that the paper reads."""

    experiment: str
    run_id: str
    path: str
    notebook: str | None  # the notebook the campaign ran (the template)
    ended_at: str | None
    notebook_output: str | None = None  # the executed notebook that wrote the data, kept in the run directory
    outcome: str | None = None
    by_hand: bool = False  # made outside the campaign's sessions and read because the user asked (paper.selection)
    server: str | None = None  # a hand run's server, as its manifest records it (redacted)


@dataclass(frozen=True)
class ClaimDef:
    name: str
    experiment: str
    files: tuple[str, ...]
    compute: Callable[["Sources"], Any]
    fmt: Formatter
    unit: str
    description: str
    scope: str = "latest"  # "latest": the latest ok run of each experiment named; "all": every finished run
    kind: str = "inline"  # "inline": a value in the text; "table": a table printed in place of its shortcode

    @property
    def experiments(self) -> tuple[str, ...]:
        """The experiment this claim belongs to, then every other experiment its files name."""
        return experiments_of(self.experiment, self.files)

    def format(self, value: Any) -> str:
        if callable(self.fmt):
            return str(self.fmt(value))
        return self.fmt.format(value)


@dataclass
class ResolvedClaim:
    name: str
    status: str  # "ok" or "absent"
    experiment: str
    description: str
    unit: str
    value: Any = None
    text: str | None = None
    run_id: str | None = None
    notebook: str | None = None
    files: list[SourceFile] = field(default_factory=list)
    reason: str | None = None  # why a claim is absent
    notebook_output: str | None = None
    kind: str = "inline"
    runs: int = 1  # runs read (more than one for scope "all")
    by_hand: bool = False  # read from a run made by hand (paper.selection): the paper marks it where printed

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["files"] = [asdict(f) for f in self.files]
        return d


@dataclass
class ClaimSet:
    """All claims of a campaign, resolved; what ``claims.json`` holds."""

    campaign: str
    kind: str
    data_root: str
    runs: dict[str, RunInfo]
    absent: list[str]
    claims: dict[str, ResolvedClaim]
    # runs passed over because their parameters are not the campaign file's, or made by hand (paper.selection)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    # experiment -> the hand run the paper reads because the user asked for it (paper.selection.hand_facts)
    hand_runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __getitem__(self, name: str) -> ResolvedClaim:
        return self.claims[name]

    def __contains__(self, name: object) -> bool:
        return name in self.claims

    def ok(self) -> list[ResolvedClaim]:
        return [c for c in self.claims.values() if c.status == "ok"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": CLAIMS_SCHEMA,
            "campaign": self.campaign,
            "kind": self.kind,
            "data_root": self.data_root,
            "runs": {k: asdict(v) for k, v in sorted(self.runs.items())},
            "absent": sorted(self.absent),
            "skipped": self.skipped,
            "hand_runs": self.hand_runs,
            "claims": {k: v.to_dict() for k, v in sorted(self.claims.items())},
        }

    def write(self, path: Path) -> Path:
        runs.atomic_write_json(Path(path), self.to_dict())
        return Path(path)

    @classmethod
    def read(cls, path: Path) -> "ClaimSet":
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        claims = {}
        for name, c in d["claims"].items():
            c = dict(c)
            c["files"] = [SourceFile(**f) for f in c.get("files") or []]
            claims[name] = ResolvedClaim(**c)
        return cls(
            campaign=d["campaign"],
            kind=d["kind"],
            data_root=d["data_root"],
            runs={k: RunInfo(**v) for k, v in d["runs"].items()},
            absent=list(d.get("absent") or []),
            skipped=list(d.get("skipped") or []),
            hand_runs=dict(d.get("hand_runs") or {}),
            claims=claims,
        )


# --------------------------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------------------------

def claim(
    name: str,
    *,
    experiment: str,
    files: Iterable[str],
    fmt: Formatter = "{}",
    unit: str = "",
    description: str | None = None,
    registry: dict[str, ClaimDef],
    scope: str = "latest",
    kind: str = "inline",
) -> Callable[[Callable[["Sources"], Any]], Callable[["Sources"], Any]]:
    """Register a claim. The description defaults to the first line of the function's docstring.

    ``scope="all"``: the function gets a :class:`RunSet` of every finished run of ``experiment`` instead of one run's
    :class:`Sources`. ``kind="table"``: the function returns :func:`table_value`; the format defaults to
    :func:`fmt_table`.
    """
    target = registry
    if not _CLAIM_NAME_RE.match(name):
        raise ValueError(f"claim name {name!r} must be dotted lowercase, e.g. 'context.tpot_median_ms.shortest'")
    files = tuple(files)
    if not files:
        raise ValueError(f"claim {name} cites no file; every claim is computed from named data files")
    if scope not in ("latest", "all"):
        raise ValueError(f"claim {name}: scope must be 'latest' or 'all', not {scope!r}")
    if scope == "all" and experiments_of(experiment, files) != (experiment,):
        raise ValueError(f"claim {name}: a claim over all runs reads one experiment's files only")
    if kind not in ("inline", "table"):
        raise ValueError(f"claim {name}: kind must be 'inline' or 'table', not {kind!r}")
    if kind == "table" and fmt == "{}":
        fmt = fmt_table

    def deco(fn: Callable[["Sources"], Any]) -> Callable[["Sources"], Any]:
        if name in target:
            raise ValueError(f"claim {name} is defined twice")
        doc_lines = (fn.__doc__ or "").strip().splitlines()
        target[name] = ClaimDef(
            name=name,
            experiment=experiment,
            files=files,
            compute=fn,
            fmt=fmt,
            unit=unit,
            description=description or (doc_lines[0] if doc_lines else name),
            scope=scope,
            kind=kind,
        )
        return fn

    return deco


# --------------------------------------------------------------------------------------------------------------------
# Reading cited files
# --------------------------------------------------------------------------------------------------------------------


def campaign_kind(campaign: str, repo_root: Path | None = None) -> str:
    """``embedded`` for a campaign on the tiny random-weight model, else ``real``.

    ``kind:`` in ``configs/campaigns/<campaign>.yaml`` wins; without it a campaign named ``embedded`` or
    ``embedded-*`` is embedded. Err on the side of the warning: the embedded paper must never pass as a real result.
    """
    if repo_root is not None:
        cfg = Path(repo_root) / "configs" / "campaigns" / f"{campaign}.yaml"
        if cfg.is_file():
            from offload_lab.core import inputs

            data = inputs.read_yaml(cfg, "campaign file", expect=None) or {}
            kind = data.get("kind") if isinstance(data, dict) else None
            if kind in ("embedded", "real"):
                return kind
    return "embedded" if campaign == "embedded" or campaign.startswith("embedded-") else "real"


def run_info(run_dir: Path, repo_root: Path | None, hand: dict[str, Any] | None = None) -> RunInfo:
    m = runs.load_manifest(run_dir)
    notebook = m.get("notebook")
    if isinstance(notebook, dict):  # a producer may record {"path": ..., "sha256": ...}
        notebook = notebook.get("path") or notebook.get("output")
    output = m.get("notebook", {}).get("output") if isinstance(m.get("notebook"), dict) else None
    out_path = Path(run_dir) / (output or "notebook.ipynb")
    if hand and hand.get("notebook_output"):  # a hand run links its own executed notebook, never the template
        out_path = Path(hand["notebook_output"])
    return RunInfo(
        experiment=m.get("experiment", Path(run_dir).parent.name),
        run_id=m.get("run_id", Path(run_dir).name),
        path=display_path(run_dir, repo_root),
        notebook=str(notebook) if notebook else None,
        ended_at=m.get("ended_at"),
        notebook_output=display_path(out_path, repo_root) if out_path.is_file() else None,
        outcome=m.get("outcome"),
        by_hand=bool(hand),
        server=(hand or {}).get("server"),
    )


def find_runs(data_root: Path, campaign: str, experiments: Iterable[str],
              repo_root: Path | None = None) -> dict[str, Path | None]:
    """The run the paper reads of each experiment named and of every experiment directory the campaign holds: the
    newest ok run whose parameters are the campaign file's (:mod:`offload_lab.paper.selection`)."""
    return select_runs(data_root, campaign, experiments, repo_root).chosen


def select_runs(data_root: Path, campaign: str, experiments: Iterable[str],
                repo_root: Path | None = None) -> "selection.Selection":
    names = set(experiments)
    base = Path(data_root) / campaign
    if base.is_dir():
        names |= {p.name for p in base.iterdir() if p.is_dir()}
    return selection.select(Path(data_root), campaign, names, Path(repo_root) if repo_root else paths.find_root())


def _plain(value: Any) -> Any:
    """numpy scalars to Python scalars, so that json and str.format treat them as plain numbers."""
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (TypeError, ValueError):
            return value
    return value


def finished_runs(data_root: Path, campaign: str, experiment: str,
                  repo_root: Path | None = None) -> list[Path]:
    """Every run of an experiment that has ended (ok, failed or stopped), oldest first: of the campaign's sessions,
    and the hand runs the user asked for (paper.selection)."""
    admission = selection.Admission(Path(data_root), campaign, Path(repo_root) if repo_root else paths.find_root())
    found = []
    for r in runs.iter_runs(data_root, campaign, experiment):
        m = runs.load_manifest(r)
        if m.get("outcome") not in (None, "running") and admission.admits(r, m):
            found.append(r)
    return found


@dataclass
class Bound:
    """What a claim or figure reads, checked: the sources to compute from, the files with their sha256, the run."""

    sources: Any  # Sources, or RunSet for scope "all"
    files: list[SourceFile]
    info: RunInfo
    runs: int = 1


def bind(
    owner: str,
    experiment: str,
    files: tuple[str, ...],
    latest: Mapping[str, Path | None],
    repo_root: Path | None,
    hashes: HashCache | None = None,
    scope: str = "latest",
    data_root: Path | None = None,
    campaign: str | None = None,
) -> Bound | str:
    """Check every cited file against its run's manifest and open them; a str says why the owner is absent."""
    hashes = hashes or HashCache()
    if scope == "all":
        assert data_root is not None and campaign is not None
        found = finished_runs(data_root, campaign, experiment, repo_root)
        if not found:
            return f"campaign {campaign} has no finished run of {experiment}"
        members, cited = [], []
        for run_dir in found:
            manifest = runs.load_manifest(run_dir)
            cited += verify_cited(owner, run_dir, manifest, files, repo_root, hashes)
            members.append(Sources(owner, run_dir, manifest, files))
        return Bound(RunSet(owner, experiment, members), cited, run_info(found[-1], repo_root), len(found))
    needed = experiments_of(experiment, files)
    missing = [e for e in needed if latest.get(e) is None]
    if missing:
        return f"campaign {campaign or ''} has no run of {' and '.join(missing)} with outcome ok".replace("  ", " ")
    by_exp: dict[str, list[str]] = {}
    for name in files:
        by_exp.setdefault(split_cited(name, experiment)[0], []).append(name)
    cited: list[SourceFile] = []
    opened: dict[str, tuple[Path, dict[str, Any]]] = {}
    for exp in needed:
        run_dir = Path(latest[exp])  # type: ignore[arg-type]
        manifest = runs.load_manifest(run_dir)
        opened[exp] = (run_dir, manifest)
        cited += verify_cited(owner, run_dir, manifest, by_exp.get(exp, []), repo_root, hashes)
    run_dir, manifest = opened[experiment]
    others = {e: v for e, v in opened.items() if e != experiment}
    return Bound(Sources(owner, run_dir, manifest, files, others), cited, run_info(run_dir, repo_root))


def resolve_one(
    d: ClaimDef, run_dir: Path | None, repo_root: Path | None, hashes: HashCache | None = None,
    latest: Mapping[str, Path | None] | None = None, data_root: Path | None = None, campaign: str | None = None,
    hand: Mapping[str, Any] | None = None,
) -> ResolvedClaim:
    owner = f"claim {d.name}"
    latest = dict(latest or {})
    if run_dir is not None:
        latest[d.experiment] = Path(run_dir)
    bound = bind(owner, d.experiment, d.files, latest, repo_root, hashes, d.scope, data_root, campaign)
    if isinstance(bound, str):
        return ResolvedClaim(name=d.name, status="absent", experiment=d.experiment, description=d.description,
                             unit=d.unit, reason=bound, kind=d.kind)
    cited = ", ".join(sorted({f.path for f in bound.files}))
    try:
        value = _plain(d.compute(bound.sources))
    except NotApplicable:
        value = NA
    except ClaimError:
        raise
    except Exception as e:  # any bug or bad data in a claim function must name the claim and its files
        raise ClaimError(f"{owner}: computing it from {cited} failed: {type(e).__name__}: {e}") from e
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        raise ClaimError(f"{owner}: {cited} gave no finite value ({value!r})")
    if d.kind == "table" and not (isinstance(value, dict) and "columns" in value and "rows" in value):
        raise ClaimError(f"{owner}: a table claim must return table_value(...), not {type(value).__name__}")
    try:
        text = NA if value == NA else d.format(value)
    except Exception as e:
        raise ClaimError(f"{owner}: formatting {value!r} failed: {type(e).__name__}: {e}") from e
    info = bound.info
    return ResolvedClaim(
        name=d.name,
        status="ok",
        experiment=d.experiment,
        description=d.description,
        unit=d.unit,
        value=value,
        text=text,
        run_id=info.run_id,
        notebook=info.notebook,
        files=bound.files,
        notebook_output=info.notebook_output,
        kind=d.kind,
        runs=bound.runs,
        by_hand=any(e in (hand or {}) for e in d.experiments),
    )


def resolve_claims(
    campaign: str,
    data_root: Path | str,
    repo_root: Path | str | None = None,
    registry: Mapping[str, ClaimDef] | None = None,
    extra_experiments: Iterable[str] = (),
) -> ClaimSet:
    """Resolve every registered claim against the latest ok runs of ``campaign``.

    Claims of an experiment without an ok run are absent; any other failure raises ClaimError.
    """
    if registry is None:
        from offload_lab.paper.discovery import claim_registry

        registry = claim_registry()
    repo = Path(repo_root) if repo_root is not None else None
    wanted = [e for d in registry.values() for e in d.experiments] + list(extra_experiments)
    chosen = select_runs(Path(data_root), campaign, wanted, repo)
    latest = chosen.chosen
    hashes = HashCache()
    resolved = {
        name: resolve_one(d, None, repo, hashes, latest, Path(data_root), campaign, chosen.hand)
        for name, d in sorted(registry.items())
    }
    return ClaimSet(
        campaign=campaign,
        kind=campaign_kind(campaign, repo),
        data_root=display_path(Path(data_root), repo),
        runs={e: run_info(p, repo, chosen.hand.get(e)) for e, p in latest.items() if p is not None},
        absent=[e for e, p in latest.items() if p is None],
        claims=resolved,
        skipped=chosen.skipped,
        hand_runs={e: {**h, "notebook_output": run_info(latest[e], repo, h).notebook_output}
                   for e, h in chosen.hand.items() if latest.get(e) is not None},
    )


def write_claims(claims: ClaimSet, path: Path) -> Path:
    return claims.write(path)


# --------------------------------------------------------------------------------------------------------------------
# Formats
# --------------------------------------------------------------------------------------------------------------------


def default_data_root(repo_root: Path) -> Path:
    return paths.data_root(root=Path(repo_root))
