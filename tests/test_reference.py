"""The reference campaign: published figures transcribed with provenance (and findable in the published summary),
its notebooks run without a server, and every seat, pod and cost claim computed from those files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from offload_lab.campaigns import runner as campaign
from offload_lab.seats import capacity
from offload_lab.paper import claims
from offload_lab.experiments.capacity import claims as claims_capacity
from offload_lab.seats import cost
from offload_lab.published import transcription as published
from offload_lab.core import runs
from offload_lab.seats.capacity import Demand
from offload_lab.core.errors import InputError
from offload_lab.published.study_inputs import gather
from offload_lab.paper.discovery import claim_registry

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "configs" / "published" / "study.yaml"
REFERENCE = ROOT / "configs" / "campaigns" / "reference.yaml"
ISSUE_CLAIMS = ("seats.alpha_1pct", "seats.alpha_5pct", "pods.team_100", "pods.team_250", "cost.break_even_seats",
                "cost.saving_team_100", "cost.saving_team_250")


def _source_text() -> str:
    src = (ROOT / published.load_transcription(STUDY).source).resolve()
    if not src.is_file():
        pytest.skip(f"the published summary {src} is not on this machine")
    return src.read_text(encoding="utf-8")


def _spellings(v) -> set[str]:
    if isinstance(v, str):
        return {v.lower()}
    out = {f"{v:g}", f"{v:,}", f"{100 * v:g}%", f"{v:.2f}", f"{v:.3f}", f"{100 * v:.1f}%"}
    if float(v).is_integer():
        out |= {f"{int(v):,}", str(int(v))}
        words = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
        if 0 <= v < len(words):
            out |= {words[int(v)], "single"}
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())  # the summary wraps its lines; a quote may span two


def test_every_transcribed_figure_is_quoted_from_the_summary_and_its_value_is_in_the_quote():
    text = _source_text()
    headings = [ln for ln in text.splitlines() if ln.startswith("#")]
    t = published.load_transcription(STUDY)
    flat = _flat(text)
    for f in t.figures:
        for part in f.published.split(" | "):
            assert part.strip() in flat, f"{f.key}: {part!r} is not in the published summary"
        values = [] if f.value is None else (f.value if isinstance(f.value, list) else [f.value])
        for v in values:
            assert any(s in f.published.lower() for s in _spellings(v)), f"{f.key}: {v!r} not in {f.published!r}"
        assert any(f.section.split(" (")[0] in h for h in headings), f"{f.key}: no section {f.section!r}"
        if f.as_published:
            assert f.as_published in f.published
    for name, table in t.tables.items():
        assert table.published in text, name
        for row in table.rows:
            for col, cell in zip(table.columns, row):
                if cell is None or col in table.labels:
                    continue
                assert any(s in flat.lower() for s in _spellings(cell)), (name, col, cell)


# Numerals of the summary that are not figures of the study: names of experiments, units' definitions, versions and
# model names of the home rigs' hardware (each table cell that holds them is transcribed verbatim).
_NOT_FIGURES = re.compile(r"E\d+(/E\d+)?|2\^30|10\^9|pod [123]|Q\d_[0K]\w*|x16")


def _numbers(text: str) -> list[str]:
    body = _NOT_FIGURES.sub(" ", text)
    return re.findall(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?", body)


def test_every_number_of_the_summary_is_in_the_transcription():
    """The other direction: each numeral the summary prints is some transcribed figure's value or sits in a
    transcribed quote or table cell, so no published figure is left out of the data."""
    text = _source_text()
    t = published.load_transcription(STUDY)
    values: set[float] = set()
    # A figure of the summary may be transcribed from the companion that quotes the study's own words ("12 cents").
    every = [*t.figures, *(f for a in t.also for f in published.load_transcription(ROOT / a).figures)]
    quoted = " ".join(f.published for f in every)
    for f in every:
        for v in ([] if f.value is None else (f.value if isinstance(f.value, list) else [f.value])):
            if not isinstance(v, str):
                values |= {float(v), round(100 * float(v), 6)}
    for table in t.tables.values():
        for row in table.rows:
            for cell in row:
                if isinstance(cell, (int, float)):
                    values |= {float(cell), abs(float(cell))}
                elif isinstance(cell, str):
                    quoted += " " + cell
    first = text.index("\n## ")  # the preamble is about the file, not the study (its first paragraph is transcribed)
    preamble_figures = text[: text.index("\n\n", text.index("# ") + 2) + 2]
    missing = []
    for num in _numbers(preamble_figures[preamble_figures.index("\n\n"):] + text[first:]):
        v = float(num.replace(",", ""))
        if v in values or abs(v) in values or num in quoted:
            continue
        missing.append(num)
    assert not missing, f"numbers of the summary in no transcribed figure: {missing}"


def test_a_deleted_published_file_fails_the_build_naming_it(tmp_path):
    """The transcription, its profile and the run's files: each missing one stops what needs it, by name."""
    from offload_lab.core.errors import ClaimError

    with pytest.raises(InputError, match="gone.yaml"):
        published.load_transcription(tmp_path / "gone.yaml")
    run = runs.new_run(tmp_path / "data", "reference", published.EXPERIMENT, {})
    published.transcribe(run, "configs/published/study.yaml", ROOT)
    run.finish("ok")
    (run.path / "boots.csv").unlink()
    with pytest.raises(ClaimError, match="boots.csv is missing"):
        claims.resolve_claims("reference", tmp_path / "data", ROOT)


