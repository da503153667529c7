"""Scoring: GSM8K extraction, the IFEval checkers, HumanEval execution and its self-check, item statuses."""

from __future__ import annotations

import json

import pytest

from quality_fixtures import datasets_dir

from offload_lab.quality import data, gsm8k, humaneval, ifeval, scoring


# --- GSM8K --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,gold,correct,method", [
    ("3 + 4 = 7. The answer is 7.", "7", True, "explicit"),
    ("The answer is: **1,000**", "1000", True, "explicit"),
    ("The answer is $18.00.", "18", True, "explicit"),
    ("#### -3", "-3", True, "explicit"),
    ("so \\boxed{42}", "42", True, "explicit"),
    ("The answer is 18", "18", True, "explicit"),  # lm-eval's unescaped dot would take "1" here
    ("The answer is 8. Check: 18 is wrong", "18", False, "explicit"),  # text after the answer does not count
    ("first 3, then 7", "7", True, "fallback"),
    ("no digits at all", "7", False, None),
])
def test_gsm8k_extraction(text, gold, correct, method):
    s = gsm8k.score(text, gold)
    assert (s.correct, s.method) == (correct, method)
    assert s.format_ok == (method == "explicit")


def test_gsm8k_truncated_reply_gets_no_last_number_fallback():
    assert gsm8k.score("we have 3 and 7", "7", truncated=True).correct is False
    assert gsm8k.score("The answer is 7. and then", "7", truncated=True).correct is True


def test_gsm8k_gold_answers_parse(tmp_path):
    items = data.gsm8k_items(datasets_dir())
    assert len(items) == 1319
    assert all(gsm8k.to_decimal(it.fields["gold"]) is not None for it in items)
    assert sum("," in it.fields["answer"].rsplit("####", 1)[1] for it in items) == 14  # thousands commas stripped


# --- IFEval -------------------------------------------------------------------------------------------------------

CASES = [
    ("punctuation:no_comma", {}, "no commas here", "a, b"),
    ("keywords:existence", {"keywords": ["apple", "pie"]}, "Apple and PIE", "apple only"),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "cat cat", "cat"),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "cat", "cat cat"),
    ("keywords:forbidden_words", {"forbidden_words": ["bad"]}, "badge is fine", "this is bad"),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": "at least"}, "Zz", "z"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"}, "one two three", "one two"),
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "less than"}, "One.", "One. Two."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\nb", "a\n***\nb\n***\nc"),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First.\n\nThen, more.", "First.\n\nNow more."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[a] and [b]", "[a] only"),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\nP.S. bye", "Hi. PS bye"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n- b", "* a"),
    ("detectable_format:constrained_response", {}, "My answer is yes.", "Yes."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*a* and **b**", "*a*"),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nx\nSection 2\ny", "Section 1\nx"),
    ("detectable_format:json_format", {}, "```json\n{\"a\": 1}\n```", "{a: 1}"),
    ("detectable_format:title", {}, "<<A Title>>\ntext", "A Title"),
    ("combination:two_responses", {}, "one******two", "one******one"),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi."}, "say hi. Hi!", "Hi!"),
    ("startend:end_checker", {"end_phrase": "Any questions?"}, "Done. any questions?\"", "Any questions? ok"),
    ("startend:quotation", {}, "\"quoted\"", "not quoted"),
    ("change_case:english_capital", {}, "THIS IS AN ENGLISH SENTENCE ABOUT THE WEATHER TODAY.",
     "This is mixed case English."),
    ("change_case:english_lowercase", {}, "this is an english sentence about the weather today.",
     "This has a capital letter."),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "at least"},
     "USA and UK", "only USA"),
    ("language:response_language", {"language": "de"},
     "Das ist ein kurzer Satz auf Deutsch, der ganz sicher erkannt wird.", "This is clearly an English sentence."),
]


def test_every_registered_instruction_is_covered():
    assert {c[0] for c in CASES} == set(ifeval.CHECKERS)
    assert len(ifeval.CHECKERS) == 25


