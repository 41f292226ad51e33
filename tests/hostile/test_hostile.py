"""The hostile corpus: candidates that try to hang, exhaust, escape, spy on or fool the judge.

Each gets its classified verdict, within its time limits, and leaves no trace:
nothing outside its own dirs changes (canary files in a fake home and repo, the
judge's private and other evaluations' dirs, /tmp), no fake API key from the
judge's environment or credential files turns up anywhere, no request reaches a
server on this machine's loopback, no process of it outlives its stage, and
the judge judges the next candidate normally.

Every case runs twice where its header has ``expect-runtime``: as the judge
runs it, and with the static checks bypassed, so that runtime containment
alone is shown to hold for code that gets past them. Cases whose containment
needs a sandbox layer this machine lacks (``requires``) are skipped with the
sandbox's own note. CUDA cases (``devices: cuda``) run on the device.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import CORPUS, Case, load_cases

from kernelfix.base.cache_dir import BYTECODE_CACHE, COMPILER_CACHES, lock_root
from kernelfix.sandbox import probe
from kernelfix.sandbox.cgroup import PREFIX as CGROUP_PREFIX
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge
from kernelfix.tools.legality import static_checks
from kernelfix.tools.verdict import Category, Verdict

HERE = Path(__file__).parent
CASES = load_cases(HERE / "candidates")
MARK = "kfcanary" + secrets.token_hex(4)  # in every fake secret; never in anything the candidate could leave behind
GRACE_S = 20.0  # process start-up and teardown on top of a stage's own limit


# Bombs the cgroup stops; the "watchdog" variant runs them as the runtime variant does but with
# no cgroup, as on a machine that delegates none (the lent GPU), so the parent's polls must.
WATCHDOG_CASES = ("fork_bomb", "memory_bomb")


def _params():
    for case in CASES:
        for device in case.devices:
            # Runtime containment does not depend on the device: on the GPU (scarce) the
            # static-bypass variant runs only for the GPU-specific cases.
            both = case.expect_runtime and (device == "cpu" or case.devices == ["cuda"])
            variants = ["judge", "runtime"] if both else ["judge"]
            if device == "cpu" and case.path.stem in WATCHDOG_CASES:
                variants.append("watchdog")
            for variant in variants:
                marks = [pytest.mark.gpu] if device == "cuda" else []
                yield pytest.param(case, device, variant, id=f"{device}-{variant}-{case.path.stem}", marks=marks)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        self.hits: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.hits.append(self.path)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"reached")

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def _tree(root: Path, skip: list[Path]) -> dict[str, tuple]:
    """path -> (kind, size, sha1) for everything under ``root``, links not followed."""
    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = [n for n in dirnames if not any((d / n) == s for s in skip)]
        for name in dirnames + filenames:
            p = d / name
            if any(p == s for s in skip):
                continue
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p)] = ("file", p.stat().st_size, hashlib.sha1(p.read_bytes()).hexdigest())
            else:
                out[str(p)] = ("dir",)
    return out


@dataclass
class World:
    """Everything a hostile candidate might reach for, and the judges it runs under."""

    root: Path
    home: Path
    repo: Path
    outside: Path
    cache: Path
    server: _Server
    judges: dict[str, Judge] = field(default_factory=dict)

    @property
    def secret_files(self) -> list[Path]:
        return [self.home / ".env", self.home / ".ssh" / "id_rsa", self.home / ".netrc"]

    def source(self, case: Case) -> str:
        text = case.path.read_text()
        for key, value in {
            # The cache's locks/ and the lease's real dir ($KERNELFIX_LOCKS, shared with the run's other judges).
            "__CANARY_DIRS__": json.dumps(
                [str(self.home), str(self.repo), str(self.cache / "locks"), str(lock_root())]
            ),
            "__OUTSIDE_FILE__": str(self.outside / "planted.txt"),
            "__KEY_MARK__": MARK,
            "__SECRET_FILES__": json.dumps([str(p) for p in self.secret_files]),
            "__PORT__": str(self.server.server_address[1]),
        }.items():
            text = text.replace(key, value)
        return text

    def judge(self, case: Case, device: str) -> Judge:
        # The corpus is about containment, not accuracy or speed: fewer trials, no varied inputs or
        # float64 reference, short timing on the GPU, no torch.compile baseline.
        lean = {
            "trials": 3,
            "input_variants": [],
            "float64_reference": False,
            "timing_runs": 20,
            "time_torch_compile": False,
        }
        cfg = JudgeConfig(**{"device": device, "run_timeout_s": 60, "compile_timeout_s": 300, **lean, **case.config})
        key = cfg.model_dump_json()
        if case.fresh_judge or key not in self.judges:
            j = Judge(
                CORPUS / "tasks" / f"{case.task}.py",
                cfg,
                workdir=self.root / f"judge-{len(self.judges)}-{secrets.token_hex(3)}",
            )
            if case.fresh_judge:
                return j
            j.reference()  # its files exist before the candidate runs: any change to them is the candidate's
            self.judges[key] = j
        return self.judges[key]

    def snapshot(self, judge: Judge, skip: list[Path] = ()) -> dict[str, tuple]:
        """What must not change: the fake home and repo, /tmp's canary dir, the judge's own dirs."""
        snap: dict[str, tuple] = {}
        for root in (self.home, self.repo, self.outside, judge.root):
            snap.update(_tree(root, [*skip, self.cache]))
        # The cache too, but for the compiler caches judged code may write, the lease's hold log,
        # which the judge itself appends to, and the judge's baseline store, which it fills the
        # first time a candidate of the task reaches timing (checked apart: _baselines_are_the_judges).
        # The lease's own records beside the locks too: its memory log and the marks of holds asked for.
        locks = self.cache / "locks"
        # And the judge's own cache (hidden from every candidate), which a fresh judge's reference fills
        # in the background: a slow machine made it after the first snapshot (16 test workers on the H100).
        own = [self.cache / name for name in COMPILER_CACHES] + [
            *locks.glob("gpu-*.log"),
            *locks.glob("gpu-*.memory"),
            *locks.glob("gpu-*.wants"),
        ]
        own += [lock for lock in locks.glob("gpu-*.lock") if lock.name != "gpu-canary.lock"]
        own.append(self.cache / "judge")
        own.append(self.cache / BYTECODE_CACHE)  # the fork servers' bytecode (checked apart: _bytecode_is_the_judges)
        snap.update(_tree(self.cache, [*skip, *own]))
        return snap


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    home, repo, outside, cache = root / "home", root / "repo", root / "outside", root / "cache"
    for d in (home / ".ssh", repo / ".git", outside, cache / "locks"):
        d.mkdir(parents=True)
    (cache / "locks" / "gpu-canary.lock").touch()  # a lease lock of another GPU, for write_delete_outside to aim at
    key = f"sk-{MARK}-{secrets.token_hex(16)}"
    (home / ".bashrc").write_text("export PATH=$PATH\n")
    (home / ".env").write_text(f"OPENAI_API_KEY={key}\n")
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY----- {MARK} -----END KEY-----\n")
    (home / ".netrc").write_text(f"machine api.example.com login me password {MARK}\n")
    (repo / "kernel.py").write_text("print('the user work')\n")
    (repo / ".git" / "config").write_text("[core]\n")
    server = _Server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    w = World(root=root, home=home, repo=repo, outside=outside, cache=cache, server=server)
    with pytest.MonkeyPatch.context() as mp:
        # The judge's environment holds keys (under names the scrubber must recognise, and under
        # names it merely does not keep), and its home holds credential files.
        mp.setenv("HOME", str(home))
        mp.setenv("KERNELFIX_CACHE", str(cache))
        mp.setenv("OPENAI_API_KEY", key)
        mp.setenv("ANTHROPIC_API_KEY", f"sk-ant-{MARK}")
        mp.setenv("KERNELFIX_API_TOKEN", f"{MARK}-token")
        mp.setenv("DEPLOY_PW", f"{MARK}-pw")
        yield w
    server.shutdown()
    for j in w.judges.values():
        j.close()


def _live_processes_under(root: Path) -> list[str]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(root)):
            found.append(f"{entry.name} in {cwd}")
    return found


def _leftover_cgroups() -> list[str]:
    mine = f"{CGROUP_PREFIX}{os.getpid()}-"
    return [str(p) for p in Path("/sys/fs/cgroup").glob(f"**/{mine}*")] if Path("/sys/fs/cgroup").exists() else []


def _baselines_are_the_judges(store: Path) -> None:
    """Every entry of the baseline store is one the judge wrote: its own schema, real timings."""
    from kernelfix.tools.timing.baselines import Baseline

    for f in store.glob("*"):
        b = Baseline.model_validate_json(f.read_text())
        assert b.eager is not None and b.eager.median_ms > 1e-3, f"{f.name}: {b}"


def _bytecode_is_the_judges(folder: Path, before: dict[str, tuple]) -> None:
    """The fork servers' bytecode folder (sandbox/fork_server.py) only grows, and only by the bytecode of sources
    that exist: what was there is unchanged, and every entry is ``<source's dir>/<module>.<tag>.pyc`` under it."""
    after = _tree(folder, [])
    assert not [p for p, v in before.items() if after.get(p) != v], (
        "the fork servers' bytecode changed under a candidate"
    )
    for p, v in after.items():
        if v[0] != "file":
            assert v[0] == "dir", f"{p}: {v}"
            continue
        rel = Path(p).relative_to(folder)
        source = Path("/") / rel.parent / (rel.name.split(".")[0] + ".py")
        assert rel.suffix == ".pyc" and source.is_file(), f"{p} is not the bytecode of a source: {source}"


