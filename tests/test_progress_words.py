"""Progress you can trust (issue 37): an ETA from the work left that a server boot does not push up, words rather
than source code in the status column, plurals that agree, no "0 of 0" summary before an error, and a follow-up
command that carries the --data-dir the run used."""

from __future__ import annotations

import io
import time

import nbformat

from offload_lab.campaigns import progress


def test_no_summary_when_nothing_ran() -> None:
    out = io.StringIO()
    p = progress.Progress("quiet", campaign="c", file=out)
    assert p.summary() == []
    assert "0 of 0" not in out.getvalue() and "summary" not in out.getvalue()


def test_summary_words_agree_with_their_numbers() -> None:
    out = io.StringIO()
    p = progress.Progress("quiet", campaign="c", file=out)
    p.experiment("context", 2)
    p.done("ok")
    p.summary()
    assert "1 of 1 experiment ok" in out.getvalue() and "experiment(s)" not in out.getvalue()


def test_the_campaigns_eta_comes_from_the_experiments_left_not_from_boots(monkeypatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    p = progress.Progress("json", campaign="c", file=io.StringIO())
    assert p.experiments_left_s(3) is None  # nothing finished: no pace yet
    p.experiment("a", 1)
    clock[0] += 10
    p.done("ok")
    clock[0] += 100  # a server boots between experiments: no notebook time, no change to the pace
    assert p.experiments_left_s(2) == 20
    p.experiment("b", 1)
    clock[0] += 4
    assert p.experiments_left_s(2) == 16  # the running one has done 4 of its 10 s


def test_the_status_column_says_words_not_code() -> None:
    cell = nbformat.v4.new_code_cell("with notebook.running('context', globals()) as nr:\n"
                                     "    summary = runner.run_experiment(nr.run, nr.base_url, nr.params)")
    assert progress.cell_words(cell, 2) == "cell 3"
    params = nbformat.v4.new_code_cell("campaign = 'x'", metadata={"tags": ["injected-parameters"]})
    assert progress.cell_words(params, 0) == "setting the parameters"


def test_the_ledger_command_carries_the_data_dir() -> None:
    from types import SimpleNamespace

    from offload_lab.campaigns.commands import campaign_notes as _campaign_notes

    result = SimpleNamespace(boot_attempts=[], runs=[], session="s1", campaign="embedded")
    assert _campaign_notes(result, "/tmp/d") == ["ledger session s1: `offload-lab campaign ledger --campaign embedded "
                                                 "--data-dir /tmp/d`"]
    assert _campaign_notes(result, "data") == ["ledger session s1: `offload-lab campaign ledger --campaign embedded`"]
