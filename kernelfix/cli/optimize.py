"""``kernelfix optimize`` and ``kernelfix resume``, and the helpers that run a session
(terminal UI or headless) for them and for ``kernelfix sessions``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from kernelfix.cli.common import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_MACHINE,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    add_judge_args,
    add_session_args,
    agent_config_for,
    check_device,
    judge_config_for,
    load_config_for,
    model_for,
    on_terminal,
    verbosity_args,
)

QUIET = "no line per judged turn and no notes: the session's summary alone (the terminal UI is unchanged)"
VERBOSE = "under each turn's line, its verdict's message whole and the judge's stage times (headless)"


def add_parser(sub) -> None:
    """`optimize` and `resume`."""
    p = sub.add_parser(
        "optimize",
        help="repair or optimize a kernel with a language model, turn by turn",
        description=(
            "Run the agent loop on TASK: a language model proposes a kernel, the judge checks it, the verdict "
            "goes back as the next prompt, until a correct, legal kernel reaches --target-speedup, --max-turns "
            "runs out, a budget is spent or you stop it. Every judged turn is a commit in the session directory; "
            "a killed session continues with `kernelfix resume`."
        ),
        epilog="Exit codes: 0 a correct, legal kernel was found, 1 not, 2 bad usage or input (task, model, key, session directory), 3 the machine kept failing to judge a candidate (the session is kept: resume it).",
    )
    p.add_argument("task", metavar="TASK", help="KernelBench-format task file")
    p.add_argument(
        "--candidate",
        metavar="FILE",
        help="a failing or slow kernel (.py, or a saved reply) to judge as turn 0 and repair",
    )
    p.add_argument(
        "--model",
        metavar="M",
        help="litellm model string (openai/gpt-4o, anthropic/..., openai/NAME with --api-base), or replay:FILE.jsonl",
    )
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp)")
    p.add_argument(
        "--session-dir",
        metavar="DIR",
        help="where the session lives (default sessions/TASK-DATE-TIME); must be new or empty",
    )
    p.add_argument(
        "--target-speedup", type=float, metavar="X", help="goal: this speedup over eager PyTorch (default 1.0)"
    )
    p.add_argument(
        "--no-shape-block", action="store_true", help="leave the inputs' shapes and strides out of the first prompt"
    )
    add_session_args(p)
    add_judge_args(p)
    verbosity_args(p, quiet=QUIET, verbose=VERBOSE)
    p.set_defaults(func=run)

    p = sub.add_parser(
        "resume",
        help="continue a session that was killed, interrupted or ran out of turns",
        description=(
            "Continue the session in SESSION_DIR from its last checkpoint, under the settings it started with; "
            "no judged turn is lost or judged twice. Raising --max-turns or a budget continues a session that "
            "stopped on that limit."
        ),
        epilog="Exit codes: 0 a correct, legal kernel was found, 1 not, 2 bad usage or input, 3 the machine kept failing to judge a candidate (resume again later).",
    )
    p.add_argument("session_dir", metavar="SESSION_DIR")
    add_session_args(p)
    verbosity_args(p, quiet=QUIET, verbose=VERBOSE)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return cmd_resume(args) if args.command == "resume" else cmd_optimize(args)


def use_tui(headless: bool, verbosity: int = 0) -> bool:
    """The terminal UI, unless --headless or not on a terminal (a pipe, CI, a batch child)."""
    if headless:
        return False
    if on_terminal():
        return True
    if verbosity >= 0:
        print("kernelfix: not a terminal; running headless", file=sys.stderr)
    return False


def event_sink(tui: bool, verbosity: int = 0):
    from kernelfix.agent.headless import HeadlessReporter

    if not tui:
        return HeadlessReporter(verbosity=verbosity)
    from kernelfix.tui.relay import EventRelay

    return EventRelay()


def left_mid_turn(app) -> None:
    """After the app closed: if the user left while a turn was in flight (q), give the session a moment to
    stop at its next check; if a judge stage still holds it, record the interruption here and exit without
    waiting (the judge's children die with this process; every judged turn is already on disk)."""
    thread = app.session_thread
    if thread is None or not thread.is_alive():
        return
    thread.join(timeout=5.0)
    if thread.is_alive():
        from kernelfix.agent.events import SessionAborted

        app.running_session.record_interruption(SessionAborted("left by the user mid-turn"))
        print(
            f"kernelfix: left mid-turn; continue the session with: kernelfix resume {app.running_session.store.path}",
            file=sys.stderr,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)


def _run_in_tui(session, relay):
    """Run the session under the app; re-raise what stopped it, so both front ends exit alike."""
    from kernelfix.tui.app import KernelfixApp

    app = KernelfixApp(session=session, relay=relay)
    app.run()
    left_mid_turn(app)
    if app.error is not None:
        raise app.error
    if app.outcome is None:  # the app closed before the session said how it ended
        traj = session.store.read_trajectory()
        return traj.outcome if traj is not None else None
    return app.outcome


def run_session(session, sink) -> int:
    """Run under the terminal UI when ``sink`` is its EventRelay, else headless."""
    from kernelfix.agent.headless import HeadlessReporter
    from kernelfix.agent.models import ModelError
    from kernelfix.agent.session_dir import SessionError
    from kernelfix.tools.retry import MachineFault
    from kernelfix.tools.task import TaskError

    tui = not isinstance(sink, HeadlessReporter)  # no textual import for a headless run
    try:
        outcome = _run_in_tui(session, sink) if tui else session.run()
    except ModelError as e:
        print(
            f"kernelfix: {e}\nkernelfix: the session is kept; continue it with: kernelfix resume {session.store.path}",
            file=sys.stderr,
        )
        if e.kind == "config":
            return EXIT_USAGE
        traj = session.store.read_trajectory()
        return EXIT_OK if traj is not None and traj.outcome.success else EXIT_FAIL
    except MachineFault as e:
        print(
            f"kernelfix: {e}\nkernelfix: no turn was spent on it; the session is kept; continue it with: kernelfix resume {session.store.path}",
            file=sys.stderr,
        )
        return EXIT_MACHINE
    except TaskError as e:
        raise UsageError(
            f"{e}\n(the session directory {session.store.path} keeps its records; the task itself must be fixed)"
        ) from None
    except SessionError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        print(f"kernelfix: continue the session with: kernelfix resume {session.store.path}", file=sys.stderr)
        raise
    except OSError as e:  # a full disk, a read-only or vanished session dir: the checkpoints hold every judged turn
        print(
            f"kernelfix: the session could not write its records: {e}\nkernelfix: judged turns are kept up to the last checkpoint; fix the cause, then: kernelfix resume {session.store.path}",
            file=sys.stderr,
        )
        return EXIT_FAIL
    if tui and outcome is not None:
        print(
            f"kernelfix: {session.store.path}: "
            + ("a correct, legal kernel was found" if outcome.success else "no correct, legal kernel")
            + (
                f"; best is turn {outcome.best_turn}: {session.store.path}/best.py"
                if outcome.best_turn is not None
                else ""
            ),
            file=sys.stderr,
        )
    return EXIT_OK if outcome is not None and outcome.success else EXIT_FAIL


def cmd_optimize(args: argparse.Namespace) -> int:
    from kernelfix.agent.session import Session
    from kernelfix.agent.session_dir import SessionError
    from kernelfix.tools.task import Task, TaskError

    cfg = load_config_for(args)
    judge_cfg = judge_config_for(args, profile_by_default=True)
    agent_cfg = agent_config_for(cfg.agent, args)
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
    model = model_for(agent_cfg)
    session_dir = args.session_dir or Path("sessions") / f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    sink = event_sink(use_tui(args.headless, args.verbosity), args.verbosity)
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
            on_event=sink,
        )
    except (TaskError, SessionError) as e:
        raise UsageError(str(e)) from None
    return run_session(session, sink)


def open_for_resume(session_dir, args: argparse.Namespace, on_event):
    """A stored session ready to run again under the limits in ``args``; locked until its run ends."""
    from kernelfix.agent.session import Session
    from kernelfix.agent.session_dir import SessionDir, SessionError

    try:
        store = SessionDir.open(session_dir)
        store.lock()
    except SessionError as e:
        raise UsageError(str(e)) from None
    try:
        check_device(store.settings.judge.device, f"the session in {session_dir} judges on cuda (its session.json)")
        agent_cfg = agent_config_for(store.settings.agent, args)
        store.change_agent_settings(agent_cfg)
        model = model_for(agent_cfg.model_copy(update={"model": store.settings.model}))
    except BaseException:
        store.unlock()
        raise
    return Session(store, model, on_event=on_event)


def cmd_resume(args: argparse.Namespace) -> int:
    sink = event_sink(use_tui(args.headless, args.verbosity), args.verbosity)
    return run_session(open_for_resume(args.session_dir, args, sink), sink)
