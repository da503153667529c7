"""Beyond one pod: a campaign as SkyPilot tasks (``plan``, ``skypilot``), launched, followed, relaunched for what a
lost pod had left and brought home through SkyPilot's Python API (``launch``, ``resume``; SkyPilot itself runs in an
environment of its own: ``sky_adapter.py``, ``sky_check.py``, ``sky_registry.py``, ``make sky-env``), re-attached to
when the launcher was stopped, several pods' data merged into one campaign (``merge``), the launches billed
(``bill``), each pod placed offline from a snapshot of SkyPilot's catalog (``catalog``), and a recovered pod's part
cut to what its data does not hold yet (``left``, run on the pod)."""
