"""Plan files as bad input (issue 14): integer layers and experts written one way only, bounded files, counted
problems, UTF-8, no NaN, and `plan make --out` that never overwrites without --force."""

from __future__ import annotations

import json

import pytest
from fit_helpers import tiny_model  # noqa: F401

from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError
from offload_lab.fit import plan as planmod

HEAD = '{"format": "offload-lab-plan", "version": 1, '


def _read(tmp_path, text: str | bytes):
    p = tmp_path / "p.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return planmod.read_plan(p)


@pytest.mark.parametrize("body, message", [
    ('"host_experts": {"01": [1]}', r"layer key '01' is not a layer number.*write '1'"),
    ('"host_experts": {"1": [1], "01": [2]}', r"layer key '01'"),
    ('"host_experts": {"\u0663": [1]}', r"layer key '\u0663' is not a layer number"),  # Arabic-Indic 3
    ('"host_experts": {"\u00b2": [1]}', r"layer key '\u00b2'"),  # superscript 2
    ('"host_experts": {"\uff11": [1]}', r"layer key"),  # fullwidth 1
    ('"host_experts": {"-1": [1]}', r"layer key '-1'"),
    ('"host_experts": {"+1": [1]}', r"layer key '\+1'"),
    ('"host_experts": {" 1": [1]}', r"layer key ' 1'"),
    ('"host_experts": {"100000": [1]}', r"write 0 to 99999"),
    ('"host_experts": {"' + "9" * 5000 + '": [1]}', r"5,000 characters"),
    ('"host_experts": {"1": [true]}', r"booleans, not expert ids"),
    ('"host_experts": {"1": [false]}', r"booleans"),
    ('"host_experts": {"1": [1.0]}', r"decimal point"),
    ('"host_experts": {"1": ["3"]}', r"strs, not integer expert ids"),
    ('"host_experts": {"1": [null]}', r"nulls"),
    ('"host_experts": {"1": [9223372036854775808]}', r"above 999,999"),
    ('"host_experts": {"1": [1, 1]}', r"layer 1 lists expert 1 twice"),
    ('"host_experts": [1]', r"must be an object"),
    ('"host_experts": {"1": 3}', r"expected a list"),
    ('"predicted": {"x": NaN}', r"NaN is not a number JSON allows"),
    ('"host_experts": {"1": [Infinity]}', r"Infinity is not a number JSON allows"),
])
def test_refused_at_read_naming_the_file(tmp_path, body, message):
    with pytest.raises(InputError, match=message) as e:
        _read(tmp_path, HEAD + body + "}")
    assert "p.json" in str(e.value)


@pytest.mark.parametrize("version", ["true", "1.0", '"1"', "2"])
def test_version_is_the_integer_1(tmp_path, version):
    with pytest.raises(InputError, match=r"field 'version': .*must be the integer 1"):
        _read(tmp_path, '{"format": "offload-lab-plan", "version": ' + version + "}")


def test_strict_fields_elsewhere(tmp_path):
    with pytest.raises(InputError, match=r"checkpoint.moe_layers.0"):
        _read(tmp_path, HEAD + '"checkpoint": {"moe_layers": [true]}}')
    with pytest.raises(InputError, match=r"field 'model'"):
        _read(tmp_path, HEAD + '"model": 5}')


def test_non_utf8_deep_and_oversized_files_are_input_errors(tmp_path):
    with pytest.raises(InputError, match=r"plan file .*p.json: not UTF-8 text \(byte 0xe9 at offset"):
        _read(tmp_path, (HEAD + '"model": "caf').encode() + b"\xe9" + b'"}')
    with pytest.raises(InputError, match=r"nested too deeply"):
        _read(tmp_path, HEAD + '"predicted": {"x": ' + "[" * 200_000 + "]" * 200_000 + "}}")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # a sparse file: its size is what is checked, before any byte is read
        f.truncate(planmod.PLAN_MAX_BYTES + 1)
    with pytest.raises(InputError, match=r"big.json: .* bytes is more than"):
        planmod.read_plan(big)


