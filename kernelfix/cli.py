"""The ``kernelfix`` command.

Exit codes: 0 success (eval: verdict ok; optimize/resume: a correct, legal
kernel was found); 1 not; 2 bad usage or unreadable input (task, candidate,
config, session directory, model settings); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit code 2."""


def _common_judge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cuda", "cpu"], help="where to judge (default: cuda when available, else cpu)")
    p.add_argument("--config", metavar="FILE", help="kernelfix.toml or pyproject.toml to read (default: nearest one)")
    p.add_argument("--trials", type=int, metavar="N", help="correctness trials (default 5)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default 1e-2)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default 1e-2)")


def _load_config(args: argparse.Namespace):
    from kernelfix.config import ConfigError, load_config

    try:
        return load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def _judge_config(args: argparse.Namespace):
    from pydantic import ValidationError

    cfg = _load_config(args).judge
    updates = {k: getattr(args, k) for k in ("device", "trials", "atol", "rtol") if getattr(args, k, None) is not None}
    try:  # validated like the config file: --trials 0 is as wrong as trials = 0
        return type(cfg).model_validate({**cfg.model_dump(), **updates})
    except ValidationError as e:
        raise UsageError(str(e)) from None


def cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kernelfix.tools.judge import Judge, StageEvent
    from kernelfix.tools.render import verdict_view
    from kernelfix.tools.task import TaskError

    err = Console(stderr=True)
    cfg = _judge_config(args)
    cand_path = Path(args.candidate)
    try:
        source = cand_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read candidate {cand_path}: {e}") from None
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kernelfix-eval-"))
    try:
        judge = Judge(args.task, cfg, workdir=workdir)
    except TaskError as e:
        raise UsageError(str(e)) from None
    if judge.device_notice:
        err.print(f"[yellow]note:[/] {judge.device_notice}")
    with err.status("judging...") as status:

        def show(e: StageEvent) -> None:
            bits = [e.stage, e.status]
            if e.detail:
                bits.append(e.detail)
            if e.total:
                bits.append(f"{(e.done or 0) + 1}/{e.total}")
            status.update(" ".join(bits) + " ...")

        try:
            verdict = judge.evaluate(source, filename=cand_path.name, on_event=show)
        except TaskError as e:
            raise UsageError(str(e)) from None
    if args.json:
        sys.stdout.write(verdict.model_dump_json(indent=2) + "\n")
    else:
        Console().print(verdict_view(verdict))
    if not args.workdir:
        if verdict.ok:
            shutil.rmtree(workdir, ignore_errors=True)  # nothing to look at
        else:
            err.print(f"logs and build files kept in {workdir}")
    return EXIT_OK if verdict.ok else EXIT_FAIL


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
}


def _agent_config(base, args: argparse.Namespace):
    from pydantic import ValidationError

    from kernelfix.agent.config import AgentConfig

    updates = {field: getattr(args, flag) for flag, field in _AGENT_FLAGS.items() if getattr(args, flag, None) is not None}
    if getattr(args, "no_shape_block", False):
        updates["shape_block"] = False
    try:
        return AgentConfig.model_validate({**base.model_dump(), **updates})
    except ValidationError as e:
        raise UsageError(f"invalid agent setting: {e}") from None


def _model(cfg):
    from kernelfix.agent.models import ModelError, make_model

    if not cfg.model:
        raise UsageError("no model: pass --model (a litellm model string, or replay:FILE.jsonl), or set [agent] model in kernelfix.toml")
    api_key = None
    if cfg.api_key_env:
        api_key = os.environ.get(cfg.api_key_env)
        if not api_key:
            raise UsageError(f"the environment variable {cfg.api_key_env} (from --api-key-env) is not set")
    try:
        return make_model(cfg.model, cfg, api_key=api_key)
    except (ValueError, ModelError) as e:
        raise UsageError(str(e)) from None


def _run_session(session, headless: bool) -> int:
    from kernelfix.agent.models import ModelError
    from kernelfix.agent.session import SessionError
    from kernelfix.tools.task import TaskError

    if not headless:
        print("kernelfix: the terminal UI is not available yet; running headless", file=sys.stderr)
    try:
        outcome = session.run()
    except ModelError as e:
        print(f"kernelfix: {e}\nkernelfix: the session is kept; continue it with: kernelfix resume {session.store.path}", file=sys.stderr)
        if e.kind == "config":
            return EXIT_USAGE
        traj = session.store.read_trajectory()
        return EXIT_OK if traj is not None and traj.outcome.success else EXIT_FAIL
    except TaskError as e:
        raise UsageError(f"{e}\n(the session directory {session.store.path} keeps its records; the task itself must be fixed)") from None
    except SessionError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        print(f"kernelfix: continue the session with: kernelfix resume {session.store.path}", file=sys.stderr)
        raise
    return EXIT_OK if outcome.success else EXIT_FAIL


