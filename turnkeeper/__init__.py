"""turnkeeper: a crash-proof control plane for long-running AI agents."""

__version__ = "0.1.0"