def _stage_limit(judge: Judge, stage: str) -> float:
    c = judge.config
    return {"compile": c.compile_timeout_s, "benchmark": c.bench_timeout_s}.get(stage, c.run_timeout_s)


@pytest.mark.parametrize("case,device,variant", list(_params()))
def test_hostile_candidate_is_contained(case: Case, device: str, variant: str, world: World, monkeypatch):
    layers = probe()
    missing = [layer for layer in case.requires if not layers.layers.get(layer)]
    if missing:
        pytest.skip(f"needs sandbox layers {missing} this machine lacks: {'; '.join(layers.notes)}")
    if variant in ("runtime", "watchdog"):
        monkeypatch.setattr(static_checks, "errors", lambda findings: [])
    if variant == "watchdog":
        case = dataclasses.replace(case, config={**case.config, "sandbox": {"cgroup": False}})
    judge = world.judge(case, device)
    if case.needs_prior_ok:
        _judge_good(judge)
    (judge.root / "evals").mkdir(exist_ok=True)  # made by the first evaluation: not the candidate's doing
    before = world.snapshot(judge, skip=[judge.root / "reference"] if case.fresh_judge else [])
    bytecode_before = _tree(world.cache / BYTECODE_CACHE, [])
    task_copy = (judge.root / "reference" / "task.py").read_text()
    # Cgroups that exist before it (the reference workers of other judges this test process holds: the corpus's
    # session judges, on the same xdist worker) are not the candidate's.
    cgroups_before = set(_leftover_cgroups())

    verdict: Verdict = judge.evaluate(world.source(case), filename=case.path.name)

    expected = Category(case.expect_runtime if variant != "judge" and case.expect_runtime else case.expect[device])
    what = f"{case.path.name} ({case.behaviour}): got {verdict.category.value}: {verdict.message}\n{verdict.feedback}"
    if variant == "watchdog" and verdict.category == Category.OOM:
        # Without a cgroup, forked copies of a torch process sum their shared pages once per
        # copy, and the RSS watchdog may fire before the task count does: killed either way.
        expected = Category.OOM
    if (
        case.path.stem == "memory_bomb"
        and verdict.category == Category.RUN_TIMEOUT
        and "did not finish within" in verdict.message
    ):
        # On the H100 host under six judges at once, zeroing 8 GiB of pages outran the 10 s hang
        # deadline once: killed for time rather than memory, the candidate's fault either way.
        expected = Category.RUN_TIMEOUT
    assert verdict.category == expected, what
    assert verdict.message or verdict.ok, what
    if verdict.ok and verdict.timings and verdict.timings.candidate:
        assert verdict.timings.candidate.median_ms > 1e-3, (
            f"no kernel launch takes {verdict.timings.candidate.median_ms} ms: faked timing"
        )
    for stage, seconds in verdict.stage_seconds.items():
        if stage != "static":
            assert seconds <= _stage_limit(judge, stage) + GRACE_S, f"{stage} took {seconds:.0f} s: {what}"

    evaldir = Path(verdict.logs_dir).parent
    after = world.snapshot(judge, skip=[evaldir, *([judge.root / "reference"] if case.fresh_judge else [])])
    changed = sorted(set(before.items()) ^ set(after.items()))
    assert not changed, f"changed outside the candidate's dirs: {changed[:10]}"
    _baselines_are_the_judges(world.cache / "judge" / "baselines")
    _bytecode_is_the_judges(world.cache / BYTECODE_CACHE, bytecode_before)
    assert (judge.root / "reference" / "task.py").read_text() == task_copy
    assert not (world.outside / "planted.txt").exists()

    leaked = [
        str(p)
        for p in evaldir.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and p.name != "candidate.py"
        and MARK.encode() in _read_head(p)  # its source holds MARK to search for
    ]
    assert not leaked, f"a fake secret reached {leaked}"
    assert MARK not in verdict.model_dump_json()
    assert not world.server.hits, f"the candidate reached the network: {world.server.hits}"
    # The judge's reference worker lives as long as the judge (it serves every evaluation); nothing
    # of the candidate's may outlive its evaluation.
    assert not [p for p in _live_processes_under(judge.root) if f"in {judge.root / 'reference'}" not in p], (
        "a process of the candidate outlived its evaluation"
    )
    references = {d for j in world.judges.values() for d in j.ref.cgroup_dirs()} | set(judge.ref.cgroup_dirs())
    assert not [c for c in _leftover_cgroups() if c not in references and c not in cgroups_before]
    if case.fresh_judge:
        judge.close()
    print(f"\n[{device}/{variant}] {case.path.stem}: {verdict.category.value}: {verdict.message}")


