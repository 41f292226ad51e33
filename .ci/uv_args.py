"""uv's arguments for installing what pip would: pip's configured indexes, find-links and
constraints (its config files and PIP_* variables, as `pip config list` reports them), and
pip's rule of taking the best version across all indexes. Prints them shell-quoted."""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip setting -> uv option; settings that do not change what gets installed (cert, timeout) are left out
OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def main() -> int:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, list[str]] = {}
    from_env: set[str] = set()
    for line in listing.splitlines():
        scope_key, _, value = line.partition("=")
        scope, _, key = scope_key.rpartition(".")
        if key in from_env:
            continue  # a PIP_* variable overrides the config files, as in pip
        if scope == ":env:":
            from_env.add(key)
        if key == "no-index" and value.strip("'\"").lower() in ("1", "true", "yes", "on"):
            found["no-index"] = []
        elif key in OPTIONS:
            found[key] = shlex.split(shlex.split(value)[0]) if value else []
    args = ["--index-strategy", "unsafe-best-match"]
    if "no-index" in found:
        args.append("--no-index")
    for key, option in OPTIONS.items():
        for v in dict.fromkeys(found.get(key, [])):
            args += [option, v]
    print(shlex.join(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
