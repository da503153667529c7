"""How far a long step has got, said through one small API that any layer may call.

Library code calls :func:`count` (``requests``: 5 of 12) and :func:`phase` (a step without a count: a server boot's
phase read from its log, "timing the plans"). Where that goes is the *sink*:

- the campaign's display (:class:`offload_lab.campaigns.progress.Progress`) and ``offload-lab serve`` install
  themselves with :func:`to` around the steps they run in their own process (server boots);
- with no sink installed, as in a notebook's kernel, a line is printed on stdout in the two forms the campaign display
  reads from a kernel's output: ``LABEL: DONE/TOTAL UNIT`` for a count, ``LABEL: now TEXT`` for a phase and
  ``LABEL: done (TEXT)`` for the end of a step. Counts
  are printed at most every :data:`PRINT_EVERY_S` per label (the first and the last always), so a notebook's output
  stays readable and the display still hears of progress several times between its own plain lines.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from typing import Iterator, Protocol

PRINT_EVERY_S = 5.0
COUNT_LINE = re.compile(r"(?P<label>[A-Za-z0-9_][\w .,()-]*?):\s+(?P<done>\d+)\s*/\s*(?P<total>\d+)\s+(?P<unit>[A-Za-z]+)")
PHASE_LINE = re.compile(r"^(?P<label>[A-Za-z0-9_][\w .,()-]*?): now (?P<text>.+)$")
END_LINE = re.compile(r"^(?P<label>[A-Za-z0-9_][\w .,()-]*?): done(?: \((?P<text>.*)\))?$")


class Sink(Protocol):
    """What receives progress: the campaign display, ``serve``'s lines."""

    def count(self, label: str, done: int, total: int, unit: str) -> None: ...

    def phase(self, label: str, text: str) -> None: ...

    def end(self, label: str, text: str = "") -> None: ...


_sinks: list[Sink] = []
_printed: dict[str, float] = {}


@contextlib.contextmanager
def to(sink: Sink) -> Iterator[Sink]:
    """Send this process's progress to ``sink`` for the duration of the block."""
    _sinks.append(sink)
    try:
        yield sink
    finally:
        _sinks.remove(sink)


def count(label: str, done: int, total: int, unit: str) -> None:
    """``done`` of ``total`` ``unit`` (one word: requests, levels, repeats, weeks) of the step ``label``."""
    if _sinks:
        _sinks[-1].count(label, done, total, unit)
        return
    now = time.monotonic()
    last = _printed.get(label)
    if last is not None and done < total and done > 0 and now - last < PRINT_EVERY_S:
        return
    _printed[label] = now
    print(f"{label}: {done}/{total} {unit}", file=sys.stdout, flush=True)


def phase(label: str, text: str) -> None:
    """The step ``label`` is now doing ``text`` (a few words, no count)."""
    if _sinks:
        _sinks[-1].phase(label, text)
        return
    print(f"{label}: now {text}", file=sys.stdout, flush=True)


def end(label: str, text: str = "") -> None:
    """The step ``label`` is over; ``text`` says how it ended (``ready after 52 s``)."""
    _printed.pop(label, None)
    if _sinks:
        _sinks[-1].end(label, text)
        return
    print(f"{label}: done" + (f" ({text})" if text else ""), file=sys.stdout, flush=True)


def counting(label: str, total: int, unit: str) -> "Counter":
    """A :class:`Counter` that has said ``0/total``."""
    c = Counter(label, total, unit)
    count(label, 0, total, unit)
    return c


class Counter:
    """Counts one step's units as they finish: ``c.add()`` after each."""

    def __init__(self, label: str, total: int, unit: str):
        self.label, self.total, self.unit, self.done = label, total, unit, 0

    def add(self, n: int = 1) -> None:
        self.done += n
        count(self.label, self.done, self.total, self.unit)
