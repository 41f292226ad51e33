"""Type-check kernelfix with mypy, as the packages import: `python .ci/typecheck.py [MYPY ARGS]`.

The source folders install under one import name (pyproject.toml's package-dir: tools/ is kernelfix.tools), which mypy
cannot read from an editable install. So this lays the folders out as they import, as symbolic links in a temporary
directory, and runs `mypy -p kernelfix` there with pyproject.toml's [tool.mypy] settings. Exits with mypy's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def layout(into: Path) -> Path:
    """``into``/kernelfix/... linked to the repository's folders by their import names."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top = into / "kernelfix"
    top.mkdir(parents=True)
    for entry in (ROOT / dirs["kernelfix"]).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for package, folder in dirs.items():
        if package != "kernelfix":
            link = into.joinpath(*package.split("."))
            if link.is_symlink():
                link.unlink()
            link.symlink_to(ROOT / folder)
    return into


def main(argv: list[str]) -> int:
    cache = Path(os.environ.get("MYPY_CACHE_DIR", ROOT / ".mypy_cache"))
    with tempfile.TemporaryDirectory(prefix="kernelfix-types-") as tmp:
        where = layout(Path(tmp))
        cmd = [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "-p",
            "kernelfix",
            *argv,
        ]
        return subprocess.run(cmd, cwd=where).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
