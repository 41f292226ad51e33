"""The knowledge base (kernelfix.tools.feedback.knowledge) and the GPU spec table (kernelfix.tools.gpu.specs).

Every note parses and has its parts; every finding kind has a note; pick() and render() behave; every
Triton exemplar and naive version is correct in Triton's interpreter on small inputs (one subprocess
with TRITON_INTERPRET=1, so this process's triton is untouched); every CUDA one's device code
compiles with nvcc (marked ``nvcc``). Timings on an H100: tests/test_knowledge_gpu.py.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelfix.prompts.blocks import gpu_block
from kernelfix.tools.feedback import knowledge
from kernelfix.tools.feedback.knowledge import (
    FINDINGS,
    OPS,
    PARTS,
    Note,
    exemplar_source,
    notes,
    pick,
    render,
    resource,
)
from kernelfix.tools.gpu import specs as gpu_specs
from kernelfix.tools.legality import static_checks

NOTES = notes()
BY_SLUG = {n.slug: n for n in NOTES}
KNOWLEDGE = Path(knowledge.__file__).parents[2] / "prompts" / "knowledge"  # the notes are prompts/ package data


def _kernel_files() -> list[tuple[str, str, str]]:
    """(note slug, which, path relative to the knowledge folder) for every exemplar and naive version."""
    return [(n.slug, which, getattr(n, which)) for n in NOTES for which in ("exemplar", "naive") if getattr(n, which)]


def _backend(rel: str) -> str:
    return "cuda" if "load_inline" in resource(rel).read_text() else "triton"


# --- the notes ------------------------------------------------------------------------------


def test_there_are_notes_for_every_named_technique():
    wanted = {
        "coalescing",
        "smem_tiling_padding",
        "tensor_cores",
        "split_k",
        "online_softmax_welford",
        "warp_reductions",
        "persistent_grid",
        "epilogue_fusion",
        "occupancy",
        "launch_overhead",
        "hopper_tma_wgmma",
        "memory_bound",
        "latency_bound",
        "contended_atomics",
        "compute_pipe",
    }
    assert wanted <= set(BY_SLUG), wanted - set(BY_SLUG)


@pytest.mark.parametrize("note", NOTES, ids=lambda n: n.slug)
def test_note_is_complete(note: Note):
    assert note.title and note.findings and note.ops
    kinds = {
        f.split(":", 1)[0] for f in note.findings
    }  # "contended_atomics:counter": a kind and the use the source shows
    assert kinds <= set(FINDINGS), kinds - set(FINDINGS)
    assert set(note.ops) <= set(OPS), set(note.ops) - set(OPS)
    assert note.backend in ("triton", "cuda")
    positions = [note.body.find(part) for part in PARTS]
    assert all(p >= 0 for p in positions), f"{note.slug}: missing {[p for p, i in zip(PARTS, positions) if i < 0]}"
    assert positions == sorted(positions), f"{note.slug}: parts out of order"
    assert len(note.body) <= 1600, f"{note.slug}: body of {len(note.body)} characters"
    for rel in (note.exemplar, note.naive, note.task):
        assert rel and resource(rel).is_file(), f"{note.slug}: no file {rel}"
    assert note.claim is not None and note.claim > 1.0
    assert (
        note.claim_eager is not None and note.claim_eager > 0
    )  # held against eager on the GPU (tests/test_knowledge_gpu.py)
    assert _backend(note.exemplar) == note.backend
    assert exemplar_source(note) == resource(note.exemplar).read_text()


def test_every_finding_kind_has_a_note():
    covered = {f for n in NOTES for f in n.findings}
    assert set(FINDINGS) <= covered, set(FINDINGS) - covered


def test_the_knowledge_files_ship_with_the_package():
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith('"kernelfix.prompts" = ['))
    for pattern in ("knowledge/*.md", "knowledge/exemplars/*.py", "knowledge/exemplars/tasks/*.py"):
        assert f'"{pattern}"' in line
    # every file a note names sits where those patterns reach
    for n in NOTES:
        for rel in (n.exemplar, n.naive, n.task):
            assert rel.count("/") in (1, 2) and rel.startswith("exemplars/") and rel.endswith(".py")


@pytest.mark.parametrize("slug,which,rel", _kernel_files(), ids=[f"{s}-{w}" for s, w, _ in _kernel_files()])
def test_kernels_pass_the_static_checks(slug, which, rel):
    """No torch compute, fallbacks, streams or libraries in any exemplar or naive version."""
    findings = static_checks.check(resource(rel).read_text())
    assert not [f for f in findings if f.severity == "error" or f.rule == "torch_op"], findings
    source = resource(rel).read_text()
    assert "class ModelNew(nn.Module)" in source


def test_cuda_extension_names_are_unique():
    names = []
    for _, _, rel in _kernel_files():
        tree = ast.parse(resource(rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_inline":
                names += [k.value.value for k in node.keywords if k.arg == "name"]
    assert names and len(names) == len(set(names)), names


# --- pick and render ----------------------------------------------------------------------------


def test_pick_takes_the_note_made_for_the_finding_of_issue_32():
    assert pick(["contended_atomics"])[0].slug == "contended_atomics"
    assert pick(["compute_pipe"], ops=["elementwise"])[0].slug == "compute_pipe"
    assert pick(["mma_sync_on_hopper"], ops=["matmul"])[0].slug == "hopper_tma_wgmma"
    assert pick(["host_sync"], ops=["elementwise"])[0].slug == "launch_overhead"
    assert "reaches 0.6x its speed" in render(
        [BY_SLUG["tensor_cores"]], max_chars=20000
    )  # said where eager stays faster


def test_pick_takes_the_note_made_for_the_finding():
    assert pick(["uncoalesced"])[0].slug == "coalescing"
    assert pick(["bank_conflicts"])[0].slug == "smem_tiling_padding"
    assert pick(["launch_bound"], ops=["elementwise"])[0].slug == "launch_overhead"
    assert pick(["tensor_cores_unused"], ops=["matmul"])[0].slug == "tensor_cores"
    assert pick(["divergence"])[0].slug == "warp_reductions"
    assert pick(["local_memory"])[0].slug == "occupancy"
    assert pick(["memory_bound"], ops=["elementwise"])[0].slug == "memory_bound"


def test_pick_breaks_ties_by_the_tasks_ops():
    assert pick(["small_grid"], ops=["matmul"])[0].slug == "split_k"
    assert pick(["small_grid"], ops=["reduction"])[0].slug == "latency_bound"
    assert pick(["tail_wave"], ops=["elementwise"])[0].slug == "persistent_grid"
    assert pick(["tail_wave"], ops=["matmul"])[0].slug == "split_k"
    assert pick(["memory_bound"], ops=["softmax"])[0].slug == "online_softmax_welford"
    assert pick(["memory_bound"], ops=["matmul", "fused"])[0].slug == "epilogue_fusion"


def test_pick_keeps_the_findings_order_and_respects_k_and_exclude():
    got = [n.slug for n in pick(["launch_bound", "uncoalesced"], k=2)]
    assert got == ["launch_overhead", "coalescing"]  # the best of each finding before any runner-up
    assert len(pick(["latency_bound", "memory_bound", "small_grid"], k=1)) == 1
    assert len(pick(["latency_bound", "memory_bound", "small_grid"], k=10)) > 3
    assert pick(["uncoalesced", "bank_conflicts"], k=5, exclude=["coalescing"])[0].slug == "smem_tiling_padding"
    assert all(n.slug != "coalescing" for n in pick(["uncoalesced", "bank_conflicts"], k=5, exclude=["coalescing"]))
    assert pick([]) == [] and pick(["no_such_finding"]) == [] and pick(["uncoalesced"], k=0) == []
    slugs = [n.slug for n in pick(list(FINDINGS), k=50)]
    assert len(slugs) == len(set(slugs))


def test_render_shows_titles_bodies_and_code_within_the_limit():
    chosen = pick(["uncoalesced", "memory_bound"], ops=["elementwise"], k=2)
    text = render(chosen, max_chars=20000)
    for n in chosen:
        assert n.title in text and n.body.splitlines()[0] in text
        assert exemplar_source(n).strip().splitlines()[-1] in text
    assert text.count("```python") == 2
    assert "```python" not in render(chosen, with_code=False)
    for limit in (200, 1500, 3000, 6000, 9000):
        assert len(render(pick(list(FINDINGS), k=5), max_chars=limit)) <= limit


def test_render_drops_the_code_of_later_notes_first():
    first, second = pick(["uncoalesced", "memory_bound"], ops=["elementwise"], k=2)
    full_first = render([first])
    limit = len(full_first) + len(render([second], with_code=False)) + 50
    text = render([first, second], max_chars=limit)
    assert text.count("```python") == 1 and exemplar_source(first).strip().splitlines()[-1] in text
    assert second.title in text


# --- the kernels: Triton in the interpreter, CUDA through nvcc -------------------------------------

# Small inputs per task (the tasks' own sizes are for the GPU), chosen to leave partial blocks.
_INTERPRET = r"""
import importlib.util, json, sys, traceback
import torch
from kernelfix.tools.workers.candidate.interpreter import patch_once
patch_once()  # the interpreter as the candidate worker runs it on a machine without a GPU
KN = sys.argv[1]
g = torch.Generator().manual_seed(0)
def rn(*s, dtype=torch.float32):
    return torch.randn(*s, generator=g).to(dtype)
