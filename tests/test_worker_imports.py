"""What a worker imports on its way to its first trial (docs/judge.md, "A cold kernelfix eval"):
the judge's wrappers of a library applied when the library is imported, not before, and the meta
device's counts done without importing torch._dynamo, with the same answers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from kernelfix.tools.import_hooks import after_import

TASKS = Path(__file__).parent / "kernelbench" / "level1"


def test_a_wrapper_runs_when_its_module_is_imported_and_at_once_when_it_was(tmp_path, monkeypatch):
    (tmp_path / "kf_hooked_pkg").mkdir()
    (tmp_path / "kf_hooked_pkg" / "__init__.py").write_text("")
    (tmp_path / "kf_hooked_pkg" / "lib.py").write_text("def build():\n    return 'stock'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def wrap(mod) -> None:
        seen.append(mod.__name__)
        mod.build = lambda: "wrapped"

    after_import("kf_hooked_pkg.lib", wrap)
    assert seen == [], "not imported yet: nothing to wrap"
    from kf_hooked_pkg import lib  # as a candidate would

    assert seen == ["kf_hooked_pkg.lib"] and lib.build() == "wrapped"
    assert type(lib.__spec__.loader).__name__ == "SourceFileLoader", "the module keeps its own loader"
    after_import("kf_hooked_pkg.lib", lambda mod: seen.append("again"))  # imported already: at once
    assert seen == ["kf_hooked_pkg.lib", "again"]
    sys.modules.pop("kf_hooked_pkg.lib", None)
    sys.modules.pop("kf_hooked_pkg", None)


COUNT = textwrap.dedent(r"""
    import importlib.util, json, sys
    import torch
    from kernelfix.tools import task_size

    def load(path):
        spec = importlib.util.spec_from_file_location("task", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    tasks = [load(p) for p in sys.argv[1:]]
    def counts():
        return [[s.model_dump() if s else None for s in [task_size.on_meta(t)]] + [task_size.flops_on_meta(t)] for t in tasks]
    without = counts()
    imported = "torch._dynamo" in sys.modules
    import torch._dynamo
    print(json.dumps({"without": without, "dynamo_imported": imported, "with": counts()}))
""")


def test_the_meta_counts_need_no_dynamo_and_give_the_same_sizes_and_flops():
    """torch's meta-device decompositions import torch._dynamo at their first call (1-3 s on the
    reference's way to its first trial); the counts run without it, then with it, alike."""
    paths = [
        TASKS / "50_conv_standard_2D__square_input__square_kernel.py",
        TASKS / "88_MinGPTNewGelu.py",
        TASKS / "23_Softmax.py",
    ]
    out = subprocess.run([sys.executable, "-c", COUNT, *map(str, paths)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["dynamo_imported"] is False
    assert got["without"] == got["with"]
    conv_size, conv_flops = got["with"][0]
    assert conv_size["input_bytes"] > 0 and conv_flops > 0, "a conv's size and FLOPs are counted"