def test_transcription_is_checked_against_the_summary(tmp_path):
    _source_text()
    t = published.load_transcription(STUDY)
    assert published.check_source(t, ROOT) is True
    changed = t.model_copy(update={"source_sha256": "0" * 64})
    with pytest.raises(InputError, match="has changed since it was transcribed"):
        published.check_source(changed, ROOT)
    assert published.check_source(t.model_copy(update={"source": str(tmp_path / "gone.md")}), ROOT) is False


def test_an_absent_summary_is_recorded_as_unchecked_and_the_paper_says_so(tmp_path):
    """Where the published summary is not on the machine (it is not part of the project), the transcription still
    runs: the run records source_checked false, and the claim the paper's first page reads says "no"."""
    from offload_lab.experiments.published.claims import SECTION

    t = published.load_transcription(STUDY)
    moved = tmp_path / "study.yaml"
    moved.write_text(STUDY.read_text(encoding="utf-8").replace(f"source: {t.source}\n",
                                                             f"source: {tmp_path / 'gone.md'}\n", 1))
    assert published.load_transcription(moved).source == str(tmp_path / "gone.md")
    run = runs.new_run(tmp_path / "data", "reference", published.EXPERIMENT, {})
    assert published.transcribe(run, moved, ROOT)["source_checked"] is False
    run.finish("ok")
    assert runs.load_manifest(run.path)["provenance"]["source_checked"] is False
    got = claims.resolve_claims("reference", tmp_path / "data", ROOT,
                                registry={"pub.source_checked": SECTION["pub.source_checked"]})
    assert got["pub.source_checked"].text == "no"
    paper = (ROOT / "paper" / "paper.qmd").read_text(encoding="utf-8")
    assert '{.when claim="pub.source_checked" equals="no"}' in paper
    assert '{.when claim="pub.source_checked" equals="yes"}' in paper


def test_bad_transcription_rejected(tmp_path):
    data = yaml.safe_load(STUDY.read_text())
    data["figures"].append(dict(data["figures"][0]))
    bad = tmp_path / "t.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="more than once"):
        published.load_transcription(bad)


def test_transcribed_run_records_its_provenance(tmp_path):
    run = runs.new_run(tmp_path, "reference", published.EXPERIMENT, {})
    prov = published.transcribe(run, "configs/published/study.yaml", ROOT)
    run.finish("ok")
    assert prov["kind"] == "transcribed from the published summary"
    assert set(prov["sections"]) == {"figures.json", "agent_turns.csv", "boots.csv", "quality.csv", "home_rigs.csv",
                                     "profile-published-week.json", "blog_quality.csv", "community_memory_math.csv",
                                     "community_rigs.csv"}
    # The companions (the study's derived figures, the community page) are named with their own sources and sha256.
    also = {a["path"]: a for a in prov["also"]}
    assert set(also) == {"configs/published/derived.yaml", "configs/published/community-memory-math.yaml",
                         "configs/published/addenda.yaml"}
    assert also["configs/published/derived.yaml"]["source"].endswith("published-derived.md")
    assert all(len(a["sha256"]) == 64 and len(a["source_sha256"]) == 64 for a in also.values())
    m = runs.load_manifest(run.path)
    assert m["provenance"]["source"].endswith("published-study.md") and "provenance.json" in m["files"]
    pub = published.read_published(tmp_path, "reference")
    assert pub.number("pod_eur_per_hour") > 0 and pub.table("agent_turns")["streams"].tolist()[0] == 1
    assert pub.number("volume_devs_full") == 262 and pub.figures["volume_devs_full"]["source"].endswith("derived.md")
    assert pub.table("community_memory_math")["smallest_memory_gb"].tolist()[0] == 512
    assert runs.verify_run(run.path) == []


SMALL = "reference-small"  # a name of its own: the paper reads a campaign file's runs only with its parameters


def _small_campaign(tmp_path: Path) -> Path:
    spec = yaml.safe_load(REFERENCE.read_text())
    spec["name"] = SMALL
    for e in spec["experiments"]:
        e["notebook"] = str(ROOT / e["notebook"])
        if e["experiment"] == "capacity":
            e["parameters"].update(max_team=300, simulation_weeks=1, rhos=[0.0, 0.05, 0.1])
        if e["experiment"] == "cost":
            e["parameters"].update(max_team_plot=40)
        if e["experiment"] == "ref_quality":
            e["parameters"].update(resamples=500)
    f = tmp_path / "reference.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def _section_registry() -> dict:
    return claims_capacity.SECTION


