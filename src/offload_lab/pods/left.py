"""Run on the pod, before its campaign: what the pod's part still has to run, from the data it already holds (a
managed job recovered on a new pod after a preemption starts from what the bucket kept; SkyPilot reruns the whole
task, so this is what skips the experiments that are done). ``python -m offload_lab.pods.left CAMPAIGN_FILE
DATA_ROOT`` with ``{"plan": ..., "part": ...}`` on stdin prints the ``--only`` list, or ``-`` when nothing is left;
for a repeat-boot part it also writes the boots left into CAMPAIGN_FILE (the pod's own copy)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from offload_lab.campaigns.runner import BOOTS, load_campaign
from offload_lab.pods.plan import PodPart, PodPlan
from offload_lab.pods.resume import remaining

NOTHING_LEFT = "-"


def main(argv: list[str]) -> int:
    campaign_file, data_root = Path(argv[0]), Path(argv[1])
    given = json.loads(sys.stdin.read())
    plan, part = PodPlan.model_validate(given["plan"]), PodPart.model_validate(given["part"])
    campaign = load_campaign(campaign_file)
    left = remaining(campaign, plan, part, [data_root])
    if left is None:
        print(NOTHING_LEFT)
        return 0
    if part.repeat_boots is not None and left.repeat_boots != part.repeat_boots:
        data = yaml.safe_load(campaign_file.read_text(encoding="utf-8"))
        data["repeat_boots"] = left.repeat_boots or 1
        campaign_file.write_text(yaml.safe_dump(data, sort_keys=False, width=1000), encoding="utf-8")
    names = left.only if left.only is not None else [
        *([BOOTS] if campaign.spec.boots else []), *(e.experiment for e in campaign.spec.experiments)]
    print(",".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
