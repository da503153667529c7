"""Plans: which routed experts, and which whole tensors, a server keeps in pinned host RAM instead of on the GPUs.

One import for the pieces, which live along their seams:

- :mod:`offload_lab.fit.plan_file`: the file format, reading (with its refusals) and writing, checking a plan against
  a checkpoint;
- :mod:`offload_lab.fit.generators`: the generators (uniform, layer-order, budget-fit, activation-aware) and the plan
  file a generator's choice makes;
- :mod:`offload_lab.fit.predict`: the predicted cost of a plan (expected host bytes per token, the TPOT lower bound)
  and the study's pod bound;
- :mod:`offload_lab.fit.hostplan`: the ``host-plan.json`` of the public dsv41 stack, read and written.
- :mod:`offload_lab.fit.plan_formats`: a writer and a reader per format a stack's offload part reads
  (``plans.format``), each reader parsing the file as that code would.

docs/plan-files.md is the user's page.
"""

from __future__ import annotations

from offload_lab.fit.generators import (GENERATORS, gen_activation_aware, gen_budget_fit, gen_layer_order,
                                        gen_uniform, generate, host_tensors_for, make_plan, probabilities,
                                        target_count)
from offload_lab.fit.plan_file import (FORMAT, MAX_EXPERT_ID, MAX_LAYER, PLAN_MAX_BYTES, VERSION, CheckpointRef,
                                       GeneratorRef, PlanFile, Problem, StatisticsRef, check_plan,
                                       host_expert_problems, parse_plan_json, plan_from_dict, plan_summary, read_plan,
                                       write_plan)
from offload_lab.fit.predict import PER_TOKEN_CATEGORIES, Bandwidth, predict

__all__ = [
    "FORMAT", "GENERATORS", "MAX_EXPERT_ID", "MAX_LAYER", "PER_TOKEN_CATEGORIES", "PLAN_MAX_BYTES", "VERSION",
    "Bandwidth", "CheckpointRef", "GeneratorRef", "PlanFile", "Problem", "StatisticsRef", "check_plan",
    "gen_activation_aware", "gen_budget_fit", "gen_layer_order", "gen_uniform", "generate", "host_expert_problems",
    "host_tensors_for", "make_plan", "parse_plan_json", "plan_from_dict", "plan_summary", "predict", "probabilities",
    "read_plan", "target_count", "write_plan",
]