def _expected(data_root: Path, campaign: str = "reference") -> dict[str, float]:
    """The issue's figures, computed here straight from the published run through the library."""
    inp = gather(published.read_published(data_root, campaign), "published-week", "published")
    d, prices = Demand(inp.q), cost.Prices(inp.pod_price_per_hour, inp.seat_price_per_month, currency=inp.currency)
    pods = {n: capacity.pods_for_team(n, inp.streams_per_pod, d, 0.01) for n in (100, 250)}
    return {
        "seats.alpha_1pct": capacity.seats_for_streams(inp.streams_per_pod, d, 0.01),
        "seats.alpha_5pct": capacity.seats_for_streams(inp.streams_per_pod, d, 0.05),
        "pods.team_100": pods[100], "pods.team_250": pods[250],
        "cost.break_even_seats": prices.break_even_seats,
        "cost.saving_team_100": cost.team_cost(100, pods[100], prices).saving_fraction,
        "cost.saving_team_250": cost.team_cost(250, pods[250], prices).saving_fraction,
    }


def test_reference_campaign_file_is_valid():
    c = campaign.load_campaign(REFERENCE)
    campaign.validate(c)
    assert c.spec.stack is None and not any(e.needs_server for e in c.spec.experiments)


@pytest.mark.slow
def test_reference_campaign_runs_without_a_server_and_its_claims_resolve(tmp_path):
    result = campaign.run_campaign(_small_campaign(tmp_path), data_root=tmp_path / "data", log=lambda _: None)
    assert [p.parent.name for p in result.runs] == ["published", "ref_model", "ref_context", "ref_regimes",
                                                     "ref_topology", "ref_quality", "ref_campaign", "ref_hardware",
                                                     "capacity", "cost"]
    for run_dir in result.runs:
        assert runs.load_manifest(run_dir)["outcome"] == "ok" and runs.verify_run(run_dir) == []
    provenance = runs.load_manifest(result.runs[0])["provenance"]
    assert provenance["kind"] == "transcribed from the published summary"
    assert provenance["sections"]["figures.json"] and provenance["source"].endswith("published-study.md")
    cs = claims.resolve_claims(SMALL, tmp_path / "data", ROOT, registry=_section_registry())
    assert not [c.name for c in cs.claims.values() if c.status != "ok"]
    # The study's derived figures beside their recomputation (the central result first), and the closing table: every
    # figure of the three transcriptions, with its recomputation where there is one.
    registry = claim_registry()
    wanted = ("study.seats.table", "study.volume_devs_full.recomputed", "study.team_20_extra_eur.recomputed",
              "joint.prefill_tok_s", "joint.binding", "pub.all_figures")
    got = claims.resolve_claims(SMALL, tmp_path / "data", ROOT, registry={n: registry[n] for n in wanted})
    assert got["study.volume_devs_full.recomputed"].text == "262" and got["study.team_20_extra_eur.recomputed"].text == "1,846"
    assert "q (7.1%)" in got["joint.binding"].text
    table = got["pub.all_figures"].value
    keys = [f.key for name in ("study.yaml", "derived.yaml", "community-memory-math.yaml", "addenda.yaml")
            for f in published.load_transcription(ROOT / "configs" / "published" / name).figures]
    assert len(table["rows"]) == len(keys)
    by_words = {r[0]: r for r in table["rows"]}
    assert by_words["1,847 EUR a month more than subscriptions"][4] == "1,846"
    assert table["columns"][:2] == ["Published words", "Published by"]
    assert not any(r[3].startswith("1 errors") for r in table["rows"])
    printed = [r for r in table["rows"] if r[-1] != "this table only"]
    assert len(printed) > len(keys) // 2
    for name, want in _expected(tmp_path / "data", SMALL).items():
        assert cs[name].value == pytest.approx(want), name
    inputs = json.loads((next(r for r in result.runs if r.parent.name == "capacity") / "inputs.json").read_text())
    assert inputs["provenance"]["q"]["section"] == "E11 Usage profile"
    assert inputs["values"]["streams_at_bar_from_table"] == inputs["values"]["streams_per_pod"]


def test_committed_reference_data_verifies_and_gives_the_claims():
    data = ROOT / "data"
    if not (data / "reference").is_dir():
        pytest.skip("no committed reference data")
    for exp in ("published", "capacity", "cost"):
        run_dir = runs.latest_run(data, "reference", exp)
        assert run_dir is not None, exp
        assert runs.verify_run(run_dir) == []
    cs = claims.resolve_claims("reference", data, ROOT, registry=_section_registry())
    for name, want in _expected(data).items():
        assert cs[name].status == "ok" and cs[name].value == pytest.approx(want), name
    assert re.fullmatch(r"\d+(\.\d)?%", cs["cost.saving_team_250"].text)
