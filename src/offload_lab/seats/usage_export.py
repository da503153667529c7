"""A user's own usage: a coding agent's usage export read into a :class:`~offload_lab.seats.profile.UsageProfile`.

Read here: the JSON of ccusage (github.com/ryoppippi/ccusage, the usage reporter for Claude Code), its ``daily`` and
``session`` reports (``ccusage daily --json``, ``ccusage session --json``). Their shapes, as ccusage writes them:

* daily: ``{"daily": [{"date": "YYYY-MM-DD", "inputTokens", "outputTokens", "cacheCreationTokens",
  "cacheReadTokens", "totalTokens", "totalCost", "modelsUsed", "modelBreakdowns"}, ...], "totals": {...}}``; with
  ``--instances`` the days are grouped by project, ``{"projects": {name: [day, ...]}, "totals": {...}}``;
* session: ``{"sessions": [{"sessionId", "inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens",
  "totalTokens", "totalCost", "lastActivity": "YYYY-MM-DD", "modelsUsed", "modelBreakdowns", "projectPath"},
  ...], "totals": {...}}``.

ccusage's documentation also shows a ``{"type": "daily" | "session", "data": [...]}`` envelope; it is read too.

How the counts map onto a profile (Anthropic's usage fields, which ccusage sums): ``outputTokens`` are the model's
output; ``inputTokens`` (uncached input) and ``cacheCreationTokens`` (input written to the cache, prefilled for the
first time) are new input; ``cacheReadTokens`` are cached reads. The period runs from the first date to the last, the
active days are the dates with tokens (a session report dates each session by its last activity, so a session that
ran past midnight counts on its last day only). An export states neither the daily working window nor, for a daily
report, the sessions: the caller gives them (``window_hours``; ``sessions``, else one a day), and the profile's
provenance says they were assumed.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.core.places import require_file
from offload_lab.core.inputs import read_json
from offload_lab.seats.profile import UsageProfile, load_profile, parse_profile

ExportFormat = Literal["ccusage-daily", "ccusage-session"]
TOKEN_FIELDS = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")
EXPORT_MAX_BYTES = 64 * 2**20


def detect_format(data: Any) -> ExportFormat | None:
    """Which ccusage report ``data`` is, or None when it is none of them."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("daily"), list) or isinstance(data.get("projects"), dict):
        return "ccusage-daily"
    if isinstance(data.get("sessions"), list):
        return "ccusage-session"
    if data.get("type") in ("daily", "session") and isinstance(data.get("data"), list):
        return "ccusage-daily" if data["type"] == "daily" else "ccusage-session"
    return None


def _entries(data: dict[str, Any], fmt: ExportFormat) -> list[dict[str, Any]]:
    if "data" in data and "type" in data:
        rows = data["data"]
    elif fmt == "ccusage-daily" and isinstance(data.get("projects"), dict):
        rows = [day for days in data["projects"].values() if isinstance(days, list) for day in days]
    else:
        rows = data["daily" if fmt == "ccusage-daily" else "sessions"]
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError("every entry must be an object")
    return rows


def _count(entry: dict[str, Any], key: str, where: str) -> float:
    v = entry.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v:
        raise ValueError(f"{where}: {key} must be a number of tokens ≥ 0, not {v!r}")
    return float(v)


def _date(entry: dict[str, Any], fmt: ExportFormat, where: str) -> dt.date:
    key = "date" if fmt == "ccusage-daily" else "lastActivity"
    raw = entry.get(key)
    if not isinstance(raw, str):
        raise ValueError(f"{where}: {key} must be a date (YYYY-MM-DD), not {raw!r}")
    try:
        # A date, or a timestamp that starts with one (lastActivity): never a date followed by anything else.
        if len(raw) == 10:
            return dt.date.fromisoformat(raw)
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00")).date()
    except ValueError as e:
        raise ValueError(f"{where}: {key} {raw!r} is not a date (YYYY-MM-DD)") from e


# Ten years: longer than any coding agent has kept usage; a period past it is a mistyped year (0001, 9999).
MAX_PERIOD_DAYS = 3653


