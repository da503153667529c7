"""The published study as inputs, below the experiments that read it.

- :mod:`~offload_lab.published.transcription`: the published figures, transcribed once into a ``published`` run and
  read back (:func:`~offload_lab.published.transcription.read_published`).
- :mod:`~offload_lab.published.derive`: what every ``ref_*`` experiment does with a published run: derive figures
  from it, compare them with the published ones, write them.
- :mod:`~offload_lab.published.refclaims`: the claims those derived and published figures declare, from tables.
- :mod:`~offload_lab.published.study_inputs` and :mod:`~offload_lab.published.measured_inputs`: the inputs of the
  seat and cost analysis (experiments ``capacity`` and ``cost``), from a published run or from a campaign's own
  measured runs, each with where it came from.

Experiments import this package; they never import one another (an import-linter contract says so).
"""