SMALL = {
    "col_affine": lambda: [rn(37, 600), rn(600), rn(600)],
    "matmul_long_k_fp32": lambda: [rn(64, 5000), rn(5000, 72) / 64],
    "softmax_wide": lambda: [rn(5, 9000)],
    "row_affine": lambda: [rn(7, 5000), rn(7), rn(7)],
    "matmul_fp16_8k": lambda: [rn(100, 64, dtype=torch.float16), rn(64, 72, dtype=torch.float16) / 8],
    "linear_silu_fp16": lambda: [rn(100, 72, dtype=torch.float16), rn(72, 136, dtype=torch.float16) / 8, rn(136, dtype=torch.float16)],
    "residual_relu": lambda: [rn(9, 700), rn(700), rn(700), rn(9, 700)],
    "col_sum": lambda: [rn(1100, 200)],
}
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
for i, (rel, task_rel) in enumerate(json.loads(sys.argv[2])):
    out = {"file": rel}
    try:
        task = load(f"{KN}/{task_rel}", f"task{i}")
        stem = task_rel.rsplit("/", 1)[-1][:-3]
        inputs = SMALL[stem]()
        ref = task.Model(*task.get_init_inputs())(*inputs)
        got = load(f"{KN}/{rel}", f"cand{i}").ModelNew(*task.get_init_inputs())(*[t.clone() for t in inputs])
        tol = 1e-4 if ref.dtype == torch.float32 else 1e-2
        out.update(shape=[list(got.shape), list(ref.shape)], dtype=[str(got.dtype), str(ref.dtype)],
                   max_abs=float((got.float() - ref.float()).abs().max()),
                   ok=got.shape == ref.shape and got.dtype == ref.dtype and bool(torch.allclose(got.float(), ref.float(), atol=tol, rtol=tol)))
    except Exception:
        out.update(ok=False, error=traceback.format_exc()[-3000:])
    print("RESULT " + json.dumps(out), flush=True)
