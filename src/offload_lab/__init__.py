"""offload-lab: rerunnable measurements of MoE serving with experts offloaded to host RAM."""

__version__ = "0.1.0"
