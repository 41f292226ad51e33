"""The sanitizer stage on the CPU: compute-sanitizer's reports captured on the H100
(tests/fixtures/sanitizer/, by ``bash bench/device_run.sh sanitizer-capture``) parsed, placed on the
defect kernels' own lines with their fixes; the reduced input's rule; the feedback that gives the
hazard first and keeps the category; and the stage's one line on a machine without a GPU."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest
import sanitizer_support as sc

from kernelfix.cli.verdict_view import sanitizer_summary
from kernelfix.tools.feedback import verdict_text as feedback
from kernelfix.tools.sanitizer import hazards, parse, reduce, tool
from kernelfix.tools.verdict import (
    Category,
    CorrectnessReport,
    Hazard,
    SanitizerReport,
    SourceAt,
    ToolRun,
    TrialReport,
    Verdict,
)

FIXTURES = Path(__file__).parent / "fixtures" / "sanitizer"
# initcheck sees global memory only; a race on global memory no tool sees (tests/test_kernel_source.py reads it from the source)
FOUND = [c for c in sc.cases() if c.defect not in ("uninitialized_shared", "global_race")]
TOOL_OF = {
    "shared_race": "racecheck",
    "out_of_bounds": "memcheck",
    "misaligned": "memcheck",
    "divergent_barrier": "synccheck",
    "uninitialized_read": "initcheck",
}


def report(case: str, tool_name: str) -> parse.Report:
    return parse.parse((FIXTURES / f"{case}.{tool_name}.log").read_text())


def sources(case: sc.SanitizerCase, tmp_path: Path) -> hazards.Sources:
    """The candidate's source and a build dir holding the .cu load_inline writes from its cuda_source."""
    text = case.path.read_text()
    build = tmp_path / "build" / "ext"
    build.mkdir(parents=True)
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "cuda_source":
            (build / "cuda.cu").write_text(ast.literal_eval(node.value))  # no_implicit_headers=True: the string itself
    return hazards.Sources(text, case.path, tmp_path / "build", "triton" if "triton" in case.name else "cuda")


# ------------------------------------------------------------------ the reports, as the H100 printed them


@pytest.mark.parametrize(
    "case,tool_name,kind,line,errors",
    [
        ("row_sum_warp_race_cuda", "racecheck", "shared_race", 23, 1),
        ("row_sum_divergent_barrier_cuda", "synccheck", "divergent_barrier", 15, 512),
        ("row_sum_uninit_cuda", "initcheck", "uninitialized_read", 16, 32),
        ("scale_misaligned_cuda", "memcheck", "misaligned", 10, 258),
        ("scale_oob_write_cuda", "memcheck", "out_of_bounds", 7, 71),
        ("scale_oob_triton", "memcheck", "out_of_bounds", 17, 20),
    ],
)
def test_each_report_is_read(case, tool_name, kind, line, errors):
    r = report(case, tool_name)
    assert r.errors == errors  # the summary's count, not "... N errors were not printed"
    assert not r.messages  # the routine lines after a fault are no problem of the run
    rec = next(x for x in r.records if x.kind != "api_error")
    assert (rec.kind, rec.frames[0].line) == (kind, line)
    assert rec.frames[0].file in ("cuda.cu", f"{case}.py")


def test_race_pair_and_count():
    (rec,) = report("row_sum_warp_race_cuda", "racecheck").records
    assert rec.access == "read-write" and rec.count == 3968
    assert rec.frames[0].kernel == rec.other[0].kernel == "row_sum_kernel" and rec.other[0].line == 23


def test_memcheck_access_details():
    r = report("scale_oob_write_cuda", "memcheck")
    first = r.records[0]
    assert (first.memory, first.access, first.size_bytes) == (
        "global",
        "read",
        4,
    )  # memcheck stops the kernel at its first wild access
    assert first.address == "out of bounds, 1 bytes after the nearest allocation at 0x7f65dfa00000 of size 12,012 bytes"
    assert (first.thread, first.block) == ("187,0,0", "11,0,0")
    mis = report("scale_misaligned_cuda", "memcheck").records[0]
    assert (mis.kind, mis.size_bytes) == (
        "misaligned",
        16,
    )  # "Access to 0x... is misaligned": a float4 on a 4-byte boundary


