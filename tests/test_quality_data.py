"""Benchmark data: sha256 checks, downloads kept only when they match, fixed subsets re-derivable from their seed."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from quality_fixtures import datasets_dir

from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError
from offload_lab.quality import data, subsets


def test_pinned_files_load_and_match_their_readme():
    d = datasets_dir()
    assert len(data.gsm8k_items(d)) == 1319
    ifeval = data.ifeval_items(d)
    assert len(ifeval) == 541 and len({it.item_id for it in ifeval}) == 541
    assert sum(len(it.fields["instruction_id_list"]) for it in ifeval) == 834
    he = data.humaneval_items()
    assert len(he) == 164 and he[0].item_id == "HumanEval/0"


def test_a_changed_file_is_refused_naming_it(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    src = datasets_dir() / "gsm8k" / "test.jsonl"
    target = tmp_path / "gsm8k" / "test.jsonl"
    target.write_bytes(src.read_bytes()[:-10])
    with pytest.raises(InputError, match=r"test\.jsonl has sha256 .* expected 3730d312"):
        data.gsm8k_items(tmp_path)


def test_missing_data_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.delenv(data.DATASETS_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(InputError, match="OFFLOAD_LAB_DATASETS"):
        data.ifeval_items()
    with pytest.raises(InputError, match=r"ifeval/input_data\.jsonl.*67ffeee0"):
        data.ifeval_items(tmp_path)


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
