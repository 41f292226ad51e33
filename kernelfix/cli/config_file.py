"""kernelfix's configuration file: ``kernelfix.toml``, or ``[tool.kernelfix]`` in pyproject.toml.

    [judge]
    trials = 5
    atol = 1e-3                  # default: by the output's dtype (float32 1e-4, float16/bfloat16 1e-2)

    [judge.tasks."19_ReLU"]        # per-task overrides, by task file stem
    extra_allowed_ops = ["mm"]

    [agent]
    max_turns = 8
    target_speedup = 1.0

Unknown keys are errors, so a typo never silently changes nothing.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.base.settings_errors import problems, toml_name
from kernelfix.tools.config import JudgeConfig
from kernelfix.tune.tune_config import TuneConfig


class ConfigError(Exception):
    pass


class KernelfixConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    tune: TuneConfig = Field(default_factory=TuneConfig)  # kernelfix tune (docs/tune.md)


def find_config(start: Path | None = None) -> tuple[Path, dict] | None:
    """The nearest kernelfix.toml, or pyproject.toml with [tool.kernelfix], from ``start`` upwards."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        k = d / "kernelfix.toml"
        if k.is_file():
            return k, _read(k)
        p = d / "pyproject.toml"
        if p.is_file():
            data = _read(p).get("tool", {}).get("kernelfix")
            if data is not None:
                return p, data
    return None


def _read(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read config {path}: {e}") from None


def load_config(path: str | Path | None = None) -> KernelfixConfig:
    if path is not None:
        p = Path(path)
        data = _read(p)
        if p.name == "pyproject.toml":
            data = data.get("tool", {}).get("kernelfix", {})
        source = p
    else:
        found = find_config()
        if found is None:
            return KernelfixConfig()
        source, data = found
    try:
        return KernelfixConfig.model_validate(data)
    except ValidationError as e:
        prefix = ("tool", "kernelfix") if source.name == "pyproject.toml" else ()
        lines = problems(e, KernelfixConfig, lambda loc: toml_name((*prefix, *loc)))
        raise ConfigError(
            f"invalid config in {source}: " + (lines[0] if len(lines) == 1 else "".join(f"\n  {x}" for x in lines))
        ) from None