def test_clean_reports_have_nothing():
    for t in tool.ORDER:
        r = report("row_sum_tree_cuda", t)
        assert r.errors == 0 and not r.records and not r.messages


def test_both_location_layouts():
    new = parse.parse_loc("row_sum_kernel(const float *, float *, long)+0xb30 in cuda.cu:23")
    old = parse.parse_loc("0x130 in /dir/divergence.cu:50:threadDivergence(int*)")
    bare = parse.parse_loc("k+0xb30")  # the report, without -lineinfo
    assert (new.kernel, new.file, new.line) == ("row_sum_kernel", "cuda.cu", 23)
    assert (old.kernel, old.file, old.line) == ("threadDivergence", "/dir/divergence.cu", 50)
    assert (bare.kernel, bare.file, bare.line) == ("k", None, None)
    assert (
        parse.short_name("void at::native::vectorized_elementwise_kernel<4, (anonymous)>(int, float *)")
        == "at::native::vectorized_elementwise_kernel<4, (anonymous)>"
    )


# ------------------------------------------------------------------ hazards: kind, the candidate's line, the fix


@pytest.mark.parametrize("name", [c.name for c in FOUND if c.name != "row_sum_oob_read_cuda"])
def test_each_defect_lands_on_its_line_with_its_fix(tmp_path, name):
    case = sc.load(sc.CANDIDATES / f"{name}.py")
    src = sources(case, tmp_path)
    t = TOOL_OF[case.defect]
    found = hazards.ordered(hazards.from_records(t, report(name, t).records, src))
    first = found[0]
    assert first.in_candidate and first.kind == case.defect
    assert first.where.code in case.lines and first.where.candidate_line in case.line_numbers()
    assert first.fix == hazards.fix(case.defect, first.memory, src.backend)
    text = hazards.describe(first)
    assert f"line {first.where.candidate_line} of your source" in text and first.kernel in text


def test_api_errors_after_a_fault_are_not_blamed(tmp_path):
    case = sc.load(sc.CANDIDATES / "scale_oob_triton.py")
    found = hazards.from_records("memcheck", report(case.name, "memcheck").records, sources(case, tmp_path))
    api = [h for h in found if h.kind == "api_error"]
    assert api and not any(h.in_candidate for h in api)  # cudaFree's LaunchFailure follows the kernel's fault
    oob = next(h for h in found if h.kind == "out_of_bounds")
    assert oob.count == 18 and "tl.load(ptr + offs, mask=mask" in oob.fix
    assert hazards._api_is_ours("cudaLaunchKernel: cudaErrorInvalidConfiguration (invalid configuration argument)")


def test_an_uninitialized_read_at_a_wild_access_is_left_out(tmp_path):
    """The off-by-one read: initcheck saw the float past the tensor as unwritten memory (without padding,
    memcheck saw nothing). Beside memcheck's out-of-bounds report on the same line, only that one stays."""
    case = sc.load(sc.CANDIDATES / "row_sum_oob_read_cuda.py")
    src = sources(case, tmp_path)
    uninit = hazards.from_records("initcheck", report(case.name, "initcheck").records, src)
    assert [h.kind for h in uninit] == ["uninitialized_read"] and uninit[0].where.code in case.lines
    oob = uninit[0].model_copy(update={"tool": "memcheck", "kind": "out_of_bounds", "fix": "bound it"})
    assert [h.kind for h in hazards.ordered([*uninit, oob])] == ["out_of_bounds"]


def test_repeated_line_is_placed_by_its_neighbours():
    cu = [
        "__global__ void k(float* p) {",
        "    p[0] = 1;",
        "    __syncthreads();",
        "    p[1] = p[0];",
        "    __syncthreads();",
        "    p[2] = p[1];",
        "}",
    ]
    cand = ["import torch", 'src = r"""', *cu, '"""']
    assert hazards.candidate_line(cu, 5, cand) == 7  # the second __syncthreads(): after p[1] = p[0]
    assert hazards.candidate_line(cu, 3, cand) == 5
    assert hazards.candidate_line(cu, 2, cand) == 4
    assert hazards.candidate_line(["}"], 1, ["}", "x = 1", "}"]) is None  # nothing tells them apart


