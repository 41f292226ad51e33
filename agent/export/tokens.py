"""Token counts for the export's metadata and histograms.

tiktoken's cl100k_base, read from the copy litellm ships (no download: these
machines are offline). Where that is missing, an approximation, one token per
4 characters, and the name says so ("approx-chars/4").
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

APPROX = "approx-chars/4"


@functools.cache
def tokenizer() -> tuple[str, Callable[[str], int]]:
    """(name, count): the tokenizer in use and its counting function."""
    try:
        import tiktoken

        spec = importlib.util.find_spec("litellm")
        bundled = (
            Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers" if spec else None
        )
        old = os.environ.get("TIKTOKEN_CACHE_DIR")
        if bundled is not None and bundled.is_dir() and not old:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
        try:
            enc = tiktoken.get_encoding("cl100k_base")
        finally:
            if not old:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        return enc.name, lambda text: len(enc.encode(text, disallowed_special=()))
    except Exception:  # no tiktoken, or no encoding file offline
        return APPROX, lambda text: (len(text) + 3) // 4


def count(text: str | None) -> int:
    return tokenizer()[1](text) if text else 0
