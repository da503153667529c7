"""Beyond one pod: a campaign as SkyPilot tasks (``plan``, ``skypilot``), launched, followed, relaunched for what a
lost pod had left and brought home through SkyPilot's Python API (``launch``, ``resume``; SkyPilot itself runs in an
environment of its own: ``sky_adapter.py``, ``sky_check.py``, ``sky_registry.py``, ``make sky-env``), and several
pods' data merged into one campaign (``merge``)."""
