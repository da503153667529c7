"""What a campaign shows while it runs: experiments, their notebooks' cells, the counts and phases of long steps.

One :class:`Progress` per campaign (or per ``offload-lab serve``). The runner calls :meth:`Progress.experiment` before a
notebook, hands the same object to :func:`offload_lab.campaigns.execute.execute_notebook` as its ``watcher`` (nbclient's
``on_cell_execute`` / ``on_cell_executed`` hooks, and the kernel's stdout), calls :meth:`Progress.done` after it, and
:meth:`Progress.summary` at the end. :meth:`Progress.log` replaces ``print`` for the runner's own lines (server ready,
boot attempts), and :meth:`Progress.not_run` shows an experiment that ran no notebook: skipped (a dependency failed)
or failed before it (its server did not start). The summary lists every experiment with its outcome, run and the
error's first line (a skip's: why); in ``json`` mode it also carries ``failed`` and ``skipped`` lists.

Counts and phases come through :mod:`offload_lab.core.progress`: in this process (a server's boot, its phases read
from the server's log) the display is installed as the sink (``with core_progress.to(progress)``); inside a notebook's
kernel the library prints them on stdout as ``LABEL: DONE/TOTAL UNIT`` (``requests: 5/12 requests``) and ``LABEL: now
TEXT`` (and ``LABEL: done (TEXT)``), which :meth:`Progress.write` reads back; nothing is parsed from the notebook's other output.

Modes: ``rich`` (a live display; the default on a terminal), ``quiet`` (plain lines, each with the wall-clock time:
each experiment as it starts and ends, each phase, each count's first and last value, and, whenever nothing was
printed for :data:`QUIET_EVERY_S`, a line saying what is running, for how long, and every count so far; the default
otherwise, e.g. in CI or under ``| tee``), ``json`` (one JSON object per line, every event, for scripts). Times are
seconds on the monotonic clock since the campaign started.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict
from typing import IO, Any, Callable, Iterable, Literal, Mapping

from offload_lab.campaigns.progress_words import (ExperimentRecord, Step, brief, cell_words, first_line,  # noqa: F401
                                                  plural)
from offload_lab.core.progress import COUNT_LINE, END_LINE, PHASE_LINE  # noqa: F401  (COUNT_LINE: tests and callers read it)

Mode = Literal["auto", "rich", "quiet", "json"]
# In quiet mode, the longest a running step stays silent: a "still running" line follows this many seconds after
# the last line printed.
QUIET_EVERY_S = 10.0
LONGEST_LINE = 4096  # of the kernel's output kept while its line is unfinished: count and phase lines are far shorter


class Progress:
    """The campaign's display; see the module docstring. Also a :class:`offload_lab.core.progress.Sink`."""

    def __init__(self, mode: Mode = "auto", campaign: str | None = None, experiments: int | None = None,
                 file: IO[str] | None = None):
        self.file = file or sys.stderr
        if mode == "auto":
            mode = "rich" if getattr(self.file, "isatty", lambda: False)() else "quiet"
        self.mode = mode
        self.campaign = campaign
        self.records: list[ExperimentRecord] = []
        self._t0 = time.monotonic()
        self._buffer = ""
        self._rich: Any = None
        self._overall: Any = None
        self._task: Any = None
        self._steps: dict[str, Step] = {}
        self._cell: tuple[int, str, float] | None = None
        self._lock = threading.RLock()
        self._last_line = time.monotonic()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        if mode == "rich":
            self._start_rich(experiments)
        elif mode == "quiet":
            self._beat = threading.Thread(target=self._heartbeat, name="progress-heartbeat", daemon=True)
            self._beat.start()

    # ---- the runner's side ------------------------------------------------------------------------------------

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def log(self, text: str) -> None:
        """A line of the runner's own (server ready, a boot attempt's outcome)."""
        with self._lock:
            if self.mode == "json":
                self._emit("log", text=text)
            elif self._rich is not None:
                self._rich.console.print(text, highlight=False, markup=False)
            else:
                self._line(text)

    def experiment(self, name: str, total_cells: int, detail: str | None = None,
                   run: str | None = None) -> "Progress":
        """A notebook starts: ``total_cells`` is what papermill will execute (``execute.executed_cells``), ``detail``
        a few words (its notebook, its boot), ``run`` its run directory."""
        with self._lock:
            rec = ExperimentRecord(name, total_cells, detail, None if run is None else str(run),
                                   started=time.monotonic())
            self.records.append(rec)
            self._clear_steps()
            self._buffer, self._cell = "", None
            if self.mode == "json":
                self._emit("experiment", experiment=name, cells=total_cells, detail=detail, run=rec.run)
            elif self._rich is not None:
                self._task = self._rich.add_task(name, total=total_cells, status=detail or "", unit="cells")
            else:
                self._line(f"running {name}" + (f" ({detail})" if detail else "") + f": {total_cells} cells")
        return self

    def cell(self, index: int, description: str, finished: bool = False, status: str = "ok") -> None:
        """A cell starts (``finished=False``) or ends; the hooks below call this."""
        with self._lock:
            rec = self._current()
            if rec is None:
                return
            if finished:
                rec.cells_done += 1
                self._cell = None
            else:
                self._cell = (index, description, time.monotonic())
            if self.mode == "json":
                self._emit("cell", experiment=rec.experiment, index=index, of=rec.cells, done=rec.cells_done,
                           state="done" if finished else "start", status=status if finished else None,
                           description=description)
            elif self._rich is not None and self._task is not None:
                self._rich.update(self._task, completed=rec.cells_done, status=description)

    def done(self, outcome: str, error: str | None = None) -> ExperimentRecord | None:
        """The current notebook ended with ``outcome`` (ok, failed, stopped)."""
        with self._lock:
            rec = self._current()
            if rec is None:
                return None
            rec.outcome, rec.error = outcome, error
            rec.seconds = time.monotonic() - rec.started
            self._flush_line()
            self._clear_steps()
            self._cell = None
            if self.mode == "json":
                self._emit("done", experiment=rec.experiment, outcome=outcome, seconds=round(rec.seconds, 3),
                           cells_done=rec.cells_done, cells=rec.cells, error=error)
            elif self._rich is not None:
                if self._task is not None:
                    mark = "\u2713" if outcome == "ok" else "\u2717"
                    self._rich.update(self._task, description=f"{mark} {rec.experiment}", status=outcome)
                    self._rich.stop_task(self._task)
                if self._overall is not None:
                    self._rich.advance(self._overall)
            else:
                self._line(f"{rec.experiment}: {outcome} after {rec.seconds:.0f} s ({rec.cells_done}/{rec.cells} "
                           "cells)" + (f": {error}" if error else ""))
            self._task = None
        return rec

    def not_run(self, name: str, outcome: str, reason: str | None, run: str | None = None) -> ExperimentRecord:
        """An experiment that ran no notebook: ``skipped`` (``reason``: which dependency failed) or ``failed`` before
        its notebook (its server did not start; ``run``: that boot's run)."""
        with self._lock:
            rec = ExperimentRecord(name, 0, None, run, outcome=outcome, seconds=None, error=reason)
            self.records.append(rec)
            if self.mode == "json":
                self._emit("skipped" if outcome == "skipped" else "done", experiment=name, outcome=outcome, run=run,
                           error=reason, cells=0, cells_done=0, seconds=None)
            elif self._rich is not None:
                mark = "-" if outcome == "skipped" else "\u2717"
                # No bar: an empty one ("0/1") would read as work still to come.
                task = self._rich.add_task(f"{mark} {name}", total=None, status=f"{outcome}: {reason or ''}"[:80],
                                           unit="cells")
                self._rich.stop_task(task)
                if self._overall is not None:
                    self._rich.advance(self._overall)
            else:
                self._line(f"{name}: {outcome}" + (f": {reason}" if reason else ""))
        return rec

    def summary(self, results: Iterable[Mapping[str, Any]] | None = None,
                notes: Iterable[str] = ()) -> list[dict[str, Any]]:
        """The last thing printed: every experiment with its outcome, time and run, then ``notes`` (boot attempts,
        the ledger); returns the rows.

        ``results`` replaces the records kept here, as mappings with at least ``experiment`` and ``outcome``
        (``seconds``, ``run`` and ``error`` when known)."""
        rows = [dict(r) for r in results] if results is not None else [
            {k: (round(v, 3) if k == "seconds" and v is not None else v) for k, v in asdict(r).items()
             if k != "started"} for r in self.records]
        ok = sum(1 for r in rows if r.get("outcome") == "ok")
        failed = [r for r in rows if r.get("outcome") in ("failed", "stopped")]
        skipped = [r for r in rows if r.get("outcome") == "skipped"]
        total = time.monotonic() - self._t0
        stopped = sum(1 for r in failed if r.get("outcome") == "stopped")
        head = (f"campaign {self.campaign}: " if self.campaign else "") + \
            f"{ok} of {len(rows)} {plural(len(rows), 'experiments')} ok" + \
            (f", {len(failed) - stopped} failed" if len(failed) > stopped else "") + \
            (f", {stopped} stopped" if stopped else "") + \
            (f", {len(skipped)} skipped" if skipped else "") + f" in {total:.0f} s"
        notes = list(notes)
        if self.mode == "json":
            self._emit("summary", campaign=self.campaign, ok=ok, experiments=rows, seconds=round(total, 3),
                       failed=[brief(r) for r in failed], skipped=[brief(r) for r in skipped], notes=notes)
            return rows
        self.close()
        if not rows:
            # Nothing ran (the server did not answer, the file named nothing): the error says why; a summary of
            # "0 of 0" before it would only mislead.
            return rows
        if self.mode == "rich":
            self._rich_summary(head, rows, notes)
        else:
            self._line("summary: " + head)
            for r in rows:
                secs = f"{r['seconds']:.0f} s" if isinstance(r.get("seconds"), (int, float)) else "-"
                self._line(f"  {r['experiment']}: {r.get('outcome')} ({secs})"
                           + (f" {r['run']}" if r.get("run") else "") + (f": {first_line(r['error'])}"
                                                                         if r.get("error") else ""))
            for note in notes:
                self._line("  " + note)
        return rows

    def close(self) -> None:
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=5)
        self._beat = None
        with self._lock:
            if self._rich is not None:
                self._rich.stop()
                self._rich = None

    # ---- core.progress's sink: counts and phases of this process (a server's boot) and of the kernel ----------

    def count(self, label: str, done: int, total: int, unit: str) -> None:
        """``done`` of ``total`` ``unit`` of the step ``label``."""
        with self._lock:
            step = self._steps.get(label)
            # A label counted again from the start (the next regime's "level 1 streams") is a new step.
            new = step is None or step.total is None or (
                step.done is not None and done < total and (done < step.done or step.done >= step.total))
            if new:
                self._drop(label)
                step = self._steps[label] = Step(label, time.monotonic())
            assert step is not None
            step.done, step.total, step.unit = done, total, unit
            rec = self._current()
            if self.mode == "json":
                self._emit("count", experiment=rec.experiment if rec else None, label=label, done=done, total=total,
                           unit=unit)
            elif self._rich is not None:
                if step.task is None:
                    step.task = self._rich.add_task(f"  {label}", total=total, status="", unit=unit)
                self._rich.update(step.task, completed=done, total=total)
            elif new or done >= total:
                self._line("  " + step.words() + (f" in {time.monotonic() - step.started:.0f} s"
                                                  if done >= total and not new else ""))

    def phase(self, label: str, text: str) -> None:
        """The step ``label`` is now doing ``text``."""
        with self._lock:
            step = self._steps.get(label)
            if step is not None and step.total is None and step.text == text:
                return  # said already
            if step is None or step.total is not None:
                self._drop(label)
                step = self._steps[label] = Step(label, time.monotonic())
            step.text = text
            if self.mode == "json":
                rec = self._current()
                self._emit("phase", experiment=rec.experiment if rec else None, label=label, text=text,
                           seconds=round(time.monotonic() - step.started, 3))
            elif self._rich is not None:
                if step.task is None:
                    step.task = self._rich.add_task(f"  {label}", total=None, status=text, unit="")
                self._rich.update(step.task, status=text)
            else:
                self._line(f"  {label} ({time.monotonic() - step.started:.0f} s): {text}")

    def end(self, label: str, text: str = "") -> None:
        """The step ``label`` is over (``text``: how it ended); its line or bar goes."""
        with self._lock:
            step = self._steps.get(label)
            seconds = time.monotonic() - step.started if step is not None else 0.0
            self._drop(label)
            if self.mode == "json":
                self._emit("end", label=label, text=text, seconds=round(seconds, 3))
            elif self._rich is not None:
                if text:
                    self._rich.console.print(f"{label}: {text}", highlight=False, markup=False)
            else:
                self._line(f"  {label}: {text}" if text else f"  {label}: done after {seconds:.0f} s")

    # ---- the executor's side (execute.CellWatcher) -----------------------------------------------------------

    def hooks(self) -> Mapping[str, Callable[..., Any]]:
        """nbclient's cell hooks: on_cell_execute when a cell is sent, on_cell_executed when its reply came.

        (on_cell_complete fires before the cell has finished, and on_notebook_complete not at all under papermill.)"""

        def started(cell: Any = None, cell_index: int = 0, **_: Any) -> None:
            self.cell(cell_index, cell_words(cell, cell_index))

        def executed(cell: Any = None, cell_index: int = 0, execute_reply: Any = None, **_: Any) -> None:
            status = ((execute_reply or {}).get("content") or {}).get("status", "ok")
            self.cell(cell_index, cell_words(cell, cell_index), finished=True, status=status)

        return {"on_cell_execute": started, "on_cell_executed": executed}

    def write(self, text: str) -> int:
        """The kernel's stdout, as papermill tees it: count and phase lines update the display, the rest is ignored."""
        if "\n" not in text:
            # Split only what came: a cell printing megabytes without a newline arrives in thousands of pieces, and
            # splitting the whole buffer each time made the campaign crawl. No count or phase line is that long.
            self._buffer = (self._buffer + text)[-LONGEST_LINE - 1:]  # still too long to read, if it was
            return len(text)
        head, *more = text.split("\n")
        lines = [self._buffer + head, *more[:-1]]
        self._buffer = more[-1][-LONGEST_LINE - 1:]
        for line in lines:
            self._read(line)
        return len(text)

    def flush(self) -> None:
        pass

    def experiments_left_s(self, left: int) -> float | None:
        """Seconds the ``left`` experiments not yet finished will take at the mean notebook time of those finished
        (a notebook's time excludes its server's boot), less what the running one has done; None before any."""
        with self._lock:
            times = [r.seconds for r in self.records if r.seconds is not None and r.outcome != "running"]
            if not times:
                return None
            mean = sum(times) / len(times)
            rec = self._current()
            running = min(mean, time.monotonic() - rec.started) if rec is not None else 0.0
            return max(0.0, mean * left - running)

    # ---- internals ----------------------------------------------------------------------------------------------

    def _current(self) -> ExperimentRecord | None:
        return self.records[-1] if self.records and self.records[-1].outcome == "running" else None

    def _flush_line(self) -> None:
        if self._buffer:
            self._read(self._buffer)
            self._buffer = ""

    def _read(self, line: str) -> None:
        if self._current() is None or len(line) > LONGEST_LINE:
            return  # a line longer than any count or phase line: COUNT_LINE's search is quadratic in its length
        m = COUNT_LINE.search(line)
        if m:
            self.count(m["label"].strip(), int(m["done"]), int(m["total"]), m["unit"])
            return
        p = PHASE_LINE.match(line.strip())
        if p:
            self.phase(p["label"].strip(), p["text"].strip())
            return
        e = END_LINE.match(line.strip())
        if e and e["label"].strip() in self._steps:
            self.end(e["label"].strip(), (e["text"] or "").strip())

    def _drop(self, label: str) -> None:
        step = self._steps.pop(label, None)
        if step is not None and step.task is not None and self._rich is not None:
            self._rich.remove_task(step.task)

    def _clear_steps(self) -> None:
        for label in list(self._steps):
            self._drop(label)

    def _still(self) -> str | None:
        """What is running now, in one line, or None when nothing is."""
        now = time.monotonic()
        parts = []
        rec = self._current()
        if rec is not None:
            where = f"{rec.experiment}: {now - rec.started:.0f} s, {rec.cells_done}/{rec.cells} cells"
            if self._cell is not None:
                where += f", cell {self._cell[0]} ({self._cell[1]}) for {now - self._cell[2]:.0f} s"
            parts.append(where)
        parts += [step.words() + f" ({now - step.started:.0f} s)" for step in self._steps.values()
                  if step.total is None or (step.done or 0) < step.total]
        return None if not parts else "still running: " + "; ".join(parts)

    def _heartbeat(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if time.monotonic() - self._last_line < QUIET_EVERY_S:
                    continue
                line = self._still()
                if line is not None:
                    self._line(line)

    def _emit(self, event: str, **fields: Any) -> None:
        doc = {"event": event, "t": round(time.monotonic() - self._t0, 3), **fields}
        self._line(json.dumps(doc, default=str))

    def _line(self, text: str) -> None:
        with self._lock:
            self._last_line = time.monotonic()
            stamp = "" if self.mode == "json" else time.strftime("%H:%M:%S ")
            print(stamp + text, file=self.file, flush=True)

    def _start_rich(self, experiments: int | None) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, ProgressColumn,
                                   SpinnerColumn, TextColumn, TimeElapsedColumn)
        from rich.text import Text

        class Left(ProgressColumn):
            """How many are left, in the task's own unit."""

            def render(self, task: Any) -> Text:
                if task.total is None:
                    return Text("")
                left = int(task.total - task.completed)
                return Text(f"{left} {plural(left, task.fields.get('unit', ''))} left", style="dim")

        progress = self

        class Eta(ProgressColumn):
            """Time left at the pace so far, once a count has moved (not for cells: they differ too much). For the
            campaign, from the work left: the experiments' own times (server boots counted apart, so a boot does
            not make the estimate climb while the work shrinks)."""

            def render(self, task: Any) -> Text:
                if task.total is None or not task.completed or task.finished or task.elapsed is None \
                        or task.stop_time is not None or task.fields.get("unit") == "cells":
                    return Text("")
                if task.fields.get("unit") == "experiments":
                    left = progress.experiments_left_s(int(task.total - task.completed))
                    return Text("" if left is None else f"~{left:.0f} s to go, boots apart", style="dim")
                left = task.elapsed / task.completed * (task.total - task.completed)
                return Text(f"~{left:.0f} s to go", style="dim")

        self._rich = RichProgress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            Left(), TimeElapsedColumn(), Eta(), TextColumn("{task.fields[status]}", style="dim"),
            console=Console(file=self.file), transient=False,
        )
        self._rich.start()
        if experiments:
            name = f"campaign {self.campaign}" if self.campaign else "campaign"
            self._overall = self._rich.add_task(name, total=experiments, status="", unit="experiments")

    def _rich_summary(self, head: str, rows: list[dict[str, Any]], notes: list[str]) -> None:
        from rich.console import Console
        from rich.table import Table

        console = Console(file=self.file)
        console.print(head, highlight=False, markup=False)
        table = Table()
        for col in ("experiment", "outcome", "seconds", "run"):
            table.add_column(col, justify="right" if col == "seconds" else "left")
        for r in rows:
            secs = f"{r['seconds']:.0f}" if isinstance(r.get("seconds"), (int, float)) else "-"
            table.add_row(str(r["experiment"]), str(r.get("outcome")), secs, str(r.get("run") or r.get("error") or ""))
        console.print(table)
        for note in notes:
            console.print(note, highlight=False, markup=False)
