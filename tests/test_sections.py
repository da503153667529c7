"""The paper's sections come from the experiment folders (issue 22): fragments found by discovery, assembled by topic,
their declared setups naming real parameters. No build here: tests/test_paper.py and test_journey_papers.py build."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from offload_lab.core.errors import InputError
from offload_lab.experiments.notebook import params_model
from offload_lab.paper import discovery, sections
from offload_lab.paper.qmd import paper_sources

ROOT = Path(__file__).resolve().parents[1]
SETUP = re.compile(r"\{\.setup\s+([^{}]*)\}")


def _fragment(path: Path, place: str, body: str = "Some prose.") -> Path:
    path.write_text(f"---\nsection:\n{place}\n---\n\n{body}\n")
    return path


def test_every_fragment_is_found_and_the_paper_engine_names_no_experiment() -> None:
    found = sections.fragments(ROOT)
    folders = {f.path.parent.name for f in found}
    assert {"audit", "context", "quality", "ref_model", "published"} <= folders
    assert all(f.path in paper_sources(ROOT) for f in found)
    engine = ROOT / "src" / "offload_lab" / "paper"
    # Names that cannot be an ordinary word or column name ("context", "published" are both).
    names = [n for n in discovery.experiment_names() if "_" in n]
    for module in ("sections.py", "discovery.py", "build.py", "explore.py", "explore_plots.py", "setup.py"):
        code = (engine / module).read_text()
        code = re.sub(r'""".*?"""', "", code, flags=re.S)  # docstrings may give examples
        assert not [n for n in names if re.search(rf"[\"']{n}[\"']", code)], module


def test_topics_are_ordered_and_each_alternative_is_wrapped_in_what_it_requires() -> None:
    text = sections.assemble(sections.fragments(ROOT))
    heads = re.findall(r"^## (.*?) \{#(sec-[\w-]+)\}", text, flags=re.M)
    labels = [label for _, label in heads]
    assert labels.index("sec-model") < labels.index("sec-boots") < labels.index("sec-context") < labels.index(
        "sec-quality") < labels.index("sec-limits")
    assert '::: {.requires experiments="ref_context"}' in text and '::: {.requires experiments="boots"}' in text
    assert text.count("::: {.choose}") >= len([t for t in sections.topics(sections.fragments(ROOT)) if t.choices])


def test_a_fragment_must_say_where_it_goes_and_topics_must_agree(tmp_path: Path) -> None:
    bare = tmp_path / "section.qmd"
    bare.write_text("Just prose.\n")
    with pytest.raises(InputError, match="opens with front matter"):
        sections.read_fragment(bare, "x")
    with pytest.raises(InputError, match=r"section\.order"):
        sections.read_fragment(_fragment(tmp_path / "a.qmd", "  topic: t"), "x")
    a = sections.read_fragment(_fragment(tmp_path / "a.qmd", "  topic: t\n  order: 5\n  heading: One {#sec-one}"), "x")
    b = sections.read_fragment(_fragment(tmp_path / "b.qmd", "  topic: t\n  order: 5\n  heading: Two {#sec-two}"), "y")
    with pytest.raises(InputError, match="2 headings"):
        sections.topics([a, b])
    c = sections.read_fragment(_fragment(tmp_path / "c.qmd", "  topic: t\n  order: 5"), "y")
    with pytest.raises(InputError, match="share a rank"):
        sections.topics([a, c])
    with pytest.raises(InputError, match="cannot include"):
        sections.read_fragment(_fragment(tmp_path / "d.qmd", "  topic: t\n  order: 1", "{{< include x.md >}}"), "x")
    assert a.experiments == ("x",)  # requires defaults to its folder


def test_every_declared_setup_names_a_parameter_of_its_experiment() -> None:
    """A .setup key is a path into the cited run's parameters: its first part must be a field of the Params model."""
    found = []
    for f in sections.fragments(ROOT):
        for m in SETUP.finditer(f.body):
            attrs = dict(re.findall(r'([\w.]+)="([^"]*)"', m.group(1)))
            experiment = attrs.pop("experiment")
            fields = params_model(experiment).model_fields
            for key in attrs:
                assert key.split(".")[0] in fields, (f.path, key)
            found.append((f.path.parent.name, experiment))
    assert ("quality", "quality") in found
