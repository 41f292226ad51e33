"""The left pane: one entry per turn (mark, source, speedup, best, verdict), and the turn in progress."""

from __future__ import annotations

from textual.widgets import OptionList
from textual.widgets.option_list import Option

from kernelfix.tui.turn_text import live_label, turn_label
from kernelfix.tui.view_model import SessionView


class TurnList(OptionList):
    """Option ids are turn indexes as strings; the running turn's is ``live-N``."""

    def show(self, view: SessionView) -> None:
        was = self.highlighted_option.id if self.highlighted_option is not None else None
        follow = was is None or self.highlighted == self.option_count - 1  # on the last entry: keep following
        options = [Option(turn_label(t, best=t.index == view.best_turn), id=str(t.index)) for t in view.turns]
        if view.live is not None:
            options.append(Option(live_label(view.live.index, view.live.source, view.live.activity), id=f"live-{view.live.index}"))
        self.set_options(options)
        if not options:
            return
        ids = [o.id for o in options]
        if follow or was not in ids:
            self.highlighted = len(options) - 1
        else:
            self.highlighted = ids.index(was)

    def selected_turn(self) -> int | None:
        """The highlighted turn's index (the running turn's too)."""
        opt = self.highlighted_option
        if opt is None or opt.id is None:
            return None
        return int(opt.id.removeprefix("live-"))
