"""``kernelfix tune``: rank a model's modules by time, optimize the top ones, keep the swaps that make it faster."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kernelfix.cli.common import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    add_limit_args,
    agent_config_for,
    check_device,
    judge_config_for,
    load_config_for,
    settings_error,
    verbosity_args,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune",
        usage="kernelfix tune SCRIPT (--model MODEL | --rank-only) [--top K] [--out DIR] [--device D] [--headless] [--backward] [--json] [-v|-q] [-- SCRIPT_ARGS ...]",
        help="a faster model: rank its modules by time, optimize the top ones, keep the kernels that make it faster",
        description=(
            "Run SCRIPT (it builds your model and calls it, as your own code does) and profile the model's forward "
            "(forward+backward with --backward, or when the script calls backward() on its result): each module's share of the time (CUDA kernel "
            "time on a GPU, CPU time on a CPU) and the Amdahl bound, the modules worth a kernel ranked. The top K are "
            "captured (`kernelfix capture --calls all`) and optimized, one session each (`kernelfix batch`'s sessions, in "
            "DIR/sessions). A module's best kernel is kept only if the model's own forward is faster with it beyond the "
            "timing's noise, eager and under torch.compile(fullgraph=True), with the output unchanged within the judge's "
            "tolerance. DIR/report.json holds the ranking, every step and the forward's times before and after; "
            "kernelfix.load_tuned(DIR, model) applies the kept swaps. Running the same command again continues an "
            "interrupted tune: finished steps and sessions are not redone."
        ),
        epilog=(
            "Exit codes: 0 a swap was kept (the model is faster), 1 none was (report.json says why for each), 2 bad input "
            "(no script, the script fails, DIR holds another tune, a bad model), 130 interrupted (run it again to continue). "
            "Settings: [tune] in kernelfix.toml (docs/tune.md). Example: kernelfix tune examples/models/tiny_transformer.py "
            "--model replay:examples/tune --top 2 --device cpu --headless"
        ),
    )
    p.add_argument("script", metavar="SCRIPT", help="your Python script that builds the model and calls it")
    p.add_argument(
        "--model",
        metavar="MODEL",
        help="litellm model string, replay:FILE.jsonl, or replay:DIR (DIR/<module path with _>.jsonl, else DIR/<ModuleClass>.jsonl)",
    )
    p.add_argument(
        "--top", type=int, metavar="K", help="modules to optimize, largest share first (default 3, [tune] top)"
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        default="kernelfix-tune",
        help="where report.json, tasks/ and sessions/ go (default ./kernelfix-tune)",
    )
    p.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        help="where the model is profiled, timed and judged: tune moves the model and its "
        "recorded call there (default: where the script builds it)",
    )
    p.add_argument(
        "--headless", action="store_true", help="no terminal UI: the sessions run as a batch, with a progress line"
    )
    p.add_argument(
        "--backward",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rank and time forward+backward steps, and judge each kernel's backward (default: when the script trains)",
    )
    p.add_argument(
        "--rank-only",
        action="store_true",
        help="profile and rank, then stop (no model needed): where the time goes, in report.json",
    )
    p.add_argument(
        "--json", action="store_true", help="print report.json on stdout when done (the rest goes to stderr)"
    )
    p.add_argument("--config", metavar="FILE", help="kernelfix.toml or pyproject.toml to read (default: nearest one)")
    p.add_argument(
        "--compile-backend", metavar="NAME", help="torch.compile backend of the compiled timing (default inductor)"
    )
    p.add_argument(
        "--workers", type=int, metavar="N", help="sessions at a time with --headless (default: as kernelfix batch)"
    )
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp)")
    add_limit_args(p)  # each per session
    verbosity_args(
        p,
        quiet="no progress lines: the summary alone",
        verbose="after the ranking's few, every module not worth a kernel with why",
    )
    p.set_defaults(func=run, script_args=[])  # SCRIPT's own arguments: main() takes what follows --


def run(args: argparse.Namespace) -> int:
    check_device(args.device)
    from rich.console import Console

    from kernelfix.tune.flow import Tune, TuneInputError, TuneOptions

    cfg = load_config_for(args)
    tune_cfg = cfg.tune
    updates = {k: v for k, v in (("top", args.top), ("compile_backend", args.compile_backend)) if v is not None}
    if updates:
        from pydantic import ValidationError

        try:
            tune_cfg = type(tune_cfg).model_validate({**tune_cfg.model_dump(), **updates})
        except ValidationError as e:
            raise settings_error(
                e, type(tune_cfg), {k: "--" + k.replace("_", "-") for k in updates}, "tune", args
            ) from None
    # --device, once: the judge settings' device is where the model moves and the sessions judge (None: where the
    # script builds the model; tune decides). [judge] device of the config file is not tune's: the model's place is.
    judge_cfg = judge_config_for(argparse.Namespace(**{**vars(args), "backward": None})).model_copy(
        update={"device": args.device}
    )
    agent_cfg = agent_config_for(cfg.agent, args)
    if args.rank_only:
        agent_cfg = agent_cfg.model_copy(update={"model": agent_cfg.model or "(none: --rank-only)"})
    elif not agent_cfg.model:
        raise UsageError(
            "no model: pass --model (a litellm model string, replay:FILE.jsonl or replay:DIR), or set [agent] model in kernelfix.toml"
        )
    if agent_cfg.api_key_env and not os.environ.get(agent_cfg.api_key_env):
        raise UsageError(f"the environment variable {agent_cfg.api_key_env} (from --api-key-env) is not set")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if not args.rank_only:
        _check_model(agent_cfg)
    text = Console(file=sys.stderr if args.json else sys.stdout, highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, quiet=args.verbosity < 0)
    out = Path(args.out)

    def say(line: str) -> None:
        if args.verbosity >= 0:
            text.print(line, markup=False)

    def run_sessions(jobs):
        if use_tui(args.headless):
            return _run_in_tui(jobs)
        from kernelfix.tune.jobs import run_headless

        return run_headless(jobs, out, workers=args.workers, console=err)

    opts = TuneOptions(
        script=Path(args.script),
        out=out,
        llm=agent_cfg.model,
        top=tune_cfg.top,
        cfg=tune_cfg,
        judge=judge_cfg,
        agent=agent_cfg,
        script_args=list(args.script_args),
        backward=args.backward,
        rank_only=args.rank_only,
    )
    tune = Tune(opts, say=say, run_sessions=run_sessions)
    try:
        report = tune.run()
    except TuneInputError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        err.print(
            f"kernelfix tune: interrupted; what is done is in {out / 'report.json'}: run the same command again to continue",
            style="yellow",
        )
        return EXIT_INTERRUPTED
    from kernelfix.tune.text import fit_lines, summary_text

    if args.json:
        sys.stdout.write((out / "report.json").read_text(encoding="utf-8"))
    if args.verbosity > 0:
        from kernelfix.tune.tune_report import label

        text.print("every module not worth a kernel, with why:")
        for m in (m for m in report.modules if not m.candidate and m.module != report.model_name):
            text.print(fit_lines(f"  {label(m)} ({100 * m.share:.1f}%): {m.reason}"), markup=False)
    if args.rank_only:
        text.print(f"report: {out / 'report.json'}", markup=False)
        return EXIT_OK if any(m.candidate for m in report.modules) else EXIT_FAIL
    text.print(fit_lines(summary_text(report, str(out), tune_cfg)), markup=False)
    return EXIT_OK if report.kept else EXIT_FAIL


def _check_model(agent_cfg) -> None:
    """A model string litellm cannot route, or a replay path that is not there, before the script runs."""
    from kernelfix.agent.models import REPLAY_PREFIX, ModelError, make_model

    spec = agent_cfg.model
    if spec.startswith(REPLAY_PREFIX):
        path = Path(spec[len(REPLAY_PREFIX) :])
        if not path.exists():
            raise UsageError(f"no replay file or directory {path}")
        if path.is_dir():
            return  # each module's file is looked up once the modules are known
    try:
        make_model(spec, agent_cfg)
    except (ValueError, ModelError) as e:
        raise UsageError(str(e)) from None


def use_tui(headless: bool) -> bool:
    from kernelfix.cli.optimize import use_tui as use

    return use(headless)


def _run_in_tui(jobs):
    """Each session in the terminal UI, one after the other, as `kernelfix optimize` shows one; a finished
    session is skipped and an unfinished one resumed, as the batch does (the same session directories)."""
    from kernelfix.agent.batch.worker import finished_result, open_or_create, prior_state
    from kernelfix.agent.models import make_model
    from kernelfix.agent.session import Session
    from kernelfix.cli.optimize import event_sink, run_session

    results = {}
    for job in jobs:
        done = finished_result(job)
        if done is not None:
            results[job.name] = done
            continue
        sink = event_sink(True)
        api_key = os.environ.get(job.agent.api_key_env) if job.agent.api_key_env else None
        store, _ = open_or_create(
            job, prior_state(job.session_dir)[0], lambda: make_model(job.model, job.agent, api_key=api_key), sink
        )
        session = Session(store, make_model(store.settings.model, store.settings.agent, api_key=api_key), on_event=sink)
        run_session(session, sink)
    return results
