"""Exit codes, the usage error, argument helpers and config loading shared by the commands.

Light at import: argparse and the standard library only; the config, pydantic and
the agent's settings are imported where a command reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_MACHINE = 3  # the machine kept failing to judge (infra:*): the session is kept, a resume continues it


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit code 2."""


def add_judge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cuda", "cpu"], help="where to judge (default: cuda when available, else cpu)")
    p.add_argument("--config", metavar="FILE", help="kernelfix.toml or pyproject.toml to read (default: nearest one)")
    p.add_argument("--trials", type=int, metavar="N", help="correctness trials (default 5)")
    p.add_argument(
        "--atol", type=float, help="absolute tolerance (default: by output dtype, float32 1e-4, float16/bfloat16 1e-2)"
    )
    p.add_argument("--rtol", type=float, help="relative tolerance (default: by output dtype, as --atol)")
    p.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="profile a correct, legal kernel with Nsight Compute (GPU only; default: on for optimize, off for eval and batch, unless the config sets judge.profile)",
    )
    p.add_argument(
        "--backward",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="judge the backward pass too: gradients of the floating inputs and parameters checked against the reference's, "
        "torch ops in backward refused, forward+backward timed and ranked (docs/backward.md; default: as the task's BACKWARD says, "
        "or judge.backward in the config)",
    )
    p.add_argument(
        "--sanitize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run compute-sanitizer (memcheck, racecheck, synccheck, initcheck, on a reduced input) on every CUDA/Triton "
        "candidate, correct ones too; by default it runs only on a wrong or crashing one (GPU only; docs/sanitizer.md). "
        "--no-sanitize turns it off, failures included",
    )
    p.add_argument(
        "--no-retry",
        action="store_true",
        help="report a machine fault (an infra:* verdict: GPU memory others hold, a worker that died) at once, rather than "
        "judging the candidate again after a pause (judge.infra_retries, default 3)",
    )


def load_config_for(args: argparse.Namespace):
    from kernelfix.cli.config_file import ConfigError, load_config

    try:
        return load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def judge_config_for(args: argparse.Namespace, *, profile_by_default: bool = False):
    """The judge's settings: config file, then flags. ``profile_by_default``: interactive
    sessions profile correct kernels unless the config or --no-profile says otherwise
    (--stop-at-sol reads the profile, so it asks for one too)."""
    from pydantic import ValidationError

    cfg = load_config_for(args).judge
    updates = {
        k: getattr(args, k)
        for k in ("device", "trials", "atol", "rtol", "profile", "backward")
        if getattr(args, k, None) is not None
    }
    sol = getattr(args, "stop_at_sol", None) is not None or load_config_for(args).agent.stop_at_sol is not None
    if sol and updates.get("profile") is False:
        raise UsageError(
            "--stop-at-sol reads the Nsight Compute profile of correct kernels: it cannot work with --no-profile"
        )
    if getattr(args, "no_retry", False):
        updates["infra_retries"] = 0
    if getattr(args, "sanitize", None) is not None:  # --no-sanitize: not even on a failure
        updates["sanitize"] = args.sanitize
        if not args.sanitize:
            updates["sanitize_failures"] = False
    if (profile_by_default or sol) and "profile" not in updates and "profile" not in cfg.model_fields_set:
        updates["profile"] = True
    try:  # validated like the config file: --trials 0 is as wrong as trials = 0
        judge = type(cfg).model_validate({**cfg.model_dump(), **updates})
    except ValidationError as e:
        raise settings_error(e, type(cfg), {k: "--" + k for k in updates}, "judge", args) from None
    if judge.device == "cuda":
        check_device(
            "cuda",
            "--device cuda" if getattr(args, "device", None) else 'device = "cuda" in [judge] of the config file',
        )
    return judge


def settings_error(e, model, flags: dict[str, str], section: str, args: argparse.Namespace) -> UsageError:
    """A pydantic error on settings the flags (``flags``: field -> flag) laid over the config file's ``section``, as a
    usage error in the user's words: the flag or key, the value, what is allowed (kernelfix.base.settings_errors)."""
    from kernelfix.base.settings_errors import flag_name, problems

    lines = problems(
        e, model, flag_name(flags, section, getattr(args, "config", None) or "the config file"), assign=" "
    )
    return UsageError(lines[0] if len(lines) == 1 else "invalid settings:" + "".join(f"\n  {x}" for x in lines))


def check_device(device: str | None, given: str = "--device cuda") -> None:
    """Refuse a CUDA device torch here cannot use, before anything runs: one sentence saying what torch sees
    and what to do (exit 2). ``given``: how the user asked for it. Every command that takes --device calls it."""
    if device is None or not device.startswith("cuda"):
        return
    from kernelfix.tools.gpu.lease import cuda_problem

    problem = cuda_problem()
    if problem is not None:
        raise UsageError(f"{given}: {problem}; use --device cpu, or run where torch.cuda.is_available() is True")


