"""The main pane: the selected turn, one tab per view of it."""

from __future__ import annotations

from rich.markdown import Markdown
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Collapsible, Static, TabbedContent, TabPane

from kernelfix.tui.check_views import correctness_view
from kernelfix.tui.code_views import candidate_view, diff_view, log_view
from kernelfix.tui.perf_views import performance_view, profile_view
from kernelfix.tui.turn_text import BEST_MARK, LIVE_MARK, mark
from kernelfix.tui.view_model import SessionView

# (pane id, tab label); the number keys 1-7 pick them in this order.
TABS = [
    ("reply", "reply"),
    ("code", "code"),
    ("diff", "diff"),
    ("log", "log"),
    ("check", "check"),
    ("perf", "perf"),
    ("profile", "profile"),
]


class TurnDetail(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="turn-title")  # which turn the tabs show, in words: the list's highlight is colour alone
        with TabbedContent(initial="code", id="tabs"):
            with TabPane("reply", id="reply"):
                with VerticalScroll():
                    with Collapsible(title="reasoning", collapsed=True, id="reasoning-fold"):
                        yield Static(id="reasoning")
                    yield Static(id="reply-body")
            for pane, label in TABS[1:]:
                with TabPane(label, id=pane):
                    with VerticalScroll():
                        yield Static(id=f"{pane}-body")

    def select_tab(self, pane: str) -> None:
        self.query_one("#tabs", TabbedContent).active = pane

    def show(self, view: SessionView, index: int | None) -> None:
        """Render turn ``index`` (judged or running); cheap when nothing changed, so it may be called often."""
        turn = view.turn(index) if index is not None else None
        live = view.lives.get(index) if index is not None else None
        key = (
            index,
            id(turn),
            turn.verdict is not None if turn else None,
            len(live.content) + len(live.reasoning) if live else None,
            live.activity if live else None,
            view.best_turn,
            len(view.turns),
        )
        if key == self._shown:
            return
        self._shown = key
        body = self.query_one
        body("#turn-title", Static).update(_title(view, turn, live))
        if turn is None and live is None:
            for pane, _ in TABS[1:]:
                body(f"#{pane}-body", Static).update(Text("no turn yet", style="italic"))
            self._reply("", "", "no turn yet")
            return
        if turn is not None:
            r = turn.reply
            self._reply(r.reasoning_content or "" if r else "", r.content if r else "", _no_reply(turn.source))
            previous = view.previous_turn(turn.index)
            body("#code-body", Static).update(candidate_view(turn))
            body("#diff-body", Static).update(diff_view(turn, previous))
            body("#log-body", Static).update(log_view(turn))
            body("#check-body", Static).update(correctness_view(turn.verdict))
            body("#perf-body", Static).update(performance_view(turn, view.turns, view.best_turn))
            body("#profile-body", Static).update(profile_view(turn.verdict))
        else:
            self._reply(live.reasoning, live.content, live.activity)
            waiting = Text(f"turn {live.index}: {live.activity}", style="italic")
            for pane, _ in TABS[1:]:
                body(f"#{pane}-body", Static).update(waiting)

    def _reply(self, reasoning: str, content: str, empty: str) -> None:
        fold = self.query_one("#reasoning-fold", Collapsible)
        fold.title = f"reasoning ({len(reasoning)} chars)" if reasoning else "reasoning (none)"
        self.query_one("#reasoning", Static).update(Text(reasoning))
        self.query_one("#reply-body", Static).update(Markdown(content) if content else Text(empty, style="italic"))


def _title(view: SessionView, turn, live) -> Text:
    if turn is not None:
        m = mark(turn)
        best = f" {BEST_MARK}best" if turn.index == view.best_turn else ""
        where = (
            f", {turn.branch}" + (f" from turn {turn.parent}" if turn.parent is not None else "")
            if view.branched
            else ""
        )
        return Text(f"turn {turn.index} ({turn.source}{where}): {m} {turn.verdict.category.value}{best}", style="bold")
    if live is not None:
        return Text(f"turn {live.index} ({live.source}): {LIVE_MARK} in progress", style="bold")
    return Text("no turn yet", style="bold")


def _no_reply(source: str) -> str:
    return {"user": "your edited candidate: no model reply", "candidate": "the --candidate file: no model reply"}.get(
        source, "no reply"
    )
