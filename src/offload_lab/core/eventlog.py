"""Append-only JSON Lines event logs: a crash or a full disk loses at most the line being written, the next writer
starts on a fresh line, and readers skip a torn line and say so (:mod:`offload_lab.core.runs` uses these for every
run's events; the campaign ledger too)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson

from offload_lab.core.errors import InputError
from offload_lab.core.inputs import decode_utf8
from offload_lab.core.redact import redacted_json_bytes


def _dump_line(obj: Any) -> bytes:
    return orjson.dumps(obj, default=str, option=orjson.OPT_SERIALIZE_NUMPY)


class EventLog:
    """Append-only JSON Lines; each line is flushed as it is written so that a crash loses at most one event."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._f = open(self.path, "a", encoding="utf-8")
        start_on_fresh_line(self._f, self.path)

    def append(self, event: dict[str, Any]) -> None:
        # orjson: a load level appends one event per request at its boundaries, on the measuring event loop.
        # Redacted like every record: an event may quote a server's error text, which may echo a key.
        line = redacted_json_bytes(event, _dump_line)
        self._f.write(line.decode() + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_on_fresh_line(f: Any, path: Path) -> None:
    """Before appending to an append-only log: when its last line was torn (a crash or a full disk mid-write), end
    it, so that the new line is whole and the torn one stays alone (readers skip it)."""
    try:
        size = os.path.getsize(path)
        if size == 0:
            return
        with open(path, "rb") as r:
            r.seek(size - 1)
            last = r.read(1)
    except OSError:
        return
    if last != b"\n":
        f.write("\n")
        f.flush()


def read_events(path: Path, torn: list[str] | None = None) -> list[dict[str, Any]]:
    """Read a JSON Lines file; a torn line (a crash mid-write) is skipped -- the last one, or one followed by the
    fresh line a later writer started -- and named in ``torn`` when given; any other bad line is an error."""
    try:
        raw = Path(path).read_bytes()  # no size bound: event logs are the study's own, and may be large
    except OSError as e:
        raise InputError(f"event log {path}: cannot read it ({e.strerror or e})") from e
    lines = decode_utf8(raw, path, "event log").splitlines()
    events = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1 or _torn(line):
                if torn is not None:
                    torn.append(f"{path}:{i + 1}: a torn line (a write cut short), skipped")
                continue
            raise InputError(f"{path}:{i + 1}: not a JSON line ({e}); the event log is damaged") from e
        if not isinstance(event, dict):
            raise InputError(f"{path}:{i + 1}: a JSON {type(event).__name__}, not an object; the event log is "
                             "damaged")
        events.append(event)
    return events


def _torn(line: str) -> bool:
    """A line that is the start of a JSON object cut short (what a crash or a full disk leaves), not garbage."""
    text = line.strip()
    if not text.startswith("{"):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return e.pos >= len(text) - 1 or "Unterminated string" in e.msg
    return False
