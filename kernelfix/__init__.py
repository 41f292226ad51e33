"""kernelfix: agentic multi-turn kernel repair, judged on a real GPU.

The supported API is what this package names (``__all__``); every other module is the implementation,
free to move (docs/architecture.md draws it):

    kernelfix.Judge        the judge as a library: evaluate a candidate against a task (docs/service.md)
    kernelfix.Verdict      what it returns; kernelfix.Category, its result taxonomy
    kernelfix.JudgeConfig  the judge's settings (``[judge]`` in kernelfix.toml)
    kernelfix.Task         the task loader (``Task.load(path)``: a KernelBench-format file); kernelfix.TaskError
    kernelfix.load_best    a session's best kernel, called as the captured module was (docs/capture.md)
    kernelfix.load_tuned   a `kernelfix tune` directory's kept swaps, applied to a model (docs/tune.md)

Beside them: the command (``kernelfix``, kernelfix.cli), the server (kernelfix.serve) and the RL rewards
(kernelfix.rewards).
"""

from kernelfix.base.version import __version__

# Exported lazily: `kernelfix --help` and every command import this package, and none of them should pay for
# torch or pydantic's models until it uses them.
_LAZY = {
    "Judge": ("kernelfix.library.api", "Judge"),
    "Verdict": ("kernelfix.tools.verdict", "Verdict"),
    "Category": ("kernelfix.tools.verdict", "Category"),
    "JudgeConfig": ("kernelfix.tools.config", "JudgeConfig"),
    "Task": ("kernelfix.tools.task", "Task"),
    "TaskError": ("kernelfix.tools.task", "TaskError"),
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
