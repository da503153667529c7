"""Benchmark data: the shipped third-party files (sha256, licences, package data), a missing or changed one refused,
a directory overriding them, downloads only for files not shipped and kept only when they match, where a run read
each file from, fixed subsets re-derivable from their seed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import tomllib

import httpx
import pytest

from quality_fixtures import REPO_ROOT, datasets_dir

from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError
from offload_lab.experiments.quality import runner as experiment
from offload_lab.quality import data, subsets


SHIPPED = ["gsm8k/test.jsonl", "gsm8k/LICENSE", "ifeval/input_data.jsonl", "ifeval/LICENSE"]


def _pinned() -> dict[str, str]:
    """Every shipped file with the sha256 the library pins for it."""
    out = {}
    for f in data.FILES.values():
        out[f.relpath] = f.sha256
        out[f.licence_file] = f.licence_sha256
    return out


@pytest.fixture
def no_override(monkeypatch, tmp_path):
    """No dataset directory and an empty download cache: only what the package ships."""
    monkeypatch.delenv(data.DATASETS_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_pinned_files_load_by_default_from_what_the_package_ships(no_override):
    assert len(data.gsm8k_items()) == 1319
    ifeval = data.ifeval_items()
    assert len(ifeval) == 541 and len({it.item_id for it in ifeval}) == 541
    assert sum(len(it.fields["instruction_id_list"]) for it in ifeval) == 834
    he = data.humaneval_items()
    assert len(he) == 164 and he[0].item_id == "HumanEval/0"
    for bench in ("gsm8k", "ifeval"):
        rec = data.origin(bench)
        assert rec["origin"] == "shipped" and rec["sha256"] == data.FILES[bench].sha256
        assert rec["read_from"] == f"offload_lab/resources/third_party/datasets/{data.FILES[bench].relpath}"


def test_shipped_bytes_have_the_recorded_sha256_and_licences():
    root = data.shipped_dir()
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == sorted(
        SHIPPED + ["README.md", ".gitattributes"])
    for rel, sha in _pinned().items():
        assert hashlib.sha256((root / rel).read_bytes()).hexdigest() == sha, rel
    assert "MIT License" in (root / "gsm8k/LICENSE").read_text() and "OpenAI" in (root / "gsm8k/LICENSE").read_text()
    assert "Apache License" in (root / "ifeval/LICENSE").read_text()
    # The folder's README gives each file's source commit, licence and sha256: the ones the library checks.
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert "third-party" in readme.lower() and "unmodified" in readme
    for f in data.FILES.values():
        row = next(ln for ln in readme.splitlines() if ln.startswith(f"| `{f.relpath}` |"))
        for word in (f.repo, f.source_path, f.commit, f.licence, f.sha256, f.licence_file):
            assert word in row, (f.relpath, word)
        assert f.licence_sha256 in readme
    # Byte for byte, whatever git's line-ending settings: the folder is marked binary.
    assert "* -text" in (root / ".gitattributes").read_text()


def test_package_data_takes_the_shipped_files():
    """pyproject's package-data globs (setuptools: relative to the package folder) match every shipped file, so a
    wheel carries them."""
    globs = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    pkg = REPO_ROOT / "src" / "offload_lab"
    taken = {p.relative_to(pkg).as_posix() for g in globs["offload_lab"] for p in pkg.glob(g) if p.is_file()}
    for rel in SHIPPED + ["README.md"]:
        assert f"resources/third_party/datasets/{rel}" in taken, rel


@pytest.mark.parametrize("rel", ["gsm8k/test.jsonl", "ifeval/input_data.jsonl"])
def test_a_changed_or_missing_shipped_file_is_refused_naming_it(tmp_path, no_override, rel):
    bench = rel.split("/")[0]
    copy = tmp_path / "shipped"
    shutil.copytree(data.shipped_dir(), copy)
    target = copy / rel
    raw = bytearray(target.read_bytes())
    raw[100] ^= 1  # one bit of one byte
    target.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=rf"{re.escape(str(target))} has sha256 .* expected "
                                         rf"{data.FILES[bench].sha256}.*restore it .*git checkout"):
        data.locate(bench, shipped=copy)
    target.unlink()
    # Missing: an error naming the file, never a download (allowed or not).
    with pytest.raises(InputError, match=rf"{re.escape(str(target))} is missing from offload-lab.*reinstall"):
        data.locate(bench, allow_download=True, shipped=copy)


def test_cli_refuses_a_changed_shipped_file_with_exit_2(tmp_path, no_override, monkeypatch, capsys):
    copy = tmp_path / "shipped"
    shutil.copytree(data.shipped_dir(), copy)
    target = copy / "gsm8k" / "test.jsonl"
    target.write_bytes(target.read_bytes()[:-10])
    monkeypatch.setattr(data, "shipped_dir", lambda: copy)
    assert cli.main(["quality", "subset", "--benchmark", "gsm8k"]) == 2
    err = capsys.readouterr().err
    assert str(target) in err and "git checkout" in err and "Traceback" not in err


def test_a_directory_overrides_the_shipped_copy_for_the_files_it_holds(tmp_path, no_override, monkeypatch):
    (tmp_path / "d" / "gsm8k").mkdir(parents=True)
    shutil.copy(data.shipped_dir() / "gsm8k" / "test.jsonl", tmp_path / "d" / "gsm8k" / "test.jsonl")
    monkeypatch.setenv(data.DATASETS_ENV, str(tmp_path / "d"))
    assert data.origin("gsm8k") == {"benchmark": "gsm8k", "origin": "directory", "sha256": data.GSM8K.sha256,
                                    "read_from": str(tmp_path / "d" / "gsm8k" / "test.jsonl")}
    assert data.origin("ifeval")["origin"] == "shipped"  # the directory does not hold it
    monkeypatch.delenv(data.DATASETS_ENV)
    assert data.origin("gsm8k", tmp_path / "d")["origin"] == "directory"  # --datasets, likewise


def test_a_changed_file_in_a_directory_is_refused_naming_it(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    src = datasets_dir() / "gsm8k" / "test.jsonl"
    target = tmp_path / "gsm8k" / "test.jsonl"
    target.write_bytes(src.read_bytes()[:-10])
    with pytest.raises(InputError, match=r"test\.jsonl has sha256 .* expected 3730d312.*OFFLOAD_LAB_DATASETS"):
        data.gsm8k_items(tmp_path)


def test_a_file_not_shipped_is_downloaded_only_when_asked(tmp_path, no_override):
    good = (datasets_dir() / "ifeval" / "input_data.jsonl").read_bytes()
    other = dataclasses.replace(data.IFEVAL, shipped=False, licence_file=None, licence_sha256=None)
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=good)

    with pytest.raises(InputError, match=r"ifeval data file not found.*OFFLOAD_LAB_DATASETS.*--download"):
        data.locate_file(other)
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        got = data.locate_file(other, allow_download=True, client=client)
    assert got.origin == "download" and got.path == tmp_path / "cache" / "offload-lab" / "datasets" / other.relpath
    assert got.record()["url"] == other.url and len(seen) == 1
    assert data.locate_file(other).origin == "download" and len(seen) == 1  # the earlier download, checked


def test_download_keeps_only_a_file_with_the_pinned_sha256(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    good = (datasets_dir() / "ifeval" / "input_data.jsonl").read_bytes()
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=good)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        path = data.download(data.IFEVAL, tmp_path / "dl", client=client)
    assert path.read_bytes() == good
    assert seen == [f"https://raw.githubusercontent.com/google-research/google-research/"
                    f"{data.IFEVAL.commit}/instruction_following_eval/data/input_data.jsonl"]

    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, content=b"tampered"))) as client:
        with pytest.raises(InputError, match="not kept"):
            data.download(data.GSM8K, tmp_path / "dl2", client=client)
    assert not (tmp_path / "dl2" / "gsm8k" / "test.jsonl").exists()


def test_a_quality_run_records_where_each_file_came_from(tmp_path, no_override):
    rec = experiment.data_record(experiment.QualityParams())
    assert {b: r["origin"] for b, r in rec.items()} == {"gsm8k": "shipped", "ifeval": "shipped",
                                                        "humaneval": "package"}
    assert rec["gsm8k"]["commit"] == data.GSM8K.commit and rec["ifeval"]["licence"] == "Apache-2.0"
    (tmp_path / "d").mkdir()
    shutil.copytree(data.shipped_dir() / "ifeval", tmp_path / "d" / "ifeval")
    rec = experiment.data_record(experiment.QualityParams(benchmarks=["ifeval"], datasets=str(tmp_path / "d")))
    assert rec["ifeval"]["origin"] == "directory" and rec["ifeval"]["sha256"] == data.IFEVAL.sha256


def test_stored_subsets_have_the_planned_sizes_and_only_ids():
    for bench, n in subsets.SIZES.items():
        s = subsets.load(bench)
        assert s.n == n == len(s.ids) == len(set(s.ids))
        raw = json.loads((subsets.subsets_dir() / f"{bench}.json").read_text())
        assert set(raw) == {"benchmark", "n", "seed", "method", "source", "ids"}  # no benchmark text
    assert subsets.load("gsm8k").seed == subsets.SEED


def test_stored_subsets_are_what_the_recorded_seed_draws():
    for bench in subsets.SIZES:
        assert subsets.rederive(bench, datasets_dir()).ids == subsets.load(bench).ids


def test_subset_items_follow_the_stored_order_and_limit():
    items = subsets.subset_items("gsm8k", datasets_dir(), limit=3)
    assert [it.item_id for it in items] == list(subsets.load("gsm8k").ids[:3])


def test_choose_is_deterministic_and_keeps_file_order():
    ids = [str(i) for i in range(100)]
    a, b = subsets.choose("gsm8k", ids, 10, seed=5), subsets.choose("gsm8k", ids, 10, seed=5)
    assert a.ids == b.ids and list(a.ids) == sorted(a.ids, key=int)
    assert subsets.choose("gsm8k", ids, 10, seed=6).ids != a.ids


def test_cli_subset_check(capsys):
    assert cli.main(["quality", "subset", "--datasets", str(datasets_dir()), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(row["reproduced"] for row in out) and len(out) == 3


def test_subset_from_another_file_is_refused(tmp_path, monkeypatch):
    other = tmp_path / "subsets"
    shutil.copytree(subsets.subsets_dir(), other)
    doc = json.loads((other / "gsm8k.json").read_text())
    doc["source"]["sha256"] = "0" * 64
    (other / "gsm8k.json").write_text(json.dumps(doc))
    monkeypatch.setattr(subsets, "subsets_dir", lambda: other)
    with pytest.raises(InputError, match="do not belong together"):
        subsets.subset_items("gsm8k", datasets_dir())
