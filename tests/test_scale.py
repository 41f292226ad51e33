"""The judge under the conditions of real sizes, on the CPU: nothing tensor-sized touches the disk, even
with evaluations side by side; a full disk and a task too large for the machine are the machine's
(``infra:``), never the candidate's or the task's; claims of a full disk are checked, not believed.
The same at KernelBench's published sizes runs on the GPU (bench/judge_latency.py --big; docs/judge.md)."""

from __future__ import annotations

import os
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import CORPUS

from kernelfix.base.cache_dir import BUILD_CACHE
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge
from kernelfix.tools.verdict import Category

RELU_OK = (CORPUS / "candidates" / "triton_relu_ok.py").read_text()
# The same kernel in blocks of 64Ki: Triton's interpreter runs a program at a time, so on 1M elements this is
# 16 programs, not 1024 (a third of the test's CPU time); what is tested, the judge's files, does not change.
RELU_OK_BIG_BLOCKS = RELU_OK.replace("1024", "65536")
assert RELU_OK_BIG_BLOCKS.count("65536") == 2  # the grid and the block


def _task(tmp_path: Path, name: str, inputs: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(
        textwrap.dedent(f"""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x)

        def get_inputs():
            return [{inputs}]

        def get_init_inputs():
            return []
    """)
    )
    return path


def _largest_file(roots: list[Path]) -> tuple[int, str]:
    """Build products are left out: the cache is shared with tests running beside this one, and a precompiled
    torch header one of them makes (hundreds of MiB) is compiler output, not a tensor."""
    big = (0, "")
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            if Path(dirpath) == root:
                dirs[:] = [d for d in dirs if d != BUILD_CACHE]
            for f in files:
                p = os.path.join(dirpath, f)
                try:
                    size = os.lstat(p).st_size
                except OSError:
                    continue
                big = max(big, (size, p))
    return big


def test_side_by_side_evaluations_write_no_tensor_to_disk(tmp_path):
    """Three judges at once on a task whose every input and output is 4 MiB (each trial's reference, inputs
    and outputs once went through torch.save files: 19_ReLU filled a 64 GB disk that way)."""
    # 4 MiB, twice the bar below: a file holding any input, output or reference (or half of one) is over it. The
    # judges' work grows with the size (8 MiB took 5 CPU-s more), what the test looks for does not.
    task = _task(tmp_path, "relu4m", "torch.randn(1024, 1024)")
    roots = [tmp_path / f"judge{i}" for i in range(3)] + [Path(os.environ["KERNELFIX_CACHE"])]
    largest, stop = [(0, "")], threading.Event()

    def watch() -> None:  # the largest file anywhere the judges write, sampled while they run
        while not stop.is_set():
            largest[0] = max(largest[0], _largest_file(roots))
            time.sleep(0.1)

    verdicts: list = []

    def judge(i: int) -> None:
        with Judge(task, JudgeConfig(device="cpu", trials=2, input_variants=["scaled"]), workdir=roots[i]) as j:
            verdicts.append(j.evaluate(RELU_OK_BIG_BLOCKS))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    threads = [threading.Thread(target=judge, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    assert [v.category for v in verdicts] == [Category.OK] * 3, [v.message for v in verdicts]
    assert largest[0][0] < 2 << 20, f"a {largest[0][0] >> 20} MiB file was written: {largest[0][1]}"


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB filesystem of its own (tmpfs; needs root, as CI has)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path) -> None:
    with open(mnt / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


# Honest scratch space at import, on what will be a full disk (its TMPDIR is in the evaluation's directory).
WRITES_SCRATCH = (
    RELU_OK
    + "\n\nimport tempfile\n\nwith open(tempfile.gettempdir() + '/scratch', 'wb') as _f:\n    _f.write(b'0' * (4 << 20))\n"
)


def test_a_full_disk_is_the_machines_fault(tmp_path, small_disk):
    task = _task(tmp_path, "relu", "torch.randn(16, 64)")
    with Judge(task, JudgeConfig(device="cpu", trials=2, input_variants=[]), workdir=tmp_path / "j") as j:
        # the candidate's own scratch write fails: infra, because the disk really is full
        ev = j.start(WRITES_SCRATCH, workdir=small_disk / "eval1")
        j.run_for(ev)  # its worker's directories and spec are written; then the disk fills
        _fill(small_disk)
        v = j.finish(j.compile(ev))
        assert v.category == Category.DISK_FULL, (v.category, v.message)
        assert "disk space" in v.message  # the candidate's write failed (the judge's own says "could not write")
        # the judge's own write for the next evaluation fails: infra too, not a traceback
        v = j.evaluate(RELU_OK, workdir=small_disk / "eval2")
        assert v.category == Category.DISK_FULL, (v.category, v.message)


def test_a_claimed_full_disk_is_not_believed(tmp_path):
    task = _task(tmp_path, "relu", "torch.randn(16, 64)")
    liar = RELU_OK + "\n\nraise OSError(28, 'No space left on device')  # at import, with plenty of space\n"
    with Judge(task, JudgeConfig(device="cpu", trials=2, input_variants=[]), workdir=tmp_path / "j") as j:
        v = j.evaluate(liar)
    assert v.category == Category.IMPORT, (v.category, v.message)


def test_a_task_too_large_for_the_machine_says_its_size_and_the_limit(tmp_path):
    """Counted on the meta device before anything is allocated: refused at once, its sizes named."""
    task = _task(tmp_path, "huge", "torch.rand(256, 1024, 1024)")  # 1 GiB of inputs, 1 GiB of outputs
    with Judge(
        task, JudgeConfig(device="cpu", trials=1, input_variants=[], memory_limit_gb=0.75), workdir=tmp_path / "j"
    ) as j:
        v = j.evaluate(RELU_OK)
    assert v.category == Category.TOO_LARGE, (v.category, v.message)
    assert "inputs 1 GiB, outputs 1 GiB" in v.message and "needs 2 GiB" in v.message, v.message
    assert "the limit is 0.75 GiB" in v.message, v.message
    assert "reached" not in v.message, "the reference allocated up to the limit although the sizes were known"


def test_a_task_the_meta_device_cannot_count_is_measured_by_its_real_run(tmp_path):
    """``.item()`` has no value on the meta device: no count, and the real run meets the limit and says so."""
    task = _task(tmp_path, "huge_uncounted", "torch.rand(int(torch.tensor(256).item()), 1024, 1024)")
    with Judge(
        task, JudgeConfig(device="cpu", trials=1, input_variants=[], memory_limit_gb=0.75), workdir=tmp_path / "j"
    ) as j:
        v = j.evaluate(RELU_OK)
    assert v.category == Category.TOO_LARGE, (v.category, v.message)
    assert "of the 0.75 GiB limit" in v.message and "GiB" in v.message.split("reached")[1], v.message
