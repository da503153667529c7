"""Beyond one pod: a campaign as SkyPilot tasks (``plan``, ``skypilot``), several pods' data merged into one
campaign (``merge``). SkyPilot itself runs in an environment of its own (``sky_check.py``, ``make sky-env``)."""