def test_kernels_not_the_candidates_are_never_blamed(tmp_path):
    case = sc.load(sc.CANDIDATES / "row_sum_uninit_cuda.py")
    rec = parse.Record(
        kind="out_of_bounds",
        header="Invalid __global__ read of size 4 bytes",
        frames=[parse.Loc(function="void at::native::reduce_kernel<512, 1>(float *)", file="Reduce.cuh", line=900)],
    )
    (h,) = hazards.from_records("memcheck", [rec], sources(case, tmp_path))
    assert not h.in_candidate and h.kernel == "at::native::reduce_kernel<512, 1>"


# ------------------------------------------------------------------ the reduced input


def test_reduced_input_keeps_rows_and_tails():
    p = reduce.plans([(16384, 8192)], 1 << 18)
    assert [(x.rows, x.which) for x in p] == [(32, [0]), (256, [0]), (2048, [0]), (None, [])]
    # 4099 x 1001: 3 rows keep the whole tensor's tail modulo 4096 elements (and modulo 64 rows)
    (first, whole) = reduce.plans([(4099, 1001)], 1 << 18)
    assert first.rows == 3 and (3 * 1001) % 4096 == (4099 * 1001) % 4096 and not whole.reduced
    shared = reduce.plans([(1024, 1024), (1024, 1024), None], 1 << 18)
    assert [(x.rows, x.which) for x in shared[:2]] == [
        (256, [0, 1]),
        (256, [0]),
    ]  # a shared batch first, then the largest alone
    assert reduce.plans([(8, 4)], 1 << 18) == [reduce.Plan()]  # small already: the whole trial
    assert reduce.plans([None], 10) == [reduce.Plan()]
    assert reduce.describe(p[0], [(16384, 8192)], ["x"], ["float32"]) == "x float32[32, 8192] (32 of 16384 rows)"


# ------------------------------------------------------------------ what the verdict and the feedback say


def _race_verdict(tmp_path) -> Verdict:
    case = sc.load(sc.CANDIDATES / "row_sum_warp_race_cuda.py")
    found = hazards.ordered(
        hazards.from_records("racecheck", report(case.name, "racecheck").records, sources(case, tmp_path))
    )
    trial = TrialReport(
        trial=0,
        seed=1,
        ok=False,
        category=Category.NUMERICAL,
        problem="16384 of 16384 elements outside atol",
        max_abs_error=3.7e3,
        max_rel_error=0.9,
        mismatches=16384,
        numel=16384,
        worst_index=[8379, 0],
        expected=4176.09,
        actual=441.0,
    )
    san = SanitizerReport(
        why="correctness_error:numerical",
        hazards=found,
        inputs="x float32[32, 8192] (32 of 16384 rows)",
        reduced=True,
        reproduced=True,
        tools=[ToolRun(tool=t, seconds=5.0, errors=1 if t == "racecheck" else 0) for t in tool.ORDER],
    )
    return Verdict(
        category=Category.NUMERICAL,
        task="row_sum",
        device="cuda",
        message="trial 0: 16384 of 16384 elements outside atol",
        correctness=CorrectnessReport(trials=[trial]),
        sanitizer=san,
    )


def test_feedback_gives_the_hazard_first_and_keeps_the_category(tmp_path):
    v = _race_verdict(tmp_path)
    lines = feedback.render(v).splitlines()
    assert lines[0].startswith("Cause: compute-sanitizer (racecheck on x float32[32, 8192]")
    assert (
        "shared-memory race in row_sum_kernel" in lines[1]
        and "line 36 of your source" in lines[1]
        and "3968 hazards" in lines[1]
    )
    assert lines[2].strip().startswith("Fix:") and "__shfl_down_sync" in lines[2]
    assert lines[3].startswith("Wrong output on trial 0")  # the numbers after the cause
    assert v.category == Category.NUMERICAL and v.correct is None  # the verdict is the judge's, unchanged
    again = Verdict.model_validate_json(v.model_dump_json())
    assert again.sanitizer == v.sanitizer and again.sanitizer.causes[0].where.candidate_line == 36
    assert "shared-memory race in row_sum_kernel (line 36)" in sanitizer_summary(v.sanitizer)


