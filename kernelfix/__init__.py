"""kernelfix: agentic multi-turn kernel repair, judged on a real GPU."""

__version__ = "0.1.0"
