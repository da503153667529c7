"""Experiment ``ref_hardware``: the study's pod predicted from hardware figures.

The hardware catalog (vendor datasheets), the model's sizes and the stack's flags give a decode step and a prefill by
physics (:mod:`offload_lab.predict`); three free factors are fitted on named published figures and every other
published speed and capacity figure of the study's pod is predicted beside its published value. Also E9 (two B300,
every weight in VRAM), labelled a prediction with no measurement behind it, and an upper bound for each of the
community page's home rigs, checked against their measured speeds. Needs no server.
"""
