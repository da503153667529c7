"""The parameters cell of each experiment notebook, generated from the experiment's :class:`Params` model.

The values are the embedded campaign's (the reference campaign's for experiments only it runs), so that a notebook
run by hand with no ``-p`` measures what the campaign measures, and ``papermill --help-notebook`` shows the same types
and defaults. ``offload-lab notebooks sync`` rewrites the cells; a test keeps them in sync.
"""

from __future__ import annotations

import json
import pprint
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from offload_lab.core import inputs, paths
from offload_lab.experiments.notebook import HAND_CAMPAIGN, kind_of_notebook, notebook_of, params_model

CAMPAIGNS_FOR_DEFAULTS = ("configs/campaigns/embedded.yaml", "configs/campaigns/embedded-repeat.yaml",
                          "configs/campaigns/reference.yaml")
HEADER = ("# Parameters: generated from offload_lab.experiments.{kind}.params.Params with the values of {source}\n"
          "# (`offload-lab notebooks sync` rewrites this cell). papermill injects other values after it; a name the\n"
          "# experiment does not declare fails the run.")
SERVER_URL = "http://127.0.0.1:8000"


def type_text(annotation: Any) -> str:
    """A type annotation a notebook can evaluate without imports: models and mappings become ``dict``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:  # a bounded number (core.bounds): the type it bounds
        return type_text(args[0])
    if annotation is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        # papermill reads `name: Type[...] = value` only, so a union is written Optional[...] (imported in the cell).
        rest = list(dict.fromkeys(type_text(a) for a in args if a is not type(None)))
        inner = rest[0] if len(rest) == 1 else "object"
        return f"Optional[{inner}]" if type(None) in args else inner
    if origin is typing.Literal:
        kinds = list(dict.fromkeys(type(a).__name__ for a in args))
        return kinds[0] if len(kinds) == 1 else "object"
    if origin in (list, tuple, set):
        return f"list[{type_text(args[0])}]" if args else "list"
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, (dict, BaseModel))):
        return "dict"
    if isinstance(annotation, type) and annotation in (int, float, str, bool):
        return annotation.__name__
    return "object"


def campaign_values(root: Path, kind: str) -> tuple[dict[str, Any], str, bool]:
    """The parameters the first campaign in :data:`CAMPAIGNS_FOR_DEFAULTS` that runs ``kind`` gives it."""
    for rel in CAMPAIGNS_FOR_DEFAULTS:
        data = inputs.read_yaml(root / rel, "campaign file")
        for e in data.get("experiments") or []:
            if kind_of_notebook(e.get("notebook", "")) == kind:
                return dict(e.get("parameters") or {}), rel, bool(e.get("needs_server", True))
    return {}, "the model's defaults", True


def _literal(value: Any) -> str:
    # JSON first, so that every value is plain data a reader can copy into -p; double quotes, as JSON writes them.
    text = pprint.pformat(json.loads(json.dumps(value)), width=100_000, sort_dicts=False)
    return text.replace("'", '"') if "\\" not in text and '"' not in text else text


def parameters_cell(root: Path, kind: str) -> str:
    model = params_model(kind)
    given, source, needs_server = campaign_values(root, kind)
    lines = [HEADER.format(kind=kind, source=source), "from typing import Optional", ""]
    url = SERVER_URL if needs_server else None
    lines += [f"url: Optional[str] = {_literal(url)}", "run_dir: Optional[str] = None",
              f"campaign: str = {_literal(HAND_CAMPAIGN)}", f"data_root: str = {_literal(paths.DATA_DIR)}"]
    for name, field in model.model_fields.items():
        if name in given:
            value = given[name]
        elif not field.is_required():
            default = field.get_default(call_default_factory=True)
            value = default.model_dump(mode="json") if isinstance(default, BaseModel) else default
        else:
            value = None
        lines.append(f"{name}: {type_text(field.annotation)} = {_literal(value)}")
    return "\n".join(lines) + "\n"


def sync_notebook(root: Path, kind: str, write: bool = True) -> bool:
    """Rewrite the notebook's parameters cell; True when it changed (or would change, with ``write=False``)."""
    path = root / notebook_of(kind)
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if "parameters" in (c.get("metadata", {}).get("tags") or []))
    new = parameters_cell(root, kind)
    old = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    if old == new:
        return False
    if write:
        cell["source"] = new.splitlines(keepends=True)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


def experiment_notebooks(root: Path) -> list[str]:
    """Every experiment that has both a notebook and a parameters model."""
    from offload_lab.experiments import notebook as nbmod

    out = []
    for p in sorted((root / nbmod.NOTEBOOKS_DIR).glob("*.ipynb")):
        try:
            params_model(p.stem)
        except Exception:
            continue
        out.append(p.stem)
    return out


class SyncParams(BaseModel):
    """``offload-lab notebooks sync``."""

    model_config = ConfigDict(extra="forbid")

    check: bool = Field(False, description="change nothing; exit 2 when a cell is out of date")


def sync_all(p: SyncParams, root: Path | None = None) -> dict[str, Any]:
    """Rewrite (or with ``check`` only find) every parameters cell out of step with its model: the notebooks, the
    changed ones, and the line to print."""
    root = root or paths.find_root()
    kinds = experiment_notebooks(root)
    changed = [k for k in kinds if sync_notebook(root, k, write=not p.check)]
    if p.check:
        line = f"{len(kinds) - len(changed)} of {len(kinds)} notebooks have parameters cells in step with their models"
    else:
        line = f"rewrote the parameters cell of {len(changed)} of {len(kinds)} notebooks" + (
            f": {', '.join(changed)}" if changed else "")
    return {"notebooks": kinds, "out_of_date" if p.check else "rewritten": changed, "line": line}


def out_of_date(result: dict[str, Any]) -> Exception | None:
    """With --check, the one-line refusal (exit 2) when a cell is out of date."""
    from offload_lab.core.errors import InputError

    stale = result.get("out_of_date")
    return InputError(f"parameters cells out of date in {', '.join(f'notebooks/{k}.ipynb' for k in stale)}; run "
                      "`offload-lab notebooks sync` and commit the notebooks") if stale else None