def test_feedback_without_a_hazard(tmp_path):
    v = _race_verdict(tmp_path)
    clean = v.sanitizer.model_copy(update={"hazards": []})
    text = feedback.render(v.model_copy(update={"sanitizer": clean}))
    assert (
        text.splitlines()[0].startswith("compute-sanitizer (memcheck, racecheck, synccheck, initcheck on x float32")
        and "index math" in text
    )
    drifting = clean.model_copy(
        update={"nondeterministic": "12 of 32 elements of output 0 differ between two calls on the same inputs"}
    )
    assert "race on global memory" in feedback.render(v.model_copy(update={"sanitizer": drifting})).splitlines()[0]
    cut = clean.model_copy(update={"tools": [ToolRun(tool="racecheck", seconds=60, finished=False)]})
    assert feedback.render(v.model_copy(update={"sanitizer": cut})).startswith(
        "Wrong output"
    )  # a partial run proves nothing
    noted = SanitizerReport(
        why="correctness_error:numerical", note="not sanitized: compute-sanitizer needs a CUDA GPU (device cpu)"
    )
    assert feedback.render(v.model_copy(update={"sanitizer": noted})).startswith(
        "Wrong output"
    )  # the note is the user's, not the model's
    assert sanitizer_summary(noted) == noted.note


def test_correct_kernel_with_a_hazard():
    h = Hazard(
        tool="memcheck",
        kind="out_of_bounds",
        kernel="scale_kernel",
        what="Invalid __global__ write of size 4 bytes",
        memory="global",
        access="write",
        size_bytes=4,
        where=SourceAt(file="cuda.cu", line=7, code="y[i] = x[i] * 2.0f + 1.0f;", candidate_line=19),
        count=64,
        fix=hazards.fix("out_of_bounds", "global", "cuda"),
    )
    v = Verdict(
        category=Category.OK,
        task="scale_odd",
        device="cuda",
        sanitizer=SanitizerReport(why="--sanitize", hazards=[h], tools=[ToolRun(tool="memcheck", seconds=4)]),
    )
    lines = feedback.render(v).splitlines()
    assert lines[0].startswith("Correct on every trial, but compute-sanitizer (memcheck)")
    assert "out-of-bounds global write of 4 bytes in scale_kernel at line 19" in lines[1] and "if (i < n)" in lines[2]


# ------------------------------------------------------------------ the stage on a machine without a GPU, and the flags


def test_no_gpu_says_so_in_one_line(judges, verdicts):
    from conftest import CORPUS, case_named

    judge = judges("relu", "cpu", {"sanitize": True})
    wrong = judge.evaluate(
        (CORPUS / "candidates" / "triton_wrong_values.py").read_text(), filename="triton_wrong_values.py"
    )
    assert wrong.category == Category.NUMERICAL and wrong.failed_stage == "correctness"  # kept
    assert (
        wrong.sanitizer.note == "not sanitized: compute-sanitizer needs a CUDA GPU (device cpu)"
        and not wrong.sanitizer.tools
    )
    assert wrong.sanitizer.why == "correctness_error:numerical" and "sanitize" not in wrong.stage_seconds
    assert "compute-sanitizer" not in wrong.feedback
    ok = judge.evaluate((CORPUS / "candidates" / "triton_relu_ok.py").read_text(), filename="triton_relu_ok.py")
    assert ok.category == Category.OK and ok.sanitizer.why == "--sanitize" and "CUDA GPU" in ok.sanitizer.note
    plain = verdicts(case_named("triton_relu_ok.py"), "cpu")  # without --sanitize a correct kernel skips the stage
    assert plain.category == Category.OK and plain.sanitizer is None
    # Per call (a served request's, a reward's): False turns the stage off, --sanitize's correct kernels included;
    # True sanitizes a failure on a judge whose config does not (the conftest's judges: sanitize_failures off).
    assert (
        judge.evaluate(
            (CORPUS / "candidates" / "triton_relu_ok.py").read_text(), filename="ok.py", sanitize=False
        ).sanitizer
        is None
    )
    asked = judges("relu", "cpu").evaluate(
        (CORPUS / "candidates" / "triton_wrong_values.py").read_text(), filename="w.py", sanitize=True
    )
    assert asked.category == Category.NUMERICAL and "CUDA GPU" in asked.sanitizer.note


