"""Shared fixtures: the candidate corpus, and one judge per (task, device, config) so each
task's reference is computed once per test session."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# One OpenMP thread per process (before torch loads libgomp, and inherited by every child, the judge's workers
# included: the sandbox passes OMP_NUM_THREADS on). The suite runs two xdist workers, each starting judges of
# several torch processes, on two cores: with a thread per core in each, idle OpenMP threads spin on cores
# that other processes need, and the same tests took a third more CPU time. Set it to run them otherwise.
os.environ.setdefault("OMP_NUM_THREADS", "1")

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm must not fetch its price list

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).parent / "corpus"


@functools.cache
def has_cuda() -> bool:
    # torch is imported when first asked, not with this file: xdist's controller loads it too, and would spend
    # its first seconds importing torch before it starts the workers, which import it again for their tests
    import torch

    return torch.cuda.is_available()


# CI runs `-n 2 --dist loadgroup`: xdist hands out single tests (a file's tests may land on either
# worker), except the files below, whose tests share a module-scoped fixture (a Ray cluster, a
# judge, exported files) or depend on an earlier test of the file: each goes whole to one worker.
GROUPED_FILES = (
    "test_batch_ray.py",
    "test_export_loading.py",
    "test_profile_stage.py",
    "test_hostile.py",
    "test_agent_crash.py",
    "test_api.py",
    "test_serve.py",
    "test_rewards.py",
    "test_terminal.py",  # its real evaluations run side by side once, in a module fixture
    "test_fused_check.py",  # its cases run once, in one child process (Triton's interpreter)
    "test_knowledge.py",  # every exemplar interpreted in one child, every CUDA one compiled by nvcc at once
    "test_swap_cost.py",
    "test_fairness.py",
    "test_input_sets.py",  # a captured swap, a judge
    "test_hf_kernels.py",  # its captured tasks
    "test_corpus.py",  # the corpus's verdicts (`verdicts`), which test_correctness_checks reads too
    "test_correctness_checks.py",
    "test_zygote.py",  # its fork servers of the full preload, started once rather than on each worker
)
# Grouped files that share a session-scoped fixture go to one worker together, so it is made once: `verdicts` is per
# worker, and the Triton cases both files judge (the linear ones, about 20 s each in the interpreter) were judged twice.
SHARED_GROUPS = {
    "test_api.py": "relu_cpu_judge",
    "test_rewards.py": "relu_cpu_judge",
    "test_corpus.py": "corpus_verdicts",
    "test_correctness_checks.py": "corpus_verdicts",
}
# The longest tests (seconds of wall time on two cores, from `--durations`; the slow tier's from a whole-suite run),
# handed out first so that no worker is left with a long one at the end while the other idles. Unlisted tests follow
# in file order. A group's weight is its whole time; a test left out by `-m` is not handed out at all.
LONGEST = {
    "test_build.py::test_host_pch_gives_the_same_object": 140,  # builds the run's one torch/extension.h PCH, first
    # Its binding TU takes that PCH (the CUDA include directories leave the header's text alone): started once the
    # PCH is about built, so that its worker runs other tests meanwhile rather than waiting on the PCH's lock.
    "test_fast_layout.py::test_fast_layout_example_through_the_judge": 27,
    "corpus_verdicts": 80,  # test_corpus.py and test_correctness_checks.py; their torch-header builds last (below)
    "test_agent_crash.py": 130,  # groups: their whole time (20 s without the slow tier)
    "test_batch_ray.py": 90,
    "test_fused_check.py": 45,
    "test_hostile.py": 40,
    "test_hf_kernels.py": 36,
    "test_profile_stage.py": 35,
    "test_batch.py::test_batch_killed_then_rerun_skips_finished_and_resumes_unfinished": 34,
    "test_tune.py::test_tune_on_the_cpu_then_again": 30,
    "test_build.py::test_any_change_that_matters_misses_the_cache": 10,
    "test_agent_cli.py::test_demo_killed_mid_turn_resumes_without_losing_a_turn": 28,
    "test_zygote.py": 25,
    "test_knowledge.py": 23,
    "test_terminal.py": 20,
    "test_lint_types.py::test_mypy_finds_nothing": 17,
    "test_capture_shapes.py::test_capture_all_calls_then_the_swap_compiles_fullgraph": 14,
    "test_baseline_cmd.py::test_rows_checks_failures_json_and_resume": 13,
    "test_swap_cost.py": 13,
    "test_serve.py": 11,
    "test_export_loading.py": 9,
    "relu_cpu_judge": 9,  # test_api.py and test_rewards.py
}


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # xdist: keep the order pytest_collection_modifyitems gives
        config.option.loadscopereorder = False
    # One build cache per test run (the judge hands it to every child): tests see cold builds,
    # share them with each other, and never touch the user's cache. Made by the run's first
    # process (xdist's controller, before it starts the workers, which inherit the variable), so
    # the workers share one precompiled header and one build store. Set KERNELFIX_CACHE to reuse
    # one across runs.
    if not os.environ.get("KERNELFIX_CACHE"):
        os.environ["KERNELFIX_CACHE"] = config._kernelfix_cache = tempfile.mkdtemp(prefix="kernelfix-test-cache-")
    # One GPU lease for the whole run, tests with a cache of their own included (the hostile world's):
    # judges that do not share a lease neither take turns on the GPU nor give each other memory back.
    if not os.environ.get("KERNELFIX_LOCKS"):
        os.environ["KERNELFIX_LOCKS"] = config._kernelfix_locks = os.path.join(os.environ["KERNELFIX_CACHE"], "locks")


def pytest_unconfigure(config):
    made = getattr(config, "_kernelfix_cache", None)
    if made:  # precompiled headers are hundreds of MB
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop("KERNELFIX_CACHE", None)
    if getattr(config, "_kernelfix_locks", None):
        os.environ.pop("KERNELFIX_LOCKS", None)


def _group(item) -> str:
    return SHARED_GROUPS.get(item.path.name, item.path.name)


def _weight(item) -> float:
    name = item.path.name
    return LONGEST.get(f"{name}::{item.name}", LONGEST.get(_group(item), 0.0) if name in GROUPED_FILES else 0.0)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks to name each test's group
def pytest_collection_modifyitems(config, items):
    order = {id(item): i for i, item in enumerate(items)}
    group_weight = {}
    for item in items:
        if item.path.name in GROUPED_FILES:
            group_weight[_group(item)] = max(group_weight.get(_group(item), 0.0), _weight(item))
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    # A group goes out at its first test: its tests stay together and in their order, except that its builds against
    # the torch headers come last, by when the PCH test (started first on the other worker) has made the run's PCH.
    items.sort(
        key=lambda item: (
            -(group_weight.get(_group(item)) or _weight(item)),
            _group(item) if item.path.name in GROUPED_FILES else "",
            item.path.name in GROUPED_FILES and "torch_build" in item.keywords,
            order[id(item)],
        )
    )
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device)")
    for item in items:
        if "gpu" in item.keywords and not has_cuda():
            item.add_marker(skip_gpu)


@dataclass
class Case:
    path: Path
    expect: dict[str, str]
    devices: list[str]
    task: str = "relu"
    config: dict = field(default_factory=dict)
    warns: list[str] = field(default_factory=list)  # verdict warnings it must raise (e.g. precision)
    expect_runtime: str | None = None  # with the static checks bypassed: what runtime containment alone gives
    requires: list[str] = field(default_factory=list)  # sandbox layers the expectation depends on
    fresh_judge: bool = False  # needs a judge that has not computed its reference yet
    needs_prior_ok: bool = False  # needs an earlier correct evaluation on the same judge
    behaviour: str = ""

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def uses_nvcc(self) -> bool:
        return "load_inline" in self.path.read_text()


_HEADER = re.compile(
    r"^# (expect|expect-cpu|expect-cuda|expect-runtime|devices|task|config|warns|requires|fresh-judge|needs-prior-ok|behaviour): (.+)$",
    re.M,
)


def load_cases(directory: Path = CORPUS / "candidates") -> list[Case]:
    """Every candidate in ``directory`` with what its header says it must get.

    Headers (first 8 lines): ``# expect: CATEGORY`` (or ``expect-cpu`` / ``expect-cuda``),
    ``# devices: cpu,cuda``, ``# task: NAME``, ``# config: {json JudgeConfig fields}``,
    ``# warns: PREFIX, ...``; for the hostile corpus also ``# expect-runtime: CATEGORY``,
    ``# requires: LAYER, ...``, ``# fresh-judge: yes``, ``# needs-prior-ok: yes`` and
    ``# behaviour: TEXT``.
    """
    cases = []
    for path in sorted(directory.iterdir()):
        head = "\n".join(path.read_text().splitlines()[:8])
        fields = dict(_HEADER.findall(head))
        expect = {}
        for dev in ("cpu", "cuda"):
            value = fields.get(f"expect-{dev}", fields.get("expect"))
            if value:
                expect[dev] = value.strip()
        devices = [d.strip() for d in fields.get("devices", "cpu,cuda").split(",")]
        cases.append(
            Case(
                path=path,
                expect=expect,
                devices=[d for d in devices if d in expect],
                task=fields.get("task", "relu").strip(),
                config=json.loads(fields.get("config", "{}")),
                expect_runtime=fields.get("expect-runtime", "").strip() or None,
                requires=[r.strip() for r in fields.get("requires", "").split(",") if r.strip()],
                fresh_judge=fields.get("fresh-judge", "").strip() == "yes",
                needs_prior_ok=fields.get("needs-prior-ok", "").strip() == "yes",
                behaviour=fields.get("behaviour", "").strip(),
                warns=[w.strip() for w in fields.get("warns", "").split(",") if w.strip()],
            )
        )
    return cases


@pytest.fixture(scope="session")
def judges(tmp_path_factory):
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    made: dict[tuple, Judge] = {}

    def get(task: str, device: str, config: dict | None = None) -> Judge:
        key = (task, device, json.dumps(config or {}, sort_keys=True))
        if key not in made:
            # No sanitizer on the corpus's failures (up to a minute each on the GPU): tests/test_sanitizer*.py test it.
            cfg = JudgeConfig(
                **{
                    "device": device,
                    "run_timeout_s": 120,
                    "compile_timeout_s": 600,
                    "sanitize_failures": False,
                    **(config or {}),
                }
            )
            made[key] = Judge(
                CORPUS / "tasks" / f"{task}.py", cfg, workdir=tmp_path_factory.mktemp(f"judge-{task}-{device}")
            )
        return made[key]

    yield get
    for j in made.values():
        j.close()


@pytest.fixture(scope="session")
def relu_cpu_judge():
    """kernelfix.Judge, the public API, on the corpus ReLU task on the CPU with one standby worker: the API's
    tests and the in-process rewards' share it (one reference start; SHARED_GROUPS keeps them on one worker)."""
    import kernelfix

    with kernelfix.Judge(CORPUS / "tasks" / "relu.py", device="cpu", config={"run_timeout_s": 120}, standby=1) as judge:
        yield judge


def case_named(name: str) -> Case:
    return next(c for c in load_cases() if c.path.name == name)


@pytest.fixture(scope="session")
def verdicts(judges):
    """Each corpus case judged once per device per session, whichever test asks first."""
    cache: dict[tuple[str, str], object] = {}

    def get(case: Case, device: str):
        key = (case.path.name, device)
        if key not in cache:
            judge = judges(case.task, device, case.config)
            cache[key] = judge.evaluate(case.path.read_text(), filename=case.path.name)
        return cache[key]

    return get
