"""kernelfix's extension builds: same results as torch's, cached across processes, safe under concurrency.

Most tests build tiny extensions without the torch headers (``no_implicit_headers``)
in fresh processes (tests/build_probe.py; several builds in order in one, each as a
fresh process would build it, where a test's claim is not about processes), through
the same hooks the judge's child installs; they take seconds. The tests marked ``torch_build`` compile against the torch headers and
the ``nvcc`` ones run nvcc.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelfix.sandbox import ChildOutcome
from kernelfix.tools.classify import classify
from kernelfix.tools.compile import host_pch, ninja_file, nvcc_pipeline
from kernelfix.tools.compile.store import Store
from kernelfix.tools.verdict import Category

PROBE = Path(__file__).parent / "build_probe.py"
HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()

ANSWER = 'extern "C" int kf_answer() { return 42; }\n'
# <regex> makes the TU take a second or two: long enough for concurrent builds to overlap.
SLOW_ANSWER = (
    '#include <regex>\nextern "C" int kf_answer() { return std::regex_match("42", std::regex("[0-9]+")) ? 42 : 0; }\n'
)


def _spec(
    tmp: Path,
    *,
    kwargs: dict,
    name: str = "p",
    options: dict | None = None,
    call: str = "load_inline",
    go_file: Path | None = None,
    write: dict[Path, str] | None = None,
) -> dict:
    """One build for a probe: in its own build root, with ``write``'s files written just before it."""
    return {
        "build_root": str(tmp / f"build-{name}"),
        "device": "cpu",
        "options": options or {},
        "call": call,
        "kwargs": kwargs,
        "symbol": "kf_answer",
        "go_file": str(go_file) if go_file else None,
        "ready_file": str(tmp / f"ready-{name}") if go_file else None,
        "write": {str(path): text for path, text in (write or {}).items()},
    }


def _probe(tmp: Path, cache: Path, *, start: bool = False, **build):
    """One build in a fresh process (``start``: the running probe, for ``_result``)."""
    proc = _start(tmp, cache, [_spec(tmp, **build)], build.get("name", "p"))
    if start:
        return proc
    return _result(proc)[0]


def _probes(tmp: Path, cache: Path, builds: list[dict], name: str = "batch") -> list[dict]:
    """Several builds (``_spec``'s), in order, in one fresh process: each as a fresh process would build it, with
    nothing from the builds before it but the files they left (the build cache among them; see build_probe.py)."""
    return _result(_start(tmp, cache, builds, name))


