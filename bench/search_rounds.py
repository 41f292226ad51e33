"""A search on the GPU: width 4, keep 2, two rounds, on two tasks (issue 15's proof, docs/search.md).

    python3 bench/search_rounds.py [--out DIR] [--device cuda|cpu] [--tasks relu_kb,matmul_kb]

Replay models (no network) answer each round with four candidates, one correct, one wrong and two that
fail before the GPU:
  relu_kb (KernelBench #19, 16 x 16384): round one builds three CUDA ReLUs at once (correct, leaky, one
    nvcc rejects) beside a reply without code; round two, a float4 CUDA ReLU, a leaky Triton one, a
    Triton one with a syntax error, no code. The CUDA candidates keep the torch headers out of the .cu
    (raw-pointer launcher, torch wrapper in cpp_sources): the wrapper's build is shared through the
    object cache, the kernels build side by side.
  matmul_kb (KernelBench #1, 2048 x 2048): Triton matmuls; round one 64x64 tiles (correct), B read
    transposed (wrong), a syntax error, no code; round two 128x64 (correct), the K loop a tile short
    (wrong), a syntax error, no code.

The target speedup is out of reach, so both rounds run. For each round it prints the wall time beside the
sum of its verdicts' stage times: candidates are judged at once, so the wall time is below the sum. The
GPU stages (reference, correctness, benchmark) queue on the device lease and do not overlap; the lease log
shows it. About 3 to 4 minutes on the H100 (profile off; a fresh machine first builds the precompiled
torch header for the CUDA wrapper).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from kernelfix.agent.agent_config import AgentConfig  # noqa: E402
from kernelfix.agent.headless import HeadlessReporter  # noqa: E402
from kernelfix.agent.models import ReplayModel  # noqa: E402
from kernelfix.agent.session import Session  # noqa: E402
from kernelfix.agent.session_dir import read_trajectory  # noqa: E402
from kernelfix.base.cache_dir import lock_root  # noqa: E402
from kernelfix.tools.config import JudgeConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FENCE = "```"


def reply(prose: str, code: str) -> dict:
    return {"content": f"{prose}\n\n{FENCE}python\n{code.strip()}\n{FENCE}\n"}


def relu_cuda(threads: int, *, vector: bool = False, leaky: bool = False, broken: bool = False) -> str:
    if vector:  # four floats a thread; the tail (n % 4) one by one
        body = """
    int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        float4 v = reinterpret_cast<const float4*>(x)[i / 4];
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        reinterpret_cast<float4*>(y)[i / 4] = v;
    } else {
        for (; i < n; ++i) y[i] = fmaxf(x[i], 0.f);
    }"""
        blocks = f"(n / 4 + {threads}) / {threads}"
    else:
        body = """
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);"""
        blocks = f"(n + {threads - 1}) / {threads}"
    if leaky:  # wrong: a leaky ReLU
        body = body.replace("fmaxf(x[i], 0.f)", "(x[i] > 0.f ? x[i] : 0.01f * x[i])")
    if broken:
        body = body.replace("fmaxf(", "fmaxff(")  # nvcc: identifier "fmaxff" is undefined
    return f'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cstdint>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {{{body}
}}

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {{
    relu_kernel<<<{blocks}, {threads}, 0, stream>>>(x, y, n);
}}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu_cuda(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    relu_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
    return y;
}}
"""

