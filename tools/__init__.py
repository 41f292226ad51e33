"""The judge and its stages: compile, correctness, legality, timing (kernelfix.tools)."""
