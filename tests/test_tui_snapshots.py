"""Snapshots (pytest-textual-snapshot) of the main screens at 80x24, over a recorded session
(tests/fixtures/tui). Update after an intended change with: pytest tests/test_tui_snapshots.py --snapshot-update"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfix.tui.app import KernelfixApp

REPO = Path(__file__).parent.parent
SESSIONS = Path("tests/fixtures/tui/sessions")  # relative: the list's header shows it, the same on every machine
SIZE = (80, 24)


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def app() -> KernelfixApp:
    return KernelfixApp(sessions_root=SESSIONS)


def test_sessions_list(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE)


def test_session_history_candidate_tab(snap_compare):
    # enter opens the session on its last turn, the correct one, on the candidate tab
    assert snap_compare(app(), terminal_size=SIZE, press=["enter"])


def test_session_diff_tab(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE, press=["enter", "up", "3"])


def test_session_correctness_tab(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE, press=["enter", "up", "5"])


def test_session_reply_tab_with_reasoning_unfolded(snap_compare):
    async def unfold(pilot):
        await pilot.press("enter", "up", "1")
        await pilot.click("#reasoning-fold CollapsibleTitle")

    assert snap_compare(app(), terminal_size=SIZE, run_before=unfold)


def test_search_tree(snap_compare):
    # a width-3, keep-2 search (tests/fixtures/tui/search): the turn list is the tree, the best path marked
    assert snap_compare(
        KernelfixApp(sessions_root=Path("tests/fixtures/tui/search")), terminal_size=SIZE, press=["enter"]
    )