def _read_head(p: Path, limit: int = 64 << 20) -> bytes:
    try:
        with p.open("rb") as f:
            return f.read(limit)
    except OSError:
        return b""


def test_corpus_covers_every_behaviour_the_issue_names():
    named = {
        "python_loop",
        "gpu_spin",
        "fork_bomb",
        "memory_bomb",
        "stdout_flood",
        "write_delete_outside",
        "env_secrets",
        "network",
        "kill_parent",
        "monkeypatch",
        "swap_reference",
        "gpu_fake_timing",
        "copy_answers",
        "forge_channel",
        "judge_traps",
        "gpu_memory_bomb",
        "gpu_illegal_access",
    }
    assert named <= {c.path.stem for c in CASES}


def test_sandbox_layers_all_present_on_a_root_linux_machine():
    """CI runs as root on a machine with namespaces and cgroups: a silently lost layer must fail here,
    not merely skip the hostile cases that depend on it."""
    if os.geteuid() != 0:
        pytest.skip("not root: layers depend on user namespaces and cgroup delegation")
    report = probe()
    assert report.has("network", "pid", "filesystem", "capabilities", "cgroup"), report.notes


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_judges_still_work_after_the_hostile_corpus(device: str, world: World):
    """Runs after the corpus (file order): every judge it used judges a good candidate normally."""
    judges = [j for j in world.judges.values() if j.device == device]
    if not judges:
        pytest.skip(f"no hostile case ran on {device}")
    for j in judges:
        _judge_good(j)


def _judge_good(j: Judge) -> None:
    """A known-good candidate through compile and correctness: enough to show the judge and its reference are intact."""
    ev = j.start((CORPUS / "candidates" / "triton_relu_ok.py").read_text(), filename="triton_relu_ok.py")
    for stage in (j.compile, j.correctness):
        ev = stage(ev)
    v = j.finish(ev)
    assert v.category == Category.OK, f"{v.category.value}: {v.message}"
