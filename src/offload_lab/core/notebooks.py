"""Notebooks the project writes or copies (a run's executed notebook, a hand run's, a paper bundle's copy) pass
through one redaction before they are stored: the cells, their outputs and the metadata papermill wrote hold whatever
a cell printed and a server echoed, the run's secrets included."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

# Output data that is not text: redacting base64 image bytes could only corrupt them.
_BINARY_MIME = ("image/png", "image/jpeg", "image/gif", "application/pdf")


def redacted(nb: Any) -> Any:
    """A copy of the notebook ``nb`` (nbformat's) with every string of its cells, outputs and metadata passed through
    :func:`offload_lab.core.redact.redact_record`: the run's secrets (URL credentials, keys, their Basic and Bearer
    forms) and header-shaped text, wherever a cell printed or a server echoed them. Image bytes are left alone."""
    import nbformat

    from offload_lab.core.redact import redact_record

    clean = copy.deepcopy(nb)
    clean.metadata = nbformat.from_dict(redact_record(dict(clean.metadata)))
    for cell in clean.cells:
        cell.source = redact_record(cell.source)
        cell.metadata = nbformat.from_dict(redact_record(dict(cell.metadata)))
        for out in cell.get("outputs", []):
            for key in list(out):
                if key == "data" and isinstance(out[key], dict):
                    for mime in list(out[key]):
                        if mime not in _BINARY_MIME:
                            out[key][mime] = redact_record(out[key][mime])
                elif key != "output_type":
                    out[key] = redact_record(out[key])
    return clean


def redact_notebook(path: Path) -> bool:
    """Rewrite the notebook at ``path`` (atomically) as :func:`redacted`; True when it changed."""
    import nbformat

    from offload_lab.core import runs

    nb = nbformat.read(str(path), as_version=4)
    clean = redacted(nb)
    if clean == nb:
        return False
    runs.atomic_write_bytes(path, (nbformat.writes(clean) + "\n").encode("utf-8"))
    return True