def cmd_optimize(args: argparse.Namespace) -> int:
    from kernelfix.agent.headless import HeadlessReporter
    from kernelfix.agent.runner import Session
    from kernelfix.agent.session import SessionError
    from kernelfix.tools.task import Task, TaskError

    cfg = _load_config(args)
    judge_cfg = _judge_config(args)
    agent_cfg = _agent_config(cfg.agent, args)
    try:
        task = Task.load(args.task)
    except TaskError as e:
        raise UsageError(str(e)) from None
    candidate = None
    if args.candidate:
        try:
            candidate = Path(args.candidate).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read candidate {args.candidate}: {e}") from None
    model = _model(agent_cfg)
    session_dir = args.session_dir or Path("sessions") / f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        session = Session.create(
            session_dir,
            task_path=task.path,
            model=model,
            agent=agent_cfg,
            judge_config=judge_cfg,
            candidate=candidate,
            candidate_name=Path(args.candidate).name if args.candidate else "candidate.py",
            candidate_path=str(Path(args.candidate).resolve()) if args.candidate else None,
            on_event=HeadlessReporter(),
        )
    except (TaskError, SessionError) as e:
        raise UsageError(str(e)) from None
    return _run_session(session, args.headless)


def cmd_resume(args: argparse.Namespace) -> int:
    from kernelfix.agent.headless import HeadlessReporter
    from kernelfix.agent.runner import Session
    from kernelfix.agent.session import SessionDir, SessionError

    try:
        store = SessionDir.open(args.session_dir)
        store.lock()
    except SessionError as e:
        raise UsageError(str(e)) from None
    try:
        agent_cfg = _agent_config(store.settings.agent, args)
        store.change_agent_settings(agent_cfg)
        model = _model(agent_cfg.model_copy(update={"model": store.settings.model}))
    except BaseException:
        store.unlock()
        raise
    return _run_session(Session(store, model, on_event=HeadlessReporter()), args.headless)


def _session_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--headless", action="store_true", help="no terminal UI: one line per judged turn, then a summary")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable that holds the API key")
    p.add_argument("--max-turns", type=int, metavar="N", help="model turns (default 8)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="stop once this many prompt + completion tokens are spent")
    p.add_argument("--max-cost", type=float, metavar="USD", help="stop once the model cost this much (where litellm knows prices)")
    p.add_argument("--max-wall", type=float, metavar="SECONDS", help="stop once turns took this long in all")


def build_parser() -> argparse.ArgumentParser:
    from kernelfix import __version__

    parser = argparse.ArgumentParser(
        prog="kernelfix",
        description=(
            "Repair and optimize CUDA/Triton kernels for KernelBench-format PyTorch tasks. "
            "A language model proposes kernels; a sandboxed judge compiles them, checks them against "
            "the PyTorch reference, rejects kernels that call torch to do the work, and times them "
            "against eager and torch.compile."
        ),
        epilog="Exit codes: 0 ok, 1 the candidate failed, 2 bad usage or unreadable input, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"kernelfix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "eval",
        help="judge one candidate kernel against a task",
        description=(
            "Judge CANDIDATE (a .py file defining ModelNew, or a saved model reply whose last ```python block "
            "defines it) against TASK (a KernelBench file with Model, get_inputs, get_init_inputs): compile, "
            "correctness over several seeded trials, forbidden torch ops, and on a GPU timing against eager "
            "PyTorch and torch.compile."
        ),
        epilog="Exit codes: 0 verdict ok, 1 any other verdict, 2 bad usage or unreadable input.",
    )
    p.add_argument("task", metavar="TASK", help="KernelBench-format task file")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate .py file, or a model reply (.md/.txt)")
    _common_judge_args(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--workdir", metavar="DIR", help="keep the evaluation's files (logs, builds) here")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "optimize",
        help="repair or optimize a kernel with a language model, turn by turn",
        description=(
            "Run the agent loop on TASK: a language model proposes a kernel, the judge checks it, the verdict "
            "goes back as the next prompt, until a correct, legal kernel reaches --target-speedup, --max-turns "
            "runs out, a budget is spent or you stop it. Every judged turn is a commit in the session directory; "
            "a killed session continues with `kernelfix resume`."
        ),
        epilog="Exit codes: 0 a correct, legal kernel was found, 1 not, 2 bad usage or input (task, model, key, session directory).",
    )
    p.add_argument("task", metavar="TASK", help="KernelBench-format task file")
    p.add_argument("--candidate", metavar="FILE", help="a failing or slow kernel (.py, or a saved reply) to judge as turn 0 and repair")
    p.add_argument("--model", metavar="M", help="litellm model string (openai/gpt-4o, anthropic/..., openai/NAME with --api-base), or replay:FILE.jsonl")
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp)")
    p.add_argument("--session-dir", metavar="DIR", help="where the session lives (default sessions/TASK-DATE-TIME); must be new or empty")
    p.add_argument("--target-speedup", type=float, metavar="X", help="goal: this speedup over eager PyTorch (default 1.0)")
    p.add_argument("--no-shape-block", action="store_true", help="leave the inputs' shapes and strides out of the first prompt")
    _session_args(p)
    _common_judge_args(p)
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser(
        "resume",
        help="continue a session that was killed, interrupted or ran out of turns",
        description=(
            "Continue the session in SESSION_DIR from its last checkpoint, under the settings it started with; "
            "no judged turn is lost or judged twice. Raising --max-turns or a budget continues a session that "
            "stopped on that limit."
        ),
        epilog="Exit codes: 0 a correct, legal kernel was found, 1 not, 2 bad usage or input.",
    )
    p.add_argument("session_dir", metavar="SESSION_DIR")
    _session_args(p)
    p.set_defaults(func=cmd_resume)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"kernelfix: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kernelfix: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
