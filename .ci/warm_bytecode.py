"""Write the bytecode of what the suite imports once, before it runs (.ci/run).

Sandboxed processes (the judge's workers) cannot write bytecode themselves, and many test processes start at once,
each of which would otherwise compile what it imports first, the same modules side by side. So the modules they import
are compiled here ahead, two processes to the two cores, from a list of files: .ci/bytecode_files.txt, paths relative to
site-packages. Compiling only, without importing, took 20.5 s on the 2-core box where importing the same modules to
write their bytecode took 31 s (torch's and litellm's import work is not needed to write bytecode); compiling all of
site-packages (uv --compile-bytecode) took about 45 s, most of it for modules no test imports.

The list is what two processes import, written by ``python .ci/warm_bytecode.py --refresh``:

- the sandbox side: what the judge's fork servers import (zygote.PRELOAD) and their later imports (LATE_IMPORTS:
  torch.compile's modules);
- the test side: what many test processes and the kernelfix commands they start import (litellm, langgraph,
  textual, ...). What one test file alone imports (datasets, ray, trl) is left to it: it would lengthen this step and
  save nothing.

A list that has aged (a dependency moved its files) costs only speed: a listed file that is gone is skipped, and a
module not listed is compiled by its first importer, as without this step. kernelfix's own modules are compiled
whole, from the source tree.
"""

from __future__ import annotations

import importlib
import os
import py_compile
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIST = HERE / "bytecode_files.txt"
SOURCE = HERE.parent  # kernelfix's packages, installed editable from here
TEST_SIDE = (
    "litellm",
    "langgraph.graph",
    "langgraph.checkpoint.sqlite",
    "textual.app",
    "fastapi",
    "uvicorn",
    "httpx",
    "git",
    "transformers",
    "matplotlib.pyplot",
    "kernelfix.agent.graph",
    "kernelfix.tui.app",
    "kernelfix.serve.app",
)


def main(argv: list[str]) -> int:
    if sys.dont_write_bytecode:
        print("warm_bytecode: PYTHONDONTWRITEBYTECODE is set, nothing to write", file=sys.stderr)
        return 1
    if argv[:1] == ["--imports"]:  # one side's imports, for --refresh: prints the files, relative to site-packages
        return _print_imports(argv[1])
    if argv == ["--refresh"]:
        return _refresh()
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    t0 = time.monotonic()
    site = Path(sysconfig.get_paths()["purelib"])
    listed = [site / line for line in LIST.read_text().split() if line] if LIST.exists() else []
    own = [p for top in _package_dirs() for p in (SOURCE / top).rglob("*.py")]
    files = [str(p) for p in (*listed, *own)]
    workers = max(1, min(os.cpu_count() or 1, 8))
    with ProcessPoolExecutor(workers) as pool:
        done = sum(pool.map(_compile, [files[i::workers] for i in range(workers)]))
    print(
        f"warm_bytecode: {done} files compiled in {time.monotonic() - t0:.1f}s ({len(listed)} listed, {len(own)} of"
        f" kernelfix's; {len(files) - done} gone or not compiling)"
    )
    return 0


def _package_dirs() -> list[str]:
    """The source folders kernelfix's packages come from (pyproject's package-dir), kernel exemplars aside."""
    import tomllib

    dirs = tomllib.loads((SOURCE / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    return sorted(set(dirs))


def _compile(files: list[str]) -> int:
    n = 0
    for f in files:
        try:
            # the bytecode an import would write: beside the source, checked by the source's mtime
            py_compile.compile(f, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            n += 1
        except (OSError, py_compile.PyCompileError, SyntaxError, ValueError):
            pass  # gone since the list was written, or not Python this interpreter compiles: its importer says
    return n


def _refresh() -> int:
    """Import each side in a process of its own and write the files both imported to the list."""
    files: set[str] = set()
    for side in ("sandbox", "test"):
        run = subprocess.run([sys.executable, __file__, "--imports", side], capture_output=True, text=True, check=True)
        files |= set(run.stdout.split())
    LIST.write_text("".join(f"{f}\n" for f in sorted(files)))
    print(f"warm_bytecode: {len(files)} files listed in {LIST.relative_to(SOURCE)}")
    return 0


def _print_imports(side: str) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm must not fetch its prices
    if side == "sandbox":
        from kernelfix.sandbox.zygote import LATE_IMPORTS, PRELOAD

        names = [*PRELOAD, *(m for late in LATE_IMPORTS.values() for m in late)]
    else:
        names = list(TEST_SIDE)
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional library this install lacks: its users do without it too
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path.endswith(".py") and Path(path).resolve().is_relative_to(site):
            print(Path(path).resolve().relative_to(site).as_posix())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
