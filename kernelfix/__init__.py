"""kernelfix: agentic multi-turn kernel repair, judged on a real GPU."""

from kernelfix.version import __version__

# Exported lazily: `kernelfix --help` and every command import this package, and none of them should pay for
# torch or pydantic's models until it uses them. kernelfix.Judge is the judge as a library (docs/service.md).
_LAZY = {
    "Judge": ("kernelfix.api", "Judge"),
    "TaskError": ("kernelfix.tools.task", "TaskError"),
    "Verdict": ("kernelfix.tools.verdict", "Verdict"),
    "Category": ("kernelfix.tools.verdict", "Category"),
    "JudgeConfig": ("kernelfix.tools.config", "JudgeConfig"),
    "load_best": ("kernelfix.capture.swap", "load_best"),
    "load_tuned": ("kernelfix.tune.load", "load_tuned"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'kernelfix' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
