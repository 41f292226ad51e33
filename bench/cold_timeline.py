"""Where a cold ``kernelfix eval``'s wall time goes, as a timeline: each moment of one eval, in seconds
from the moment its process was launched.

    python3 -P bench/cold_timeline.py [--device cuda|cpu] [--repeat N] [--out OUT.json] [--case NAME=TASK:CANDIDATE ...]

Each eval is a new process that runs ``kernelfix eval TASK CANDIDATE --json`` as the command line does
(``kernelfix.cli.main``), with watches installed first: the CLI's command entered and the judge made
(what the CLI's own imports cost), each fork server's start and its ready (and its imports, by module),
each worker's messages as they arrived (its first word, its phases: the reference's CUDA, task, size,
Model, arena probe, FLOPs, each survey trial; the candidate's task, import, ModelNew), the reference's
start, room, lease and survey on the judge's side, each stage's start and end, the verdict, the judge's
close, and the process's exit. Nothing of the judge changes: the watches only read clocks.

Run it after ``bench/cold_eval.py`` (whose first run fills the build and baseline caches), or give it
``--warm`` to run each case once unmeasured first. Defaults: on a GPU the two cases of cold_eval.py
(88_MinGPTNewGelu with the Triton and the cached CUDA candidate), on a CPU the Triton ReLU of examples/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------- the eval's own process


def child(argv: list[str]) -> int:
    """One eval with watches; its timeline goes to $KF_TIMELINE_OUT."""
    t_launch = float(os.environ["KF_TIMELINE_T0"])  # the parent's time.time() just before it launched us
    mono0 = time.monotonic() - (time.time() - t_launch)  # the launch, on the monotonic clock (system-wide on Linux)
    events: list[tuple[float, str, str]] = []

    def at(mono: float) -> float:
        return round(mono - mono0, 4)

    def mark(who: str, what: str, mono: float | None = None) -> None:
        events.append((at(time.monotonic() if mono is None else mono), who, what))

    mark("cli", "python up, watches being installed")
    import threading

    from kernelfix.cli import eval as eval_cmd

    mark("cli", "kernelfix.cli imported")
    run0 = eval_cmd.run

    def run(args):
        mark("cli", "eval command entered")
        try:
            return run0(args)
        finally:
            mark("cli", "eval command done (verdict printed)")

    eval_cmd.run = run
    # Each watch is installed when its module's import completes (tools/import_hooks.py), so the eval imports
    # everything in its own order: the fork servers' early start, before the judge's modules, shows as it is.
    from kernelfix.tools.import_hooks import after_import

    zygotes: dict[int, tuple[str, object]] = {}
    handles: list[tuple[str, object]] = []
    first: set[str] = set()  # the GPU's room and lease: each kind of hold's first only (a stage takes one per trial)

    def once(what: str) -> bool:
        new = what not in first
        first.add(what)
        return new

    def wrap(cls, name: str, who: str, label: str) -> None:
        f = getattr(cls, name)

        def wrapped(self, *a, **k):
            mark(who, f"{label}: start")
            try:
                return f(self, *a, **k)
            finally:
                mark(who, f"{label}: end")

        setattr(cls, name, wrapped)

    def watch_api(api) -> None:
        mark("cli", "kernelfix.library.api imported (the judge's modules, pydantic's models)")
        init0, close0 = api.Judge.__init__, api.Judge.close

        def judge_init(self, *a, **k):
            mark("judge", "kernelfix.Judge made: start")
            init0(self, *a, **k)
            mark("judge", "kernelfix.Judge made: end")

        def judge_close(self):
            mark("judge", "close: start")
            close0(self)
            mark("judge", "close: end (reference worker gone)")

        api.Judge.__init__, api.Judge.close = judge_init, judge_close

    def watch_zygote(zygote) -> None:
        zinit0 = zygote.Zygote.__init__

        def zygote_init(self, python, env, import_path, cwd, spawn, preload=zygote.PRELOAD):
            kind = next((k for k, v in zygote.PRELOADS.items() if tuple(v) == tuple(preload)), "?")
            mark(f"fork server {kind}", "start (python -c, its imports)")
            zinit0(self, python, env, import_path, cwd, spawn, preload)
            zygotes[id(self)] = (kind, self)

        zygote.Zygote.__init__ = zygote_init

    def watch_handles(worker_handle) -> None:
        wh0 = worker_handle.WorkerHandle.__init__

        def handle_init(self, module, spec, **k):
            who = "reference worker" if module.endswith("reference.server") else f"{module.rsplit('.', 2)[-2]} worker"
            mark(who, f"asked for ({k.get('fork_kind', 'all')} fork server)")
            wh0(self, module, spec, **k)
            mark(who, "fork requested and answered (the fork server was ready)")
            handles.append((who, self))

        worker_handle.WorkerHandle.__init__ = handle_init

    def watch_reference(reference_mod) -> None:
        wrap(reference_mod.Reference, "_start", "reference (judge)", "start the worker, wait for ready")
        wrap(reference_mod.Reference, "survey", "reference (judge)", "survey (room, shared lease, nine trials)")

    def watch_gpu_share(gpu_share) -> None:
        room0, lease0 = gpu_share.GpuShare.room, gpu_share.GpuShare.lease

        def room(self, what, need=None):
            import contextlib

            @contextlib.contextmanager
            def cm():
                show = once(f"room {what}")
                if show:
                    mark("gpu", f"room for {what}: asked")
                with room0(self, what, need):
                    if show:
                        mark("gpu", f"room for {what}: given")
                    yield

            return cm()

        def lease(self, what, *, shared=False):
            import contextlib

            @contextlib.contextmanager
            def cm():
                show = once(f"lease {what}")
                if show:
                    mark("gpu", f"lease ({'shared' if shared else 'exclusive'}) for {what}: asked")
                with lease0(self, what, shared=shared):
                    if show:
                        mark("gpu", f"lease for {what}: held")
                    yield

            return cm()

        gpu_share.GpuShare.room, gpu_share.GpuShare.lease = room, lease

    def watch_engine(engine) -> None:
        wrap(engine.Judge, "start", "judge", "extract + static checks")
        wrap(engine.Judge, "finish", "judge", "finish (release the candidate's worker)")
        wrap(engine.Judge, "reference", "judge", "wait for the reference")
        timed0 = engine.Judge._timed

        def timed(self, ev, stage, on_event, fn, **k):
            mark("stage", f"{stage}: start")
            try:
                return timed0(self, ev, stage, on_event, fn, **k)
            finally:
                mark("stage", f"{stage}: end")

        engine.Judge._timed = timed

    after_import("kernelfix.library.api", watch_api)
    after_import("kernelfix.sandbox.zygote", watch_zygote)
    after_import("kernelfix.tools.handles.worker_handle", watch_handles)
    after_import("kernelfix.tools.handles.reference", watch_reference)
    after_import("kernelfix.tools.handles.gpu_share", watch_gpu_share)
    after_import("kernelfix.tools.judge", watch_engine)

    def watch_ready() -> None:
        seen: set[int] = set()
        while True:
            for key, (kind, z) in list(zygotes.items()):
                if key not in seen and z.ready.is_set():
                    seen.add(key)
                    info = getattr(z, "info", {}) or {}
                    mark(
                        f"fork server {kind}",
                        f"ready (its own count: {info.get('seconds')} s; imports {info.get('imports')})",
                    )
            time.sleep(0.005)

    threading.Thread(target=watch_ready, daemon=True).start()
    mark("cli", "watches installed")

    from kernelfix.cli import main

    out_path = os.environ["KF_TIMELINE_OUT"]
    rc = 1
    try:
        rc = main(argv)
    finally:
        mark("cli", "main returned")
        for who, h in handles:  # each worker's messages, stamped on arrival (the channel's clock is monotonic)
            try:
                reader = h.child.messages
            except AttributeError:
                continue
            for m in reader.snapshot():
                kind = m.get("type")
                if kind in (
                    "output",
                    "checked",
                    "prepared",
                    "released",
                    "timed",
                    "wall_start",
                    "wall_issued",
                    "wall_end",
                ):
                    continue
                if kind == "phase" and m.get("phase") in ("handoff", "compare", "forward", "timing", "time_candidate"):
                    continue  # per-request chatter: the stages' own marks say enough
                label = (
                    kind
                    if kind != "phase"
                    else f"phase {m.get('phase')}" + (f" {m.get('trial')}" if m.get("trial") is not None else "")
                )
                if kind == "ready" and who == "reference worker":
                    label = "ready (Model, float64 copy, arena probe, FLOPs, sets, dtypes done)"
                events.append((at(reader.t0 + float(m.get("_t", 0.0))), who, label))
        events.sort(key=lambda e: e[0])
        Path(out_path).write_text(json.dumps({"events": events, "rc": rc}))
    return rc


# ---------------------------------------------------------------------------- the reference's start, step by step


def probe(task: str, device: str) -> int:
    """The reference worker's start and survey in this process (no sandbox, no fork server): each of the
    reference fork server's preloads timed, its two checks (is a fork poisoned; can a forked child start
    the driver), then the worker's steps as ``ReferenceServer`` takes them (each message's moment)."""
    t0 = time.monotonic()
    rows: list[tuple[str, float]] = []
    t_start = t0

    def step(name: str, t: float) -> None:
        rows.append((name, round(time.monotonic() - t, 4)))

    rows.append(
        (
            f"bytecode: sys.dont_write_bytecode={sys.dont_write_bytecode}, PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE')!r}",
            0.0,
        )
    )
    from kernelfix.sandbox import fork_cuda, zygote

    for name in zygote.PRELOADS["reference"]:
        t = time.monotonic()
        __import__(name)
        step(f"import {name}", t)
    torch_dir = os.path.dirname(sys.modules["torch"].__file__)
    rows.append(
        (
            f"torch at {torch_dir}: writable {os.access(torch_dir, os.W_OK)}, its __init__'s bytecode beside it "
            f"{os.path.exists(__import__('importlib.util').util.cache_from_source(sys.modules['torch'].__file__))}",
            0.0,
        )
    )
    t = time.monotonic()
    fork_cuda.fork_poisoned()
    step("fork server check: a fork poisoned? (one fork)", t)
    t = time.monotonic()
    fork_cuda.driver_usable_after_fork()
    step("fork server check: can a forked child start the driver (a fork and a cuInit)", t)

    from kernelfix.tools import trials as trial_plan
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.transport.protocol import ReferenceSpec
    from kernelfix.tools.workers.reference import server as ref_server

    class Chan:
        def send(self, kind: str, **kw) -> None:
            label = (
                f"  message {kind}"
                + (f" {kw.get('phase')}" if kind == "phase" else "")
                + (f" {kw.get('trial')}" if kw.get("trial") is not None else "")
            )
            rows.append((label, round(time.monotonic() - t_start, 4)))

    class W:
        chan = Chan()

        def phase(self, name: str, **extra) -> None:
            self.chan.send("phase", phase=name, **extra)

    cfg = JudgeConfig()
    spec = ReferenceSpec(
        task_path=task,
        device=device,
        init_seed=1234,
        float64=cfg.float64_reference,
        inputs_on_device=cfg.inputs_on_device,
        cache_bytes=int(cfg.reference_cache_gb * 2**30),
        atol=cfg.atol,
        rtol=cfg.rtol,
        rel_error_tol=cfg.rel_error_tol,
        truth_factor=cfg.truth_factor,
    )
    server = ref_server.ReferenceServer(W(), spec)
    t_start = time.monotonic()
    server.start()
    step(
        "ReferenceServer.start (CUDA, the task, its count on the meta device, Model; from here each message's moment)",
        t_start,
    )
    t_start = time.monotonic()
    server.survey({"trials": [p.model_dump() for p in trial_plan.plan(1234, cfg)]}, [])
    step("survey of every trial (from here, each message's moment)", t_start)
    print(json.dumps({"total_s": round(time.monotonic() - t0, 3), "rows": rows}))
    return 0


# ---------------------------------------------------------------------------- the bench


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--probe-child":
        return probe(*sys.argv[2:4])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--warm", action="store_true", help="run each case once unmeasured first (fills the caches)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--case", action="append", default=[], metavar="NAME=TASK:CANDIDATE")
    ap.add_argument("--probe", action="store_true", help="also the reference's start step by step, in one process")
    args = ap.parse_args()
    device = args.device or ("cuda" if Path("/dev/nvidia0").exists() else "cpu")
    sys.path.insert(0, str(ROOT / "bench"))
    import cold_eval

    cases = {c.split("=", 1)[0]: tuple(Path(x) for x in c.split("=", 1)[1].split(":")) for c in args.case} or (
        cold_eval.GPU_CASES if device == "cuda" else cold_eval.CPU_CASES
    )
    results = []
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"kf_timeline_{os.getpid()}.json"
    for name, (task, cand) in cases.items():
        argv = ["eval", str(task), str(cand), "--device", device, "--json"]
        if args.warm:
            subprocess.run([sys.executable, "-P", "-m", "kernelfix", *argv], capture_output=True, cwd=ROOT)
        for i in range(args.repeat):
            env = {
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "KF_TIMELINE_OUT": str(tmp),
                "KF_TIMELINE_T0": repr(time.time()),
            }
            p = subprocess.run(
                [sys.executable, "-P", str(Path(__file__).resolve()), "--child", *argv],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
            )
            end = time.time() - float(env["KF_TIMELINE_T0"])
            try:
                tl = json.loads(tmp.read_text())
            except (OSError, ValueError):
                print(f"{name} #{i}: no timeline (rc {p.returncode}): {p.stderr[-800:]}")
                continue
            try:
                v = json.loads(p.stdout)
            except ValueError:
                v = {}
            events = [*tl["events"], (round(end, 4), "cli", "process exited (seen by the bench)")]
            print(f"--- {name} #{i}: {v.get('category')} in {end:.3f} s (stage seconds {v.get('stage_seconds')})")
            for t, who, what in events:
                print(f"  {t:8.3f}  {who:20s} {what}")
            results.append(
                {
                    "case": name,
                    "run": i,
                    "wall_s": round(end, 3),
                    "category": v.get("category"),
                    "events": events,
                    "breakdown": v.get("breakdown"),
                    "stage_seconds": v.get("stage_seconds"),
                }
            )
    tmp.unlink(missing_ok=True)
    if args.probe:
        task = str(next(iter(cases.values()))[0])
        for i in range(2):  # the second after the first wrote what bytecode it could
            p = subprocess.run(
                [sys.executable, "-P", str(Path(__file__).resolve()), "--probe-child", task, device],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            try:
                got = json.loads(p.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                print(f"probe #{i}: failed (rc {p.returncode}): {p.stderr[-800:]}")
                continue
            print(f"--- probe #{i}: the reference's start in one process: {got['total_s']} s")
            for name, secs in got["rows"]:
                print(f"  {secs:8.4f}  {name}")
            results.append({"probe": i, **got})
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
