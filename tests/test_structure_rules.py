"""No import loop in the package, counting the imports a function makes when it runs (issue 36).

import-linter's layer contracts keep the layers one-way, but they do not see two modules of one layer that import
each other, and a loop closed by an import inside a function is still a loop: whichever module is imported first
runs against the other half-built, and moving that import to the top breaks the package. Imports under
``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

import offload_lab

PACKAGE = Path(offload_lab.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for rest in child.orelse:
                    visit(rest)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def import_graph() -> nx.DiGraph:
    files = {(_module_name(p)): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                # A package's __init__ is not a module the code depends on for a loop: importing
                # offload_lab.x.y runs offload_lab.x first whatever is written.
                if target in files and target != name and files[target].name != "__init__.py":
                    graph.add_edge(name, target)
    return graph


def test_the_graph_sees_a_lazy_import() -> None:
    # The walker must count imports inside functions, or the test below would pass for the wrong reason.
    assert import_graph().has_edge("offload_lab.predict.compare", "offload_lab.paper.claims")


def test_no_import_loop() -> None:
    loops = sorted(sorted(c) for c in nx.simple_cycles(import_graph()))
    if loops:
        pytest.fail("import loops (a module of each imports the next, at load or inside a function):\n"
                    + "\n".join(" <-> ".join(c) for c in loops[:20]))


# A run's file names, each a constant in the one module that owns it (issue 36): a second spelling is how a rename
# leaves readers behind. Docstrings and comments may name them.
RUN_FILE_NAMES = {"manifest.json": "offload_lab.core.places", "events.jsonl": "offload_lab.core.runs"}


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_run_file_names_are_typed_once() -> None:
    typed_again = []
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        for lineno, text in _code_strings(ast.parse(path.read_text(encoding="utf-8"))):
            for name, owner in RUN_FILE_NAMES.items():
                if name in text and module != owner:
                    typed_again.append(f"{path.relative_to(PACKAGE.parent)}:{lineno}: {name!r} (use {owner}'s constant)")
    assert not typed_again, "\n".join(typed_again)