def _start(tmp: Path, cache: Path, builds: list[dict], name: str) -> subprocess.Popen:
    spec_path = tmp / f"spec-{name}.json"
    spec_path.write_text(json.dumps(builds))
    env = {**os.environ, "KERNELFIX_CACHE": str(cache)}
    return subprocess.Popen(
        [sys.executable, str(PROBE), str(spec_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _result(proc: subprocess.Popen) -> list[dict]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _inline(source: str = ANSWER, name: str = "kf_probe_ext", **extra) -> dict:
    return {"name": name, "cpp_sources": source, "no_implicit_headers": True, "is_python_module": False, **extra}


def test_identical_extension_is_built_once_across_processes(tmp_path):
    cache = tmp_path / "cache"
    first = _probe(tmp_path, cache, kwargs=_inline(), name="a")
    assert first["error"] is None and first["value"] == 42
    assert [r["cached"] for r in first["records"]] == [False]
    assert first["records"][0]["objects_built"] == 1
    second = _probe(tmp_path, cache, kwargs=_inline(), name="b")  # another process, another build directory
    assert second["error"] is None and second["value"] == 42
    assert [r["cached"] for r in second["records"]] == [True]
    # the cached library was loaded from the second evaluation's own directory, under the same name
    assert (tmp_path / "build-b" / "kf_probe_ext" / "kf_probe_ext.so").is_file()


@pytest.mark.slow
def test_damaged_cache_entry_is_rebuilt_and_replaced(tmp_path):
    cache = tmp_path / "cache"
    _probe(tmp_path, cache, kwargs=_inline(), name="a")
    (so,) = (cache / "build" / "ext").glob("*/*/kf_probe_ext.so")
    so.write_bytes(b"not a library")  # a torn copy, or a candidate scribbling on the cache
    rebuilt = _probe(tmp_path, cache, kwargs=_inline(), name="b")
    assert rebuilt["value"] == 42 and not rebuilt["records"][0]["cached"]
    again = _probe(tmp_path, cache, kwargs=_inline(), name="c")
    assert again["value"] == 42 and again["records"][0]["cached"]


def test_any_change_that_matters_misses_the_cache(tmp_path):
    # One process builds them all, in order: a miss is a miss of the cache on disk, whichever process looks (the
    # probe leaves each build nothing else of the ones before it); the last build, unchanged, shows it still hits.
    cache = tmp_path / "cache"
    # a header in a user include directory is part of the key, though no flag changed
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "answer.h").write_text("#define KF_ANSWER 7\n")
    src = '#include "answer.h"\nextern "C" int kf_answer() { return KF_ANSWER; }\n'
    _, changed_source, changed_flags, changed_name, with_header, header_changed, unchanged = _probes(
        tmp_path,
        cache,
        [
            _spec(tmp_path, kwargs=_inline(), name="a"),
            _spec(tmp_path, kwargs=_inline(ANSWER.replace("42", "43")), name="b"),
            _spec(tmp_path, kwargs=_inline(extra_cflags=["-O2"]), name="c"),
            _spec(tmp_path, kwargs=_inline(name="kf_other_ext"), name="d"),
            _spec(tmp_path, kwargs=_inline(src, extra_include_paths=[str(inc)]), name="e"),
            _spec(
                tmp_path,
                kwargs=_inline(src, extra_include_paths=[str(inc)]),
                name="f",
                write={inc / "answer.h": "#define KF_ANSWER 8\n"},
            ),
            _spec(tmp_path, kwargs=_inline(), name="g"),
        ],
    )
    assert changed_source["value"] == 43 and not changed_source["records"][0]["cached"]
    assert changed_flags["value"] == 42 and not changed_flags["records"][0]["cached"]
    assert changed_name["value"] == 42 and not changed_name["records"][0]["cached"]
    assert with_header["value"] == 7
    assert header_changed["value"] == 8 and not header_changed["records"][0]["cached"]
    assert unchanged["value"] == 42 and unchanged["records"][0]["cached"]


@pytest.mark.slow
def test_concurrent_identical_builds_compile_once(tmp_path):
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    procs = [
        _probe(tmp_path, cache, kwargs=_inline(SLOW_ANSWER), name=f"c{i}", go_file=go, start=True) for i in range(3)
    ]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all((tmp_path / f"ready-c{i}").exists() for i in range(3)):
        assert all(p.poll() is None for p in procs), "a probe died before building"
        time.sleep(0.05)
    go.write_text("go")
    results = [_result(p)[0] for p in procs]
    assert all(r["error"] is None and r["value"] == 42 for r in results), results
    cached = sorted(r["records"][0]["cached"] for r in results)
    assert cached == [False, True, True], results
    entries = [p for p in (cache / "build" / "ext").glob("*/*") if p.is_dir()]
    assert len(entries) == 1


def test_unchanged_translation_unit_is_reused(tmp_path):
    cache = tmp_path / "cache"
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text('extern "C" int kf_a() { return 40; }\n')
    (src / "b.cpp").write_text('extern "C" int kf_a();\nextern "C" int kf_answer() { return kf_a() + 2; }\n')

    def load(name: str, write: dict[Path, str] | None = None) -> dict:
        kwargs = {
            "name": "kf_two",
            "sources": [str(src / "a.cpp"), str(src / "b.cpp")],
            "is_python_module": False,
            "build_directory": str(tmp_path / f"bd-{name}"),
        }
        Path(kwargs["build_directory"]).mkdir()
        return _spec(tmp_path, kwargs=kwargs, name=name, call="load", write=write)

    # Both builds in one process (see test_any_change_that_matters_misses_the_cache): the object reused is the one the
    # first left in the cache on disk. b.cpp is edited between them.
    edited_b = 'extern "C" int kf_a();\nextern "C" int kf_answer() { return kf_a() + 3; }\n'
    first, second = _probes(tmp_path, cache, [load("1"), load("2", write={src / "b.cpp": edited_b})])
    assert first["value"] == 42 and first["records"][0]["objects_built"] == 2
    rec = second["records"][0]
    assert second["value"] == 43 and not rec["cached"]
    assert (rec["objects_built"], rec["objects_reused"]) == (1, 1), rec


def test_stock_options_leave_torch_alone(tmp_path):
    stock = {"cache": False, "object_cache": False, "host_pch": False, "split_nvcc": False, "local_arch": False}
    r = _probe(tmp_path, tmp_path / "cache", kwargs=_inline(), options=stock)
    assert r["value"] == 42 and r["records"] == []  # torch's own ninja ran
    assert (tmp_path / "build-p" / "kf_probe_ext" / ".ninja_log").exists()


def test_failed_build_reads_like_ninja_and_is_classified(tmp_path):
    r = _probe(tmp_path, tmp_path / "cache", kwargs=_inline('extern "C" int kf_answer() { return 42 }\n'))
    assert r["value"] is None and "Error building extension 'kf_probe_ext'" in r["error"]
    assert "FAILED: main.o" in r["error"] and "ninja: build stopped" in r["error"]
    outcome = ChildOutcome(
        argv=[],
        returncode=3,
        wall_s=1.0,
        messages=[
            {"type": "hello"},
            {
                "type": "error",
                "kind": "exception",
                "phase": "import_candidate",
                "exc_type": "RuntimeError",
                "message": r["error"],
            },
        ],
    )
    f = classify("compile", outcome, timeout_s=60)
    assert f.category == Category.HOST_CXX
    assert any("error: expected" in line and "main.cpp:1:" in line for line in f.details), f.details
    assert r["records"] and not r["records"][0]["cached"]


def test_ninja_file_reader_expands_torch_commands():
    text = (
        "ninja_required_version = 1.3\ncxx = c++\ncflags = -DX=1 -fPIC\npost_cflags = \nldflags = -shared\n\n"
        "rule compile\n  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags\n  depfile = $out.d\n  deps = gcc\n\n"
        "rule link\n  command = $cxx $in $ldflags -o $out\n\n"
        "build main.o: compile /tmp/a$ dir/main.cpp\n\nbuild e.so: link main.o\n\ndefault e.so\n"
    )
    edges, default = ninja_file.parse(text)
    assert default == ["e.so"]
    assert edges[0].inputs == ["/tmp/a dir/main.cpp"]
    assert edges[0].command == "c++ -MMD -MF main.o.d -DX=1 -fPIC -c /tmp/a dir/main.cpp -o main.o "
    assert edges[1].command == "c++ main.o -shared -o e.so"
    assert ninja_file.parse(text + "pool big\n  depth = 1\n") is None


def test_store_publish_is_all_or_nothing(tmp_path):
    store = Store(tmp_path / "s")

    def broken(d: Path) -> None:
        (d / "half").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError):
        store.publish("k" * 64, broken)
    assert store.get("k" * 64) is None
    first = store.publish("k" * 64, lambda d: (d / "f").write_text("1"))
    again = store.publish("k" * 64, lambda d: (d / "f").write_text("2"))  # lost the race: the first entry stays
    assert first == again and (first / "f").read_text() == "1"


# --------------------------------------------------------------------------- nvcc, torch headers

_TMP_NAMES = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")

BARE_CU = r"""
#include <cuda_runtime.h>
#include <cstdint>
template <typename T> __device__ T twice(T x) { return x + x; }
template <typename T> __global__ void k(const T* x, T* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = twice(x[i]);
}
extern "C" int kf_launch(const float* x, float* y, int64_t n) {
    k<float><<<(n + 255) / 256, 256>>>(x, y, n);
    return (int)cudaGetLastError();
}
"""


def _nvcc() -> str:
    return shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


@pytest.mark.nvcc
@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc")
def test_split_nvcc_object_matches_plain_nvcc(tmp_path):
    (tmp_path / "k.cu").write_text(BARE_CU)
    flags = [
        "-D__CUDA_NO_HALF_OPERATORS__",
        "--expt-relaxed-constexpr",
        "-gencode=arch=compute_90,code=sm_90",
        "--compiler-options",
        "-fPIC",
        "-std=c++17",
    ]
    plain = subprocess.run(
        [_nvcc(), *flags, "-c", str(tmp_path / "k.cu"), "-o", str(tmp_path / "plain.o")], capture_output=True, text=True
    )
    assert plain.returncode == 0, plain.stderr
    r = nvcc_pipeline.compile_split(
        [
            _nvcc(),
            "-MD",
            "-MF",
            str(tmp_path / "k.d"),
            *flags,
            "-c",
            str(tmp_path / "k.cu"),
            "-o",
            str(tmp_path / "split.o"),
        ],
        tmp_path,
        dict(os.environ),
    )
    assert r.ok and r.mode == "split", (r.note, r.output)
    assert {s.tool for s in r.steps} >= {"pre_host", "cudafe", "pre_dev", "cicc", "ptxas", "fatbinary", "host_cc"}
    # nvcc names its temp files after its pid, and that name reaches one static-init symbol: mask it
    assert _TMP_NAMES.sub(b"tmp", (tmp_path / "split.o").read_bytes()) == _TMP_NAMES.sub(
        b"tmp", (tmp_path / "plain.o").read_bytes()
    )


@pytest.mark.nvcc
@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc")
def test_split_nvcc_errors_read_like_nvcc(tmp_path):
    (tmp_path / "bad.cu").write_text(BARE_CU.replace("return (int)cudaGetLastError();", "return undefined_thing;"))
    argv = [
        _nvcc(),
        "-gencode=arch=compute_90,code=sm_90",
        "-c",
        str(tmp_path / "bad.cu"),
        "-o",
        str(tmp_path / "bad.o"),
    ]
    plain = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
    r = nvcc_pipeline.compile_split(argv, tmp_path, dict(os.environ))
    assert plain.returncode != 0 and not r.ok
    assert "undefined_thing" in r.output
    assert r.output.strip() == (plain.stdout + plain.stderr).strip()


_BINDING_BODY = (
    'torch::Tensor twice(torch::Tensor x) { TORCH_CHECK(x.numel() > 0, "empty"); return x + x; }\n'
    "#define KF_STR2(x) #x\n#define KF_STR(x) KF_STR2(x)\n"
    'extern "C" const char kf_where[] = "where:" __FILE__ ":" KF_STR(__LINE__);\n'  # the TU's line numbers, readable in the object
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def("twice", torch::wrap_pybind_function(twice), "twice");\n}'
)
# main.cpp as load_inline writes it: torch's own first line, and (no_implicit_headers) the
# candidate's cpp_sources as a model writes them, a raw string opened on the line before.
BINDING_TUS = {
    "implicit": "#include <torch/extension.h>\n" + _BINDING_BODY,
    "no_implicit_headers": "\n// the torch-facing wrapper\n/* served precompiled */\n#include <torch/extension.h>  // first\n\n"
    + _BINDING_BODY,
}


