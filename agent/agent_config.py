"""Agent settings: the model, its retries, and when a session stops.

Read from the ``[agent]`` section of kernelfix.toml; the CLI's flags override
them. A session stores the settings it started with, so a resume continues
under the same rules.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="litellm model string, or replay:PATH; the CLI's --model overrides")
    api_base: str | None = Field(
        None, description="base URL of an OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp)"
    )
    api_key_env: str | None = Field(None, description="name of the environment variable holding the API key")
    temperature: float | None = Field(None, ge=0)
    max_output_tokens: int | None = Field(None, ge=1, description="cap on one reply's tokens")
    request_timeout_s: float = Field(600.0, gt=0)
    stream: bool = Field(True, description="stream replies (a UI shows tokens as they come)")

    retry_attempts: int = Field(
        5, ge=1, description="tries per model call on rate limits, timeouts, connection errors and 5xx"
    )
    retry_min_wait_s: float = Field(2.0, ge=0)
    retry_max_wait_s: float = Field(60.0, ge=0)

    max_turns: int = Field(8, ge=1, description="model rounds per session (with width 1, a round is one model turn)")
    target_speedup: float = Field(1.0, ge=0, description="the goal: correct, legal and this fast over eager PyTorch")
    untimed_goal: bool = Field(
        True, description="where nothing can be timed (no GPU), a correct legal kernel meets the goal"
    )
    max_tokens: int | None = Field(None, ge=1, description="session budget: prompt + completion tokens")
    max_cost_usd: float | None = Field(None, gt=0, description="session budget: model cost, where litellm knows it")
    max_wall_s: float | None = Field(None, gt=0, description="session budget: seconds spent in turns")

    shape_block: bool = Field(
        True, description="add the inputs' and outputs' shapes, strides and contiguity to the first prompt"
    )

    # Search wider than one chain (docs/search.md): width 1 is the single chain.
    width: int = Field(
        1,
        ge=1,
        le=64,
        description="candidates per round: round one draws this many replies, later rounds this many over the kept branches",
    )
    keep: int | None = Field(
        None,
        ge=1,
        description="branches each later round continues from (the best of the last round); default: the width",
    )
    sampling: Literal["parallel", "n"] = Field(
        "parallel",
        description="how a round's replies to one prompt are drawn: parallel calls, or one call with n= (providers that support it)",
    )
    stop_at_sol: float | None = Field(
        None,
        gt=0,
        le=1,
        description="stop once a correct kernel's DRAM or SM throughput reaches this fraction of peak (Nsight Compute profile)",
    )

    @property
    def kept(self) -> int:
        """Branches a later round continues from: ``keep``, never more than the width."""
        return min(self.keep or self.width, self.width)
