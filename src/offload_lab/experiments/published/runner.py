"""Run the published experiment: copy the transcribed figures into a run (:mod:`offload_lab.published.transcription`
does it; the ``ref_*``, ``capacity`` and ``cost`` experiments read the run back through that module)."""

from __future__ import annotations

from offload_lab.published.transcription import EXPERIMENT, FIGURES, PROVENANCE, transcribe

__all__ = ["EXPERIMENT", "FIGURES", "PROVENANCE", "transcribe"]