@pytest.mark.parametrize(
    "text,applies",
    [
        ("#include <torch/extension.h>\nint f();", True),
        ("\n\n  // binding\n/* a\n b */\n#include <torch/extension.h> // x\nint f();", True),
        ("#  include <torch/extension.h>", True),
        (
            "#define TORCH_ASSERT_ONLY_METHOD_OPERATORS\n#include <torch/extension.h>\n",
            False,
        ),  # changes what the headers mean
        ("#include <cuda_runtime.h>\n#include <torch/extension.h>\n", False),
        ("// continued \\\n#include <torch/extension.h>\n", False),  # the include is part of the comment
        ('#include "torch/extension.h"\n', False),  # quotes search the build directory first
        ("#include <torch/extension.h> /* x */ int a;\n", False),
        ("int f();\n#include <torch/extension.h>\n", False),
    ],
)
def test_host_pch_applies_only_where_the_include_comes_first(tmp_path, text, applies):
    assert host_pch.begins_with_torch_extension(text) is applies
    if not applies:  # and nothing is built for a TU it does not apply to
        (tmp_path / "main.cpp").write_text(text)
        store = Store(tmp_path / "pch")
        assert host_pch.include_args("c++ -fPIC -c main.cpp -o main.o", tmp_path / "main.cpp", store) is None
        assert not any(p for p in store.root.iterdir() if p.name != ".locks")