def test_sanitize_flags():
    from kernelfix.cli.common import add_judge_args, judge_config_for

    p = argparse.ArgumentParser()
    add_judge_args(p)
    on = judge_config_for(p.parse_args(["--sanitize"]))
    off = judge_config_for(p.parse_args(["--no-sanitize"]))
    default = judge_config_for(p.parse_args([]))
    assert (on.sanitize, on.sanitize_failures) == (True, True)
    assert (off.sanitize, off.sanitize_failures) == (False, False)
    assert (default.sanitize, default.sanitize_failures, default.sanitizer_timeout_s) == (False, True, 60.0)
    assert tool.command("/cs", "memcheck", Path("/l"))[-2:] == ["--padding", str(tool.PADDING)]
    assert "--padding" not in tool.command("/cs", "racecheck", Path("/l"))


# ------------------------------------------------------------------ the tools' input, handed over once they are ready


def test_the_plan_reaches_tools_that_started_before_it(tmp_path):
    """The tool runs start beside the probe and wait for their plan (tools/sanitizer/handoff.py): they read it
    whole once the judge writes it, a cancel ends them, and a plan that never comes ends their wait at its bound."""
    import threading

    from kernelfix.tools.sanitizer import handoff

    plan = tmp_path / handoff.PLAN_FILE
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(handoff.wait(plan, 30.0, poll_s=0.005)))
    waiter.start()
    handoff.publish(plan, {"plan": {"rows": 3}, "inputs_file": "inputs.pt"})
    waiter.join()
    assert got == [{"plan": {"rows": 3}, "inputs_file": "inputs.pt"}]
    handoff.publish(plan, {"cancel": True})
    assert handoff.wait(plan, 0.0) == {"cancel": True}
    assert handoff.wait(tmp_path / "none.json", 0.01, poll_s=0.005) is None
    (tmp_path / "bad.json").write_text("{half")
    assert handoff.wait(tmp_path / "bad.json", 0.01) is None


def test_the_stage_waits_for_every_tool_to_be_ready_or_gone(tmp_path):
    """The stage takes the GPU's lock for the tools once each is ready (its channel's phase, or its file) or has
    ended (one that could not start): never for a tool still importing torch, unless the wait's bound has passed."""
    import time
    from concurrent.futures import Future

    from kernelfix.tools.sanitizer import handoff
    from kernelfix.tools.stages.sanitize import _Ready

    tools = ["memcheck", "racecheck", "synccheck", "initcheck"]
    ready = _Ready(tools, tmp_path)
    futures = [Future() for _ in tools]
    assert not ready.all_ready(futures)
    ready.wait(futures, time.monotonic() + 0.02)  # nobody ready: the bound ends the wait
    ready.on_message("memcheck")({"type": "phase", "phase": handoff.READY_PHASE})
    ready.on_message("racecheck")({"type": "phase", "phase": "build_model"})  # not yet
    handoff.ready_file(tmp_path, "sanitize_synccheck").touch()
    futures[3].set_result(None)  # initcheck ended before it was ready
    assert not ready.all_ready(futures)
    handoff.ready_file(tmp_path, "sanitize_racecheck").touch()
    assert ready.all_ready(futures)
    ready.wait(futures, time.monotonic() + 3600)  # returns at once


