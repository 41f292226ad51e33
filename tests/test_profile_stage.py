"""The profile stage on a machine without a GPU: skipped with a note, and the
ncu plumbing (command line, sandboxed run, CSV file, what a failed run means,
the torch.profiler fallback) driven through fake ``ncu`` executables, since a
real one needs a GPU. The real thing runs in tests/test_profile_gpu.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from conftest import CORPUS

from kernelfix.tools.profile import ncu
from kernelfix.tools.stages import profile as profile_stage
from kernelfix.tools.verdict import Category

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
RELU_OK = (CORPUS / "candidates" / "triton_relu_ok.py").read_text()


def fake_ncu(tmp_path: Path, body: str) -> str:
    path = tmp_path / "ncu"
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# Replays a real capture as ncu would: the profiling run (argv ends with "--launch-count N" then the
# target's) writes its report to --export PATH.ncu-rep and runs the target; an --import of that
# report prints the page asked for (details: the capture; source: the source page, if there is one).
# With --metrics, the profiling run refuses if told to.
REPLAY = """
report=""; metrics=0; imported=""; page=""
while [ $# -gt 0 ]; do
  case "$1" in
    --export) report=$2; shift 2;;
    --import) imported=$2; shift 2;;
    --page) page=$2; shift 2;;
    --metrics) metrics=1; shift 2;;
    --launch-count) shift 2; break;;
    *) shift;;
  esac
done
if [ -n "$imported" ]; then
  if [ "$page" = details ]; then cat "$imported"; elif [ -f "{fixture}.source" ]; then cat "{fixture}.source"; fi
  exit 0