@pytest.mark.slow
@pytest.mark.torch_build
def test_host_pch_gives_the_same_object(tmp_path):
    """Both layouts of the binding TU (torch's implicit first line, and the candidate's own include after blank lines
    and comments) take one PCH; the second, compiled with it, is byte-identical to its plain compile and keeps its own
    line numbers (``__LINE__``, read from the object). The implicit layout's compile with the PCH is the corpus's C++
    candidate's (test_corpus): one compile with the PCH and one plain are the test's cost, not four."""
    import torch.utils.cpp_extension as ce

    bd = tmp_path / "bd"
    bd.mkdir()
    inc = " ".join(
        f"-isystem {shlex.quote(p)}" for p in [*ce.include_paths(), __import__("sysconfig").get_path("include")]
    )
    store = Store(Path(os.environ["KERNELFIX_CACHE"]) / "build" / "pch")

    def base_for(tag: str) -> str:
        return f"c++ -MMD -MF {tag}.o.d -DTORCH_EXTENSION_NAME=kf_twice -DTORCH_API_INCLUDE_EXTENSION_H {inc} -fPIC -std=c++20 -c {bd / f'{tag}.cpp'} -o"

    uses = []
    for tag, text in BINDING_TUS.items():
        src = bd / f"{tag}.cpp"
        src.write_text(text)
        base = base_for(tag)
        use = host_pch.include_args(f"{base} {tag}-pch.o", src, store)
        assert use and use.args[0] == "-include" and Path(use.args[1] + ".gch").is_file()
        uses.append(use)
        # another extension name: the same PCH serves it, already built
        again = host_pch.include_args(f"{base.replace('kf_twice', 'kf_other')} o.o", src, store)
        assert again.args == use.args and again.made_seconds is None
    tag, use = "no_implicit_headers", uses[1]
    base, src = base_for(tag), bd / f"{tag}.cpp"
    used = subprocess.run(
        f"{base} {tag}-pch.o {shlex.join(use.args)} -H", shell=True, cwd=bd, capture_output=True, text=True
    )
    assert used.returncode == 0, used.stderr[-2000:]
    assert f"! {use.args[1]}.gch" in used.stderr, "gcc did not use the PCH"
    line = next(i for i, t in enumerate(BINDING_TUS[tag].splitlines(), 1) if "kf_where" in t)
    assert f"where:{src}:{line}".encode() in (bd / f"{tag}-pch.o").read_bytes(), "line numbers moved under the PCH"
    plain = subprocess.run(f"{base} {tag}-plain.o", shell=True, cwd=bd, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert (bd / f"{tag}-pch.o").read_bytes() == (bd / f"{tag}-plain.o").read_bytes()
    assert uses[0].args == uses[1].args  # one PCH for both layouts
    # Include directories the header reads nothing from (a CUDA build's toolkit and stub headers) take the same PCH,
    # already built; a directory that shadows a header it reads changes its text, and so its PCH.
    extra = tmp_path / "unrelated"
    (extra / "sub").mkdir(parents=True)
    (extra / "sub" / "unrelated.h").write_text("#error never read\n")
    src = bd / "implicit.cpp"
    cuda_like = base_for("implicit").replace(" -fPIC", f" -I {extra} -isystem {extra / 'sub'} -fPIC")
    shared = host_pch.include_args(f"{cuda_like} o.o", src, store)
    assert shared.args == uses[0].args and shared.made_seconds is None
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "Python.h").write_text("#error shadowed\n")
    flags = ["c++", "-DTORCH_API_INCLUDE_EXTENSION_H", *shlex.split(inc), "-fPIC", "-std=c++20"]
    assert host_pch.pch_key(flags, store) == host_pch.pch_key([*flags[:2], "-I", str(extra), *flags[2:]], store)
    assert host_pch.pch_key(flags, store) != host_pch.pch_key([*flags[:2], "-I", str(shadow), *flags[2:]], store)


@pytest.mark.slow
@pytest.mark.torch_build
def test_judge_reports_a_cached_compile(judges):
    """A resubmitted candidate is not compiled again, and the verdict says so."""
    source = (Path(__file__).parent / "corpus" / "candidates" / "cpp_relu_ok.py").read_text()
    judge = judges("relu", "cpu")
    first = judge.evaluate(source, filename="cpp_relu_ok.py")
    second = judge.evaluate(source, filename="cpp_relu_ok.py")
    assert first.ok and second.ok, (first.message, second.message)
    assert [e.name for e in second.compile.extensions] == ["relu_cpp_ext"]
    assert second.compile.cached and second.compile.extensions[0].cached
    if not first.compile.cached:  # unless an earlier test built it in this session
        assert first.compile.extensions[0].objects_built == 1