relu_ext = load_inline(name="relu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["relu_cuda"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_cuda(x.contiguous())
'''


def relu_triton(block: int, *, leaky: bool = False, syntax_error: bool = False) -> str:
    """examples/candidates/relu_triton.py with another block size (or a leaky slope: wrong; or a colon missing)."""
    src = (ROOT / "examples" / "candidates" / "relu_triton.py").read_text().replace("BLOCK = 1024", f"BLOCK = {block}")
    if leaky:
        src = src.replace("tl.maximum(x, 0.0)", "tl.where(x > 0, x, 0.01 * x)")
    return src.replace("-> torch.Tensor:", "-> torch.Tensor") if syntax_error else src


def matmul_triton(
    bm: int, bn: int, bk: int, *, transposed_b: bool = False, short_k: bool = False, syntax_error: bool = False
) -> str:
    """bench/candidates/matmul_triton.py with other tiles (or B's strides swapped, or the last K tile
    skipped: wrong; or a colon missing)."""
    src = (ROOT / "bench" / "candidates" / "matmul_triton.py").read_text()
    src = src.replace("BM=64, BN=64, BK=32", f"BM={bm}, BN={bn}, BK={bk}").replace(
        "cdiv(M, 64), triton.cdiv(N, 64)", f"cdiv(M, {bm}), triton.cdiv(N, {bn})"
    )
    if transposed_b:
        src = src.replace("B.stride(0), B.stride(1)", "B.stride(1), B.stride(0)")
    if short_k:
        src = src.replace("range(0, K, BK)", "range(0, K - BK, BK)")
    return src.replace("def forward(self, A, B):", "def forward(self, A, B)") if syntax_error else src


NO_CODE = {"content": "The kernel is close; I would look at the profile before writing another one."}


# Each round as a first attempt often goes (KernelBench): one correct, one wrong, two that fail before
# reaching the GPU. The GPU stages of a correct candidate take about 30 s on the H100 (docs/judge.md) and
# queue on the lease; this mix keeps the run near 3 minutes while three builds still overlap in round one.
TASKS = {
    "relu_kb": (
        ROOT / "bench" / "tasks" / "relu_kb.py",
        [  # round one (calls 0-3): three CUDA builds at once; round two (calls 4-7): children of the two kept
            reply("One thread an element, 256 a block.", relu_cuda(256)),
            reply("A leaky slope keeps gradients alive.", relu_cuda(256, leaky=True)),
            reply("fmaxf, spelled my way.", relu_cuda(128, broken=True)),
            NO_CODE,
            reply("Four floats a thread: one 16-byte load and store.", relu_cuda(256, vector=True)),
            reply("The same pass in Triton, with the leaky slope.", relu_triton(1024, leaky=True)),
            reply("Triton, 2048 a program.", relu_triton(2048, syntax_error=True)),
            NO_CODE,
        ],
    ),
    "matmul_kb": (
        ROOT / "bench" / "tasks" / "matmul_kb.py",
        [
            reply("Tiled, 64 x 64 output tiles, K in steps of 32.", matmul_triton(64, 64, 32)),
            reply("B's strides, swapped for coalescing.", matmul_triton(64, 64, 32, transposed_b=True)),
            reply("Taller tiles: 128 x 64.", matmul_triton(128, 64, 32, syntax_error=True)),
            NO_CODE,
            reply("128 x 64 tiles for more reuse.", matmul_triton(128, 64, 32)),
            reply("64 x 64, the K loop one tile shorter.", matmul_triton(64, 64, 32, short_k=True)),
            reply("Wider tiles: 64 x 128.", matmul_triton(64, 128, 32, syntax_error=True)),
            NO_CODE,
        ],
    ),
}


def lease_holds(since: float) -> list[dict]:
    holds = []
    for f in sorted(lock_root().glob("gpu-*.log")):
        for line in f.read_text().splitlines():
            try:
                h = json.loads(line)
            except ValueError:
                continue
            if h.get("got", 0) >= since:
                holds.append(h)
    return sorted(holds, key=lambda h: h["got"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where the sessions go (default: a temporary folder)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated, of " + ", ".join(TASKS))
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kernelfix-search-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows = []
    for name in args.tasks.split(","):
        task, lines = TASKS[name]
        replay = out / f"{name}.jsonl"
        replay.write_text("".join(json.dumps(x) + "\n" for x in lines))
        agent = AgentConfig(width=4, keep=2, max_turns=2, target_speedup=100.0, shape_block=False)
        session = Session.create(
            out / name,
            task_path=task,
            model=ReplayModel(replay),
            agent=agent,
            judge_config=JudgeConfig(device=args.device, profile=False),
            on_event=HeadlessReporter(),
        )
        started = time.time()
        session.run()
        traj = read_trajectory(session.store.path)
        for r in traj.rounds:
            cats = [t.verdict.category.value for t in traj.turns if t.round == r.round]
            rows.append((name, r, cats))
        o = traj.outcome
        best = (
            "none correct"
            if o.best_turn is None
            else f"best turn {o.best_turn}, "
            + ("untimed" if o.best_speedup_eager is None else f"{o.best_speedup_eager:.2f}x eager")
        )
        print(f"{name}: {len(traj.turns)} candidates in {time.time() - started:.1f} s; {best}", flush=True)

    print("\n| task | round | candidates | wall s | sum of verdict times s | sum / wall | verdicts |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r, cats in rows:
        ratio = r.judge_s / r.wall_s if r.wall_s else float("nan")
        verdicts = ", ".join(f"{c} x{cats.count(c)}" for c in dict.fromkeys(cats))
        print(f"| {name} | {r.round} | {len(r.slots)} | {r.wall_s:.1f} | {r.judge_s:.1f} | {ratio:.2f} | {verdicts} |")
    holds = lease_holds(t0)
    if holds:
        overlaps = sum(b["got"] < a["released"] for a, b in zip(holds, holds[1:]))
        print(
            f"\nGPU lease: {len(holds)} GPU stages, {overlaps} overlapping, held {sum(h['released'] - h['got'] for h in holds):.1f} s, "
            f"waited {sum(h['got'] - h['asked'] for h in holds):.1f} s"
        )
    print(f"total {time.time() - t0:.0f} s; sessions in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