@pytest.mark.parametrize("iid,kwargs,good,bad", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_ifeval_checker_follows_and_misses(iid, kwargs, good, bad):
    assert ifeval.score(good, [iid], [kwargs]).prompt_strict is True
    assert ifeval.score(bad, [iid], [kwargs]).prompt_strict is False


def test_empty_response_follows_nothing_and_loose_forgives_markdown_and_framing():
    assert ifeval.score("", ["punctuation:no_comma"], [{}]).prompt_strict is False
    framed = "Sure, here it is:\nno commas in this line\nHope this helps, bye"
    s = ifeval.score(framed, ["punctuation:no_comma"], [{}])
    assert (s.prompt_strict, s.prompt_loose) == (False, True)
    s = ifeval.score("\"*quoted*\"", ["startend:quotation", "detectable_format:number_highlighted_sections"],
                     [{}, {"num_highlights": 1}])
    assert s.inst_total == 2 and s.inst_strict == 2


def test_language_detection_is_seeded_and_deterministic():
    ifeval.self_test()
    text = "Otec matka syn."
    assert len({ifeval._detect_language(text) for _ in range(20)}) == 1


def test_all_ifeval_prompts_score_offline_without_error():
    for it in data.ifeval_items(datasets_dir()):
        f = it.fields
        for response in ("", f["prompt"], f["prompt"].upper()):
            s = ifeval.score(response, f["instruction_id_list"], f["kwargs"])
            assert s.inst_total == len(f["instruction_id_list"])
            assert s.inst_strict <= s.inst_loose


# --- HumanEval ----------------------------------------------------------------------------------------------------

def test_codex_stops_apply_to_the_completion_only():
    problem = {"prompt": "def f(x):\n    \"\"\"doc\"\"\"\n", "test": "def check(c):\n    assert c(1) == 2\n",
               "entry_point": "f", "task_id": "t"}
    completion = "    return x + 1\n\ndef helper():\n    pass\n"
    assert humaneval.clean_completion(completion) == "    return x + 1\n"
    assert humaneval.clean_completion("    return x + 1\n```\nmore") == "    return x + 1\n"
    assert humaneval.execute(humaneval.program(problem, completion)).passed
    assert not humaneval.execute(humaneval.program(problem, "    return x\n")).passed


def test_execution_times_out_and_kills_the_program():
    r = humaneval.execute("import time\ntime.sleep(60)\n", timeout_s=1)
    assert r.outcome == "exec_timeout"
    r = humaneval.execute_with_rerun("while True:\n    pass\n", timeout_s=1)
    assert r.outcome == "exec_timeout" and r.timed_out_first


def test_self_check_canonical_all_pass_empty_none_pass():
    check = humaneval.self_check([it.fields for it in data.humaneval_items()])
    assert check.problems == 164
    assert check.canonical_passed == 164, check.canonical_failures
    assert check.empty_passed == 0, check.empty_passes
    assert check.ok


# --- item statuses ------------------------------------------------------------------------------------------------

def _rec(bench, item_id, status, content="", finish="stop", rep=0):
    return {"kind": "item", "side": "s", "benchmark": bench, "item_id": item_id, "replicate": rep, "status": status,
            "content": content, "finish_reason": finish, "usage": {"completion_tokens": 3}, "retries": 0}


def test_failures_are_counted_apart_from_wrong_answers():
    problems = scoring.problems_for(["gsm8k", "humaneval"], datasets_dir())
    he0 = problems["humaneval"]["HumanEval/0"].fields
    records = [
        _rec("gsm8k", "0", "ok", "The answer is 18."),          # right
        _rec("gsm8k", "1", "ok", "The answer is 4."),           # wrong
        _rec("gsm8k", "2", "ok", "I cannot say."),              # no number: parse_fail
        _rec("gsm8k", "3", "truncated", "so far 5 and 8", "length"),
        _rec("gsm8k", "4", "empty", ""),
        _rec("gsm8k", "5", "api_error"),
        _rec("humaneval", "HumanEval/0", "ok", he0["canonical_solution"]),
        _rec("humaneval", "HumanEval/1", "ok", "    while True:\n        pass\n"),
    ]
    scores, _ = scoring.score_records(records, problems, exec_timeout_s=1)
    by = {(r.benchmark, r.item_id): r for r in scores.itertuples()}
    assert by[("gsm8k", "0")].correct is True and by[("gsm8k", "0")].status == "ok"
    assert by[("gsm8k", "1")].correct is False and by[("gsm8k", "1")].status == "ok"
    assert by[("gsm8k", "2")].status == "parse_fail" and by[("gsm8k", "2")].correct is False
    assert by[("gsm8k", "3")].status == "truncated" and by[("gsm8k", "3")].correct is False
    assert by[("gsm8k", "4")].status == "empty"
    assert by[("gsm8k", "5")].status == "api_error" and by[("gsm8k", "5")].correct is None
    assert by[("humaneval", "HumanEval/0")].correct is True
    assert by[("humaneval", "HumanEval/1")].status == "exec_timeout"
    summary = scoring.summarize(scores).set_index("benchmark")
    g = summary.loc["gsm8k"]
    assert (g["items"], g["answered"], g["correct"]) == (6, 5, 1)
    assert (g["n_parse_fail"], g["n_truncated"], g["n_empty"], g["n_api_error"]) == (1, 1, 1, 1)
    assert g["accuracy"] == pytest.approx(1 / 5)
    json.dumps(scores.to_dict(orient="records"), default=str)