def test_a_million_repeats_are_one_line(tmp_path):
    with pytest.raises(InputError) as e:
        _read(tmp_path, HEAD + '"host_experts": {"0": [' + ",".join(["1"] * 1_000_000) + "]}}")
    text = str(e.value)
    assert "layer 0 lists expert 1 twice (1,000,000 times)" in text and len(text) < 500
    with pytest.raises(InputError) as e:
        _read(tmp_path, HEAD + '"host_experts": {"0": [' + ",".join(['"x"'] * 200_000) + "]}}")
    assert "200,000 entries are strs" in str(e.value) and len(str(e.value)) < 500


def test_check_counts_problems_of_one_kind(tmp_path, tiny_model, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "offload-lab-plan", "version": 1,
                               "host_experts": {str(k): [0] for k in range(10, 5000)} | {"0": list(range(32, 900))},
                               "host_tensors": [f"t{i}" for i in range(100_000)]}))
    code = cli.main(["plan", "check", str(bad), str(tiny_model)])
    _, err = capsys.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) <= 5, lines
    assert "4,990 layers (10, 11, 12 and 4,987 more) have no routed experts" in err
    assert "layer 0 has no expert 32, 33, 34 and 865 more" in err
    assert "t0, t1, t2 and 99,997 more (100,000 tensors) do not exist" in err


def test_plan_make_refuses_an_existing_out_without_force(tmp_path, tiny_model, capsys):
    out = tmp_path / "keep.json"
    out.write_text("precious")
    argv = ["plan", "make", str(tiny_model), "--generator", "uniform", "--fraction", "0.25", "--out", str(out)]
    assert cli.main(argv) == 2
    assert "exists; pass --force" in capsys.readouterr().err and out.read_text() == "precious"
    assert cli.main(argv + ["--force"]) == 0
    assert planmod.read_plan(out).generator.name == "uniform"


@pytest.mark.parametrize("flags", [["--fraction", "nan"], ["--fraction", "1.5"], ["--count", "-5"],
                                   ["--fraction", "0.2", "--tp", "0"], ["--fraction", "0.2", "--concurrency", "0"],
                                   ["--fraction", "0.2", "--retries", "-1"]])
def test_plan_make_flags_are_checked_naming_the_flag(tmp_path, tiny_model, capsys, flags):
    code = cli.main(["plan", "make", str(tiny_model), "--generator", "uniform", "--out", str(tmp_path / "n.json"),
                     *flags])
    err = capsys.readouterr().err
    assert code == 2 and flags[-2] in err and not (tmp_path / "n.json").exists()


def test_budget_fit_and_audit_refuse_nan_and_bad_categories(tmp_path, tiny_model, capsys):
    base = ["plan", "make", str(tiny_model), "--out", str(tmp_path / "n.json")]
    assert cli.main(base + ["--generator", "budget-fit", "--usable-gib", "nan"]) == 2
    assert "--usable-gib" in capsys.readouterr().err
    assert cli.main(base + ["--generator", "uniform", "--fraction", "0.2", "--host-category", "bogus"]) == 2
    assert "--host-category bogus: not a category" in capsys.readouterr().err
    assert cli.main(["audit", str(tiny_model), "--tp", "1", "--usable-gib", "nan"]) == 2
    assert "--usable-gib" in capsys.readouterr().err
    assert cli.main(["audit", "ftp://127.0.0.1/m.safetensors", "--tp", "1", "--usable-gib", "1"]) == 2
    assert "ftp:// is not a source" in capsys.readouterr().err


def test_out_in_a_missing_folder_is_refused(tmp_path, tiny_model, capsys):
    out = tmp_path / "no" / "such" / "p.json"
    code = cli.main(["plan", "make", str(tiny_model), "--generator", "uniform", "--fraction", "0.25", "--out", str(out)])
    assert code == 2 and "does not exist" in capsys.readouterr().err and not (tmp_path / "no").exists()


def test_unknown_dtype_and_a_forced_architecture_that_matches_nothing(tmp_path, tiny_model, capsys):
    import struct

    header = json.dumps({"w": {"dtype": "X9", "shape": [2], "data_offsets": [0, 4]}}).encode()
    f = tmp_path / "x.safetensors"
    f.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    assert cli.main(["audit", str(f), "--tp", "1", "--usable-gib", "1"]) == 2
    assert "dtype 'X9' is not a safetensors dtype" in capsys.readouterr().err
    assert cli.main(["audit", str(tiny_model), "--tp", "1", "--usable-gib", "1", "--architecture", "mixtral"]) == 2
    assert "--architecture mixtral: its rules match no routed expert" in capsys.readouterr().err