# CLI flag -> AgentConfig field
_AGENT_FLAGS = {
    "model": "model",
    "api_base": "api_base",
    "api_key_env": "api_key_env",
    "max_turns": "max_turns",
    "target_speedup": "target_speedup",
    "max_tokens": "max_tokens",
    "max_cost": "max_cost_usd",
    "max_wall": "max_wall_s",
    "width": "width",
    "keep": "keep",
    "sampling": "sampling",
    "stop_at_sol": "stop_at_sol",
}


def agent_config_for(base, args: argparse.Namespace):
    from pydantic import ValidationError

    from kernelfix.agent.agent_config import AgentConfig

    updates = {
        field: getattr(args, flag) for flag, field in _AGENT_FLAGS.items() if getattr(args, flag, None) is not None
    }
    if getattr(args, "no_shape_block", False):
        updates["shape_block"] = False
    try:
        return AgentConfig.model_validate({**base.model_dump(), **updates})
    except ValidationError as e:
        flags = {field: "--" + flag.replace("_", "-") for flag, field in _AGENT_FLAGS.items() if field in updates}
        flags.update({"shape_block": "--no-shape-block"} if "shape_block" in updates else {})
        raise settings_error(e, AgentConfig, flags, "agent", args) from None


def model_for(cfg):
    from kernelfix.agent.models import ModelError, make_model

    if not cfg.model:
        raise UsageError(
            "no model: pass --model (a litellm model string, or replay:FILE.jsonl), or set [agent] model in kernelfix.toml"
        )
    api_key = None
    if cfg.api_key_env:
        api_key = os.environ.get(cfg.api_key_env)
        if not api_key:
            raise UsageError(f"the environment variable {cfg.api_key_env} (from --api-key-env) is not set")
    try:
        return make_model(cfg.model, cfg, api_key=api_key)
    except (ValueError, ModelError) as e:
        raise UsageError(str(e)) from None


def verbosity_args(p: argparse.ArgumentParser, *, quiet: str, verbose: str) -> None:
    """-v/-q, which every command takes (``args.verbosity``: -1, 0 or 1); ``quiet`` and ``verbose`` say what
    they change for this command. -v also shows kernelfix's log messages (INFO) on stderr, -q only errors."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-v", "--verbose", dest="verbosity", action="store_const", const=1, default=0, help=f"more detail: {verbose}"
    )
    g.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, help=f"less: {quiet}")


@contextlib.contextmanager
def logging_for(verbosity: int):
    """kernelfix's loggers on stderr while a command runs: INFO with -v, WARNING by default, ERROR with -q;
    as they were afterwards (``main`` may run in a process that goes on: a test, a notebook)."""
    import logging

    logger = logging.getLogger("kernelfix")
    level, propagate = logger.level, logger.propagate
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("kernelfix: %(levelname)s: %(message)s"))
    logger.setLevel({1: logging.INFO, -1: logging.ERROR}.get(verbosity, logging.WARNING))
    logger.addHandler(handler)
    logger.propagate = False  # said once, here, not again by a root handler
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def add_limit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable that holds the API key")
    p.add_argument("--max-turns", type=int, metavar="N", help="model turns, or rounds with --width above 1 (default 8)")
    p.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="stop once this many prompt + completion tokens are spent (over every branch)",
    )
    p.add_argument(
        "--max-cost", type=float, metavar="USD", help="stop once the model cost this much (where litellm knows prices)"
    )
    p.add_argument("--max-wall", type=float, metavar="SECONDS", help="stop once turns took this long in all")


def add_session_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--headless", action="store_true", help="no terminal UI: one line per judged turn, then a summary")
    add_limit_args(p)
    add_search_args(p)


def add_search_args(p: argparse.ArgumentParser) -> None:
    """Width of the search (docs/search.md); each flag overrides [agent] in kernelfix.toml."""
    p.add_argument(
        "--width",
        type=int,
        metavar="N",
        help="candidates per round, drawn and judged in parallel (default 1: one chain)",
    )
    p.add_argument(
        "--keep",
        type=int,
        metavar="K",
        help="branches each later round continues: the round's best K (default: the width)",
    )
    p.add_argument(
        "--sampling",
        choices=["parallel", "n"],
        help="a round's replies to one prompt: parallel calls (default) or one call with n=",
    )
    p.add_argument(
        "--stop-at-sol",
        type=float,
        metavar="F",
        help="stop once a correct kernel's DRAM or SM throughput reaches F (0-1) of peak (needs the profile)",
    )