def _fake_stage(tmp_path, monkeypatch, probe_plan):
    """The stage's own order of work with its children faked: the probe answers ``probe_plan``; each tool run says it
    is ready, waits for the plan as the real one does, and records what it got and whether the tools' lock was held."""
    import contextlib
    import threading
    import types

    from kernelfix.sandbox import ChildOutcome
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.handles import one_shot
    from kernelfix.tools.sanitizer import handoff
    from kernelfix.tools.stages import sanitize

    held: list[str] = []
    rooms: list[str] = []
    log: list[tuple] = []
    ready: list[str] = []
    all_ready = threading.Event()

    @contextlib.contextmanager
    def lease(what, shared=False):
        assert shared
        held.append(what)
        yield
        held.remove(what)

    @contextlib.contextmanager
    def room(what):
        rooms.append(what)
        yield
        rooms.remove(what)

    def fake_run(ctx, ev, stage, module, spec, timeout_s, *, on_message=None, **kw):
        if stage == "sanitize_probe":  # the tool runs are up by now: they started before the probe
            log.append(("probe", all_ready.wait(30.0), kw.get("fork_kind")))
            return ChildOutcome(argv=[], returncode=0, wall_s=0.1, messages=[{"type": "result", **probe_plan}])
        on_message({"type": "phase", "phase": handoff.IMPORTED_PHASE})
        got_room = handoff.wait(Path(spec["room_file"]), 30.0, poll_s=0.002)
        if rooms != ["sanitize"]:  # CUDA starts only once the stage has room
            log.append((stage, "no room", got_room, list(held)))
            return ChildOutcome(argv=[], returncode=0, wall_s=0.1)
        on_message({"type": "phase", "phase": handoff.READY_PHASE})
        ready.append(stage)
        if len(ready) == 4:
            all_ready.set()
        plan = handoff.wait(Path(spec["plan_file"]), 30.0, poll_s=0.002)
        log.append((stage, held == [], plan, list(held)))
        (Path(spec["outdir"]) / f"{stage.removeprefix('sanitize_')}.log").write_text(
            "========= ERROR SUMMARY: 0 errors\n"
        )
        return ChildOutcome(argv=[], returncode=0, wall_s=0.1)

    monkeypatch.setattr(one_shot, "run", fake_run)
    wd = tmp_path / "eval"
    (wd / "logs").mkdir(parents=True)
    (wd / "c.py").write_text("import triton\n")
    cfg = JudgeConfig(sanitizer_path="/bin/true", sanitize_failures=True)
    ctx = types.SimpleNamespace(
        config=cfg, device="cuda", seed=1, ref=types.SimpleNamespace(trials=[]), lease=lease, room=room
    )
    ev = types.SimpleNamespace(
        workdir=str(wd),
        candidate_path=wd / "c.py",
        category=Category.NUMERICAL,
        correctness=None,
        failed=True,
        compiled=True,
        code="",
        backend="triton",
        breakdown={},
        sanitizer=None,
        stages_done=[],
    )
    sanitize._run(ctx, ev, None)
    return ev, log, wd


def test_the_tools_start_before_the_room_and_get_their_input_under_the_lock(tmp_path, monkeypatch):
    """The tool runs start with the stage (their imports beside its wait for room), start CUDA once it has room, are
    ready before the probe ends, and get the probe's plan only under the tools' hold of the GPU's lock."""
    ev, log, wd = _fake_stage(
        tmp_path, monkeypatch, {"plan": {"rows": 3}, "inputs": "x float32[3, 8]", "saved": "/in.pt"}
    )
    assert ("probe", True, "triton") in log  # from the candidate worker's fork server, warm already
    tools = sorted(r for r in log if r[0] != "probe")
    assert [r[0] for r in tools] == [
        "sanitize_initcheck",
        "sanitize_memcheck",
        "sanitize_racecheck",
        "sanitize_synccheck",
    ]
    for _, _, plan, held in tools:  # each got the probe's plan, and only once the tools' lock was taken
        assert plan == {"plan": {"rows": 3}, "inputs_file": "/in.pt"} and held == ["sanitize"]
    assert ev.sanitizer.inputs == "x float32[3, 8]" and [t.tool for t in ev.sanitizer.tools] == [
        "memcheck",
        "racecheck",
        "synccheck",
        "initcheck",
    ]
    assert {"sanitize.probe", "sanitize.tools_start", "sanitize.lease_wait", "sanitize.tools"} <= set(ev.breakdown)
    assert not (wd / "sanitize_plan.json").exists() and not (wd / "sanitize_room.json").exists()


def test_without_an_input_the_waiting_tools_are_cancelled(tmp_path, monkeypatch):
    ev, log, _ = _fake_stage(tmp_path, monkeypatch, {"plan": None})
    assert [r[2] for r in log if r[0] != "probe"] == [{"cancel": True}] * 4
    assert ev.sanitizer.note.startswith("not sanitized: no input to run it on") and ev.sanitizer.tools == []
