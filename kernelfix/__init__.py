"""kernelfix: agentic multi-turn kernel repair, judged on a real GPU."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # kernelfix.load_best without importing torch for every `kernelfix` command.
    if name == "load_best":
        from kernelfix.capture.swap import load_best

        return load_best
    if name == "load_tuned":
        from kernelfix.tune.load import load_tuned

        return load_tuned
    raise AttributeError(f"module 'kernelfix' has no attribute {name!r}")
