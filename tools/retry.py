"""[judge] A machine fault is judged again, never handed to the model: the retry policy every caller shares.

An ``infra:*`` verdict says the machine failed to judge the candidate (GPU memory held by
others, a worker that died, a deadline a loaded machine missed). Nothing in it is the
model's, so ``kernelfix eval``, the session's chain and search, and a batch judge the same
candidate again after a pause, a bounded number of times (``JudgeConfig.infra_retries``),
and say so in the verdict (``Verdict.infra_retries``). A fault that outlasts them stops a
session with a clear reason (``MachineFault``): the session is kept and resumes there.
``no_gpu`` is not a fault (the candidate was built; that build is the feedback) and
``too_large`` is not retried (the task does not fit this machine, now or later).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kernelfix.tools.verdict import Category

# Polled while pausing, so that Ctrl-C or a user's stop ends the wait at once.
_TICK_S = 0.25


class MachineFault(Exception):
    """The machine kept failing to judge a candidate: the session stops here and resumes later."""

    def __init__(self, faults: list[str], *, turn: int | None = None, what: str | None = None):
        self.faults = faults
        self.turn = turn
        where = f"judge turn {turn}" if turn is not None else f"run {what}" if what else "judge the candidate"
        tries = f"{len(faults)} tr{'y' if len(faults) == 1 else 'ies'}"
        super().__init__(f"the machine could not {where} ({tries}; last: {faults[-1] if faults else 'unknown'})")


def fault_text(category: Category | None, message: str | None) -> str:
    return f"{category.value if category else 'infra'}: {(message or '').strip()[:300]}"


def should_retry(category: Category | None, tried: int, retries: int) -> bool:
    return category is not None and category.transient and tried < retries


def pause(seconds: float, check: Callable[[], None] | None = None) -> None:
    """Sleep ``seconds``, calling ``check`` (which raises to stop) every tick."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if check is not None:
            check()
        time.sleep(min(_TICK_S, left))


def backoff_s(first_s: float, tried: int) -> float:
    """The pause before try ``tried + 1``: doubling from ``first_s``, at most a minute."""
    return min(60.0, first_s * (2**tried))