"""

_TRITON = [(slug, which, rel) for slug, which, rel in _kernel_files() if _backend(rel) == "triton"]
_CUDA = [(slug, which, rel) for slug, which, rel in _kernel_files() if _backend(rel) == "cuda"]


@pytest.fixture(scope="module")
def interpreted() -> dict[str, dict]:
    """Every Triton exemplar and naive version run once, in one interpreter subprocess."""
    pairs = [(rel, BY_SLUG[slug].task) for slug, _, rel in _TRITON]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-c", _INTERPRET, str(KNOWLEDGE), json.dumps(pairs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    results = {}
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT ") :])
            results[r["file"]] = r
    assert results, f"the interpreter run printed nothing:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    return results


@pytest.mark.parametrize("slug,which,rel", _TRITON, ids=[f"{s}-{w}" for s, w, _ in _TRITON])
def test_triton_kernel_is_correct_in_the_interpreter(slug, which, rel, interpreted):
    r = interpreted.get(rel)
    assert r is not None, f"{rel}: no result"
    assert r["ok"], f"{slug} {which} ({rel}): {r}"


def _cuda_source(rel: str) -> str:
    tree = ast.parse(resource(rel).read_text())
    strings = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name) and isinstance(n.value.value, str)
    }
    call = next(
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and any(k.arg == "cuda_sources" for k in n.keywords)
    )
    value = next(k.value for k in call.keywords if k.arg == "cuda_sources")
    return strings[value.id] if isinstance(value, ast.Name) else value.value


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True):
        return str(candidate)
    return None


@pytest.fixture(scope="module")
def nvcc_builds(tmp_path_factory) -> dict[str, subprocess.Popen]:
    """Every CUDA file's device code compiling at once (the tests then wait on their own)."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no nvcc here")
    out = tmp_path_factory.mktemp("knowledge-nvcc")
    procs = {}
    for _, _, rel in _CUDA:
        cu = out / (Path(rel).stem + ".cu")
        cu.write_text(_cuda_source(rel))
        assert "torch" not in cu.read_text(), f"{rel}: the .cu must be torch-free (the fast layout)"
        procs[rel] = subprocess.Popen(
            [nvcc, "-arch=sm_90", "-c", str(cu), "-o", str(cu.with_suffix(".o"))],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    return procs


@pytest.mark.nvcc
@pytest.mark.slow  # every CUDA exemplar through nvcc at once (20 CPU-s); on a GPU, test_knowledge_gpu builds and runs them
@pytest.mark.parametrize("slug,which,rel", _CUDA, ids=[f"{s}-{w}" for s, w, _ in _CUDA])
def test_cuda_kernel_compiles(slug, which, rel, nvcc_builds):
    proc = nvcc_builds[rel]
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{slug} {which} ({rel}):\n{output[-3000:]}"
    source = resource(rel).read_text()
    assert "no_implicit_headers=True" in source and "#include <torch/extension.h>" in source


# --- the GPU spec table ---------------------------------------------------------------------------


def test_gpu_lookup_knows_the_h100_and_friends():
    h100 = gpu_specs.lookup("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.sms == 132 and h100.dram_gbps == pytest.approx(3350)
    assert set(h100.peak_tflops) == {"fp64", "fp32", "tf32", "fp16", "bf16"} and h100.source
    assert h100.fp64_rate() == "half" and gpu_specs.lookup("NVIDIA H200").fp64_rate() == "half"
    assert gpu_specs.lookup("NVIDIA L4").fp64_rate() == "1/64 of"  # Ada: the whitepaper's rate
    assert gpu_specs.lookup("NVIDIA H100 PCIe").sms == 114
    assert gpu_specs.lookup("NVIDIA A100-SXM4-80GB").dram_gbps == pytest.approx(2039)
    assert gpu_specs.lookup("NVIDIA A100-SXM4-40GB").dram_gbps == pytest.approx(1555)
    assert gpu_specs.lookup("NVIDIA L4").name == "NVIDIA L4" and gpu_specs.lookup("NVIDIA L40S").sms == 142
    assert gpu_specs.lookup("Tesla V100-SXM2-32GB").sms == 80
    for name in ("NVIDIA H200", "NVIDIA A10G", "NVIDIA GeForce RTX 4090"):
        assert gpu_specs.lookup(name) is not None, name
    assert gpu_specs.lookup("Some Other GPU") is None
    for spec in gpu_specs.TABLE:
        assert spec.sms > 0 and spec.dram_gbps > 0 and spec.l2_bytes > 0 and spec.source.count("http") >= 1
        assert spec.smem_per_block_bytes <= spec.smem_per_sm_bytes and "fp32" in spec.peak_tflops and spec.fp64_rate()


def test_measured_lets_the_driver_win():
    props = {
        "name": "NVIDIA H100 80GB HBM3",
        "multi_processor_count": 66,
        "total_memory": 85e9,
        "L2_cache_size": 40 * 2**20,
        "shared_memory_per_block_optin": 232448,
        "shared_memory_per_multiprocessor": 233472,
        "regs_per_multiprocessor": 65536,
        "max_threads_per_multi_processor": 2048,
        "memory_clock_khz": 2_619_000,
        "memory_bus_width": 5120,
    }
    spec = gpu_specs.measured(props)
    assert spec.sms == 66 and spec.l2_bytes == 40 * 2**20 and spec.smem_per_block_bytes == 232448
    assert spec.dram_gbps == pytest.approx(3352.3, rel=1e-3)  # 2 x 2619 MHz x 640 bytes
    assert spec.peak_tflops["fp16"] == pytest.approx(989.4 / 2, rel=1e-3)  # half the SMs
    only_name = gpu_specs.measured({"name": "NVIDIA H100 80GB HBM3"})
    assert only_name.sms == 132 and only_name.dram_gbps == pytest.approx(3350)
    assert gpu_specs.measured({"name": "Mystery"}) is None
    unknown = gpu_specs.measured({"name": "Mystery", "multi_processor_count": 10, "L2_cache_size": 2**20})
    assert unknown.sms == 10 and unknown.l2_bytes == 2**20 and unknown.peak_tflops == {}
    assert "10 SMs" in gpu_block(unknown)


def test_render_gives_the_numbers_and_the_ridge_point():
    text = gpu_block(gpu_specs.lookup("NVIDIA H100 80GB HBM3"))
    for needle in ("132 SMs", "3350 GB/s", "50 MB", "989.4", "494.7", "66.9", "228 KB", "227 KB", "65536", "255"):
        assert needle in text, needle
    ridge = next(line for line in text.splitlines() if "Ridge" in line)
    assert "fp32 20" in ridge and "fp16 tensor 295" in ridge
    assert len(text) < 600