def profile_from_ccusage(data: Any, where: str, window_hours: float, sessions: int | None = None,
                         name: str | None = None, sha256: str | None = None) -> UsageProfile:
    """The profile a ccusage daily or session report describes (see the module's docstring for the mapping)."""
    fmt = detect_format(data)
    if fmt is None:
        raise InputError(f"{where} is not a ccusage export: expected the JSON of `ccusage daily --json` (a "
                         "\"daily\" list) or `ccusage session --json` (a \"sessions\" list)")
    try:
        rows = _entries(data, fmt)
        if not rows:
            raise ValueError("it holds no days or sessions")
        totals = {k: 0.0 for k in TOKEN_FIELDS}
        active: set[dt.date] = set()
        dates: list[dt.date] = []
        for i, r in enumerate(rows):
            at = f"entry {i}"
            counts = {k: _count(r, k, at) for k in TOKEN_FIELDS}
            day = _date(r, fmt, at)
            if fmt == "ccusage-daily" and day in dates:
                # ccusage gives one entry a day: a repeated date is two exports pasted together, counted twice.
                raise ValueError(f"{at}: date {day} is listed twice (entry {dates.index(day)} too); a daily report "
                                 "has one entry a day: export the period again")
            dates.append(day)
            if sum(counts.values()) > 0:
                active.add(day)
            for k, v in counts.items():
                totals[k] += v
    except ValueError as e:
        raise InputError(f"{where} ({fmt}): {e}") from e
    if not active:
        raise InputError(f"{where} ({fmt}): no day holds any tokens; export a period in which the agent was used")
    period = (max(dates) - min(dates)).days + 1
    if period > MAX_PERIOD_DAYS:
        raise InputError(f"{where} ({fmt}): its dates run from {min(dates)} to {max(dates)}, {period:,} days; an "
                         f"export covers at most {MAX_PERIOD_DAYS:,} (is a date mistyped?)")
    if fmt == "ccusage-session":
        n_sessions, sessions_how = len(rows), "counted (one entry a session)"
    elif sessions is not None:
        n_sessions, sessions_how = sessions, "given by the user"
    else:
        n_sessions, sessions_how = len(active), "assumed: one a day (a daily report does not count sessions)"
    note = (f"{fmt} export, {min(dates)} to {max(dates)}; output = outputTokens, new input = inputTokens + "
            f"cacheCreationTokens, cached reads = cacheReadTokens; window {window_hours:g} h a day assumed (an "
            f"export has no working window); sessions {sessions_how}")
    return parse_profile({
        "name": name or f"{fmt}-{min(dates)}-{max(dates)}",
        "description": f"A developer's own usage, from a {fmt} export ({len(rows)} entries)",
        "provenance": {"kind": "measured", "source": where, "section": fmt, "source_sha256": sha256, "note": note},
        "period_days": period,
        "active_days": len(active),
        "sessions": n_sessions,
        "window_hours": window_hours,
        "tokens": {"output": totals["outputTokens"], "new_input": totals["inputTokens"] + totals["cacheCreationTokens"],
                   "cached_read": totals["cacheReadTokens"]},
    }, where=where)


def load_usage(path: Path | str, window_hours: float = 8.0, sessions: int | None = None) -> tuple[UsageProfile,
                                                                                                   dict[str, Any]]:
    """A profile from a project YAML profile or a ccusage JSON export, and where it came from (file, sha256,
    format). Anything else is an InputError naming the file and the formats read."""
    p = Path(path)
    # Missing, or a directory, FIFO or device (named for what it is, and never opened).
    require_file(p, "usage file", "give a profile (configs/profiles/*.yaml) or the JSON of `ccusage daily --json` / "
                 "`ccusage session --json`")
    sha = runs.sha256_file(p)
    if p.suffix.lower() in (".yaml", ".yml"):
        prof = load_profile(p)
        return prof, {"file": str(p), "sha256": sha, "format": "profile-yaml"}
    if p.suffix.lower() != ".json":
        raise InputError(f"usage file {p}: neither a profile (.yaml) nor a ccusage export (.json); the formats read "
                         "are the project's YAML profile and ccusage's daily and session JSON")
    data = read_json(p, "usage export", max_bytes=EXPORT_MAX_BYTES)
    if is_team_export(data):
        # never one developer's q from several developers' tokens: that q is the team's sum, not a person's
        raise InputError(f"usage export {p} holds {len(data['developers'])} developers; give it to `capacity "
                         "--profile` (several developers make a team there), or export one developer")
    fmt = detect_format(data)
    if fmt is None:
        raise InputError(f"usage export {p} is JSON but not a ccusage report: expected a \"daily\" or \"sessions\" "
                         "list (`ccusage daily --json`, `ccusage session --json`)")
    prof = profile_from_ccusage(data, str(p), window_hours, sessions, name=p.stem, sha256=sha)
    return prof, {"file": str(p), "sha256": sha, "format": fmt, "window_hours_assumed": window_hours}


# --- a team: several developers -------------------------------------------------------------------------------------
# A team export is ``{"developers": {name: <a ccusage daily or session export>, ...}}``; several files, each one
# developer's export (or a team export), make a team too. Each developer keeps their own profile and q.


def is_team_export(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("developers"), dict)


def load_team_usage(paths: list[Path | str], window_hours: float = 8.0,
                    sessions: int | None = None) -> list[tuple[str, UsageProfile, dict[str, Any]]]:
    """(developer, profile, source) for every developer of the files: a profile YAML or a ccusage export is one
    developer, a team export ``{"developers": {...}}`` is each of its entries."""
    out: list[tuple[str, UsageProfile, dict[str, Any]]] = []
    for path in paths:
        p = Path(path)
        require_file(p, "usage file", "give profiles, ccusage exports or a team export {\"developers\": {...}}")
        if p.suffix.lower() == ".json":
            data = read_json(p, "usage export", max_bytes=EXPORT_MAX_BYTES)
            if is_team_export(data):
                sha = runs.sha256_file(p)
                if not data["developers"]:
                    raise InputError(f"usage export {p}: its \"developers\" mapping is empty")
                for name, export in data["developers"].items():
                    where = f"{p} developer {name!r}"
                    prof = profile_from_ccusage(export, where, window_hours, sessions, name=str(name), sha256=sha)
                    out.append((str(name), prof, {"file": str(p), "sha256": sha, "developer": str(name),
                                                  "format": detect_format(export)}))
                continue
        prof, source = load_usage(p, window_hours, sessions)
        out.append((p.stem, prof, source))
    names = [n for n, _, _ in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"developers {dup} appear more than once in the usage files; name each once")
    return out