fi
if [ "$metrics" = 1 ] && [ -n "$REFUSE_METRICS" ]; then echo "==ERROR== Failed to find metric $REFUSE_METRICS"; exit 1; fi
cp "{fixture}" "$report.ncu-rep"
"$@" >/dev/null 2>&1
exit 0
"""


@pytest.fixture(scope="module")
def judged(judges):
    """A CPU judge with profiling on, and an evaluation of a correct, legal candidate up to the profile stage."""
    judge = judges("relu", "cpu", {"profile": True, "profile_timeout_s": 60})
    ev = judge.start(RELU_OK)
    for stage in (judge.compile, judge.correctness, judge.legality, judge.benchmark):
        ev = stage(ev)
    assert not ev.failed, ev.message
    return judge, ev


def profile_with(judge, ev, monkeypatch, **config):
    monkeypatch.setattr(judge, "config", judge.config.model_copy(update=config))
    return profile_stage.profile(judge.stage_context(), ev.model_copy(deep=True), None)


def test_on_cpu_the_stage_is_skipped_with_a_note(judged):
    judge, ev = judged
    events = []
    done = judge.profile(ev.model_copy(deep=True), events.append)
    assert [(e.stage, e.status) for e in events] == [("profile", "skipped")] and "CUDA GPU" in events[0].detail
    v = judge.finish(done)
    assert v.category == Category.OK and v.profile is not None and v.profile.source == "none"
    assert "profiling needs a CUDA GPU" in v.profile.note
    assert not any("profile" in w for w in v.warnings) and "Profile" not in v.feedback


def test_profiling_off_skips_the_stage(judges):
    judge = judges("relu", "cpu")
    events = []
    v = judge.evaluate(RELU_OK, on_event=events.append)
    assert v.category == Category.OK and v.profile is None
    assert any(e.stage == "profile" and e.status == "skipped" and e.detail == "profiling off" for e in events)


def test_failed_candidates_are_not_profiled(judged):
    judge, ev = judged
    bad = ev.model_copy(deep=True).fail("correctness", Category.NUMERICAL, "wrong")
    events = []
    assert judge.profile(bad, events.append).profile is None and events[0].status == "skipped"


def test_a_real_capture_through_a_replaying_ncu_becomes_the_report(judged, tmp_path, monkeypatch):
    judge, ev = judged
    path = fake_ncu(tmp_path, REPLAY.format(fixture=FIXTURES / "ncu_relu_details.csv"))
    done = profile_with(judge, ev, monkeypatch, ncu_path=path)
    p = done.profile
    assert p is not None and p.source == "ncu" and p.bottleneck == "memory-bound", done.warnings
    assert p.kernels[0].name == "relu_kernel" and Path(p.log_path).read_text().startswith("==PROF==")
    assert done.warnings == ev.warnings
    log = (Path(ev.workdir) / "logs" / "profile_ncu.log").read_text()
    assert f"--nvtx-include {ncu.NVTX_RANGE}/" in log and "kernelfix.tools.workers.profile_target" in log
    # Only the sections the findings read, and where the stage's seconds went.
    assert (
        "--section InstructionStats" not in log
        and "--section SchedulerStats" not in log
        and "--section SourceCounters" in log
    )
    assert {"profile.ncu_run", "profile.pages", "profile.findings"} <= set(done.breakdown), done.breakdown


def test_a_refused_metric_is_retried_without_the_extra_metrics(judged, tmp_path, monkeypatch):
    judge, ev = judged
    path = fake_ncu(
        tmp_path, "export REFUSE_METRICS=smsp__x\n" + REPLAY.format(fixture=FIXTURES / "ncu_matmul_details.csv")
    )
    done = profile_with(judge, ev, monkeypatch, ncu_path=path)
    assert done.profile.source == "ncu" and done.profile.bottleneck == "compute-bound"


@pytest.mark.parametrize(
    "body,config,says",
    [
        (None, {"ncu_path": "/nonexistent/ncu"}, "ncu not found at /nonexistent/ncu"),
        (
            'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0."\nexit 1\n',
            {},
            "ERR_NVGPUCTRPERM",
        ),
        ("sleep 60\n", {"profile_timeout_s": 1.5}, "ncu did not finish within 1.5 s"),
        ('echo "==WARNING== No kernels were profiled."\nexit 0\n', {}, "ncu saw no kernel launched inside forward"),
    ],
    ids=["missing", "no-permission", "timeout", "no-kernels"],
)
def test_without_a_profile_the_turn_goes_on_and_says_why_once(judged, tmp_path, monkeypatch, body, config, says):
    judge, ev = judged
    if body is not None:
        config = {"ncu_path": fake_ncu(tmp_path, body), **config}
    done = profile_with(judge, ev, monkeypatch, **config)
    new = done.warnings[len(ev.warnings) :]
    assert len(new) == 1 and new[0].startswith("no Nsight Compute profile:") and says in new[0], new
    assert done.category is None  # the verdict does not change
    # the torch.profiler fallback ran; here, without CUDA, it cannot list kernels either, and says so
    assert done.profile is not None and done.profile.source == "none"
    assert says in done.profile.note and "torch.profiler fallback failed too" in done.profile.note
    assert "profiling needs a CUDA device" in done.profile.note
    v = judge.finish(done)
    assert v.category == Category.OK and sum(says in w for w in v.warnings) == 1 and says in v.feedback


def test_find_prefers_an_explicit_path_and_reports_a_missing_one(tmp_path):
    path = fake_ncu(tmp_path, "exit 0\n")
    assert ncu.find(path) == (path, None)
    found, problem = ncu.find(str(tmp_path / "nope"))
    assert found is None and problem.kind == "missing"


def test_the_profiled_runs_phases_go_into_the_breakdown(tmp_path):
    from kernelfix.sandbox import ChildOutcome
    from kernelfix.tools.evaluation import Evaluation

    ev = Evaluation(id="x", task="relu", device="cuda", workdir=str(tmp_path))
    started = 1000.0
    marks = {"loaded": 1001.5, "torch_imported": 1003.0, "warmup": 1006.0, "profiled_forward": 1006.5, "done": 1009.0}
    outcome = ChildOutcome(argv=["ncu"], returncode=0, wall_s=10.0, messages=[{"type": "result", "phase_times": marks}])
    profile_stage._phases(ev, started, outcome, tmp_path / "none.json", outcome.wall_s)
    b = ev.breakdown
    assert b["profile.ncu.loaded"] == 1.5 and b["profile.ncu.profiled_forward"] == 6.5 and b["profile.ncu.done"] == 9.0
    assert (
        b["profile.ncu_run"] == 10.0 and b["profile.ncu.after_target"] == 1.0
    )  # ncu's exit: rules, the report written
    bad = ChildOutcome(
        argv=["ncu"],
        returncode=0,
        wall_s=2.0,
        messages=[{"type": "result", "phase_times": {"x": 1001.0, "done": "later", "warmup": 9e9}}],
    )
    profile_stage._phases(
        ev, started, bad, tmp_path / "none.json", bad.wall_s
    )  # forged readings: no key of their own, no failure
    assert (
        ev.breakdown["profile.ncu_run"] == 12.0
        and "profile.ncu.x" not in ev.breakdown
        and ev.breakdown["profile.ncu.warmup"] == 6.0
    )


def test_a_run_started_ahead_waits_for_its_go_and_a_cancel_ends_it(judged, tmp_path, monkeypatch):
    """The profiled run the judge starts as an evaluation begins (tools/stages/profile_prestart.py): it waits, ready,
    for the stage's go; the stage hands it the go under the GPU's lock and reads its report; an evaluation that never
    reaches the stage cancels it, and it ends without running anything."""
    import contextlib
    import dataclasses

    from kernelfix.tools.stages import profile_prestart

    judge, ev = judged
    path = fake_ncu(tmp_path, REPLAY.format(fixture=FIXTURES / "ncu_relu_details.csv"))
    monkeypatch.setattr(judge, "config", judge.config.model_copy(update={"ncu_path": path}))
    # On this CPU there is no GPU to take room or a lock on, and the target stops at once (its spec says device cpu, which
    # it cannot profile): the report is the fake ncu's. The target's own wait for its go runs in every profile on the GPU.
    free = lambda *a, **k: contextlib.nullcontext()  # noqa: E731
    ctx = dataclasses.replace(judge.stage_context(), device="cuda", room=free, lease=free)
    spec, run = profile_prestart.spec, profile_prestart.one_shot.run
    monkeypatch.setattr(profile_prestart, "spec", lambda *a: spec(*a) | {"device": "cpu"})
    page = (
        profile_stage._page
    )  # the processes in a CPU's sandbox: a GPU's, asked for on a machine without one, is slow to refuse
    monkeypatch.setattr(
        profile_prestart.one_shot, "run", lambda c, *a, **k: run(dataclasses.replace(c, device="cpu"), *a, **k)
    )
    monkeypatch.setattr(profile_stage, "_page", lambda c, *a: page(dataclasses.replace(c, device="cpu"), *a))
    mine = ev.model_copy(deep=True)
    profile_prestart.start(ctx, mine)
    started = profile_prestart._started[mine.id]
    done = profile_stage.profile(ctx, mine, None)
    assert done.profile is not None and done.profile.source == "ncu" and done.profile.kernels[0].name == "relu_kernel"
    assert {"profile.started_ahead", "profile.ncu_run", "profile.pages"} <= set(done.breakdown), done.breakdown
    assert profile_prestart.take(mine) is None and started.future.done()
    # Never handed its go: a cancel ends it (here a stand-in for the process, which reads the go file as the target does).
    from kernelfix.sandbox import ChildOutcome
    from kernelfix.tools.sanitizer import handoff

    def stand_in(ctx, ev, stage, module, spec, timeout_s, **kw):
        go = handoff.wait(Path(spec["go_file"]), spec["wait_s"])
        return ChildOutcome(
            argv=[module],
            returncode=0,
            wall_s=0.0,
            messages=[{"type": "result", "cancelled": not (go or {}).get("go")}],
        )

    monkeypatch.setattr(profile_prestart.one_shot, "run", stand_in)
    other = ev.model_copy(deep=True, update={"id": "other", "workdir": str(tmp_path / "other")})
    Path(other.workdir).mkdir()
    profile_prestart.start(ctx, other)
    run = profile_prestart._started[other.id]
    assert not run.future.done()
    judge.release(other)  # what a failed stage and the verdict's finish do
    assert run.future.result(timeout=30).last("result")["cancelled"] and profile_prestart.take(other) is None
