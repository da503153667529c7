"""An emulated pod: a real OpenAI-compatible HTTP server whose timing follows a pod model file (configs/pods/).

:mod:`~offload_lab.emulate.podmodel` reads the model and turns its published figures into TTFT, TPOT, jitter, KV
capacity and boot outcomes; :mod:`~offload_lab.emulate.engine` keeps the emulated engine's state (running requests,
the block prefix cache, the counters of ``/metrics``); :mod:`~offload_lab.emulate.server` serves it with vLLM's
command line and endpoints. A rehearsal (``offload-lab campaign rehearse``) starts it from a stack file like any
server.
"""
