"""The left pane: one entry per turn (mark, source, speedup, best, verdict), and the turns in progress.
A search (width > 1) shows the tree: each turn's branch and parent, forks indented, the best path marked."""

from __future__ import annotations

from textual.widgets import OptionList
from textual.widgets.option_list import Option

from kernelfix.tui.turn_text import live_label, live_tree_label, tree_label, turn_label
from kernelfix.tui.view_model import SessionView


class TurnList(OptionList):
    """Option ids are turn indexes as strings; the running turn's is ``live-N``."""

    def show(self, view: SessionView) -> None:
        was = self.highlighted_option.id if self.highlighted_option is not None else None
        follow = was is None or self.highlighted == self.option_count - 1  # on the last entry: keep following
        options = _tree_options(view) if view.branched else _chain_options(view)
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


def _chain_options(view: SessionView) -> list[Option]:
    options = [Option(turn_label(t, best=t.index == view.best_turn), id=str(t.index)) for t in view.turns]
    if view.live is not None:
        options.append(
            Option(live_label(view.live.index, view.live.source, view.live.activity), id=f"live-{view.live.index}")
        )
    return options


def _tree_options(view: SessionView) -> list[Option]:
    path = view.best_path()
    options = []
    for index, depth in view.tree_rows():
        turn = view.turn(index)
        if turn is not None:
            options.append(
                Option(
                    tree_label(turn, depth=depth, best=index == view.best_turn, on_path=index in path), id=str(index)
                )
            )
        else:
            live = view.lives[index]
            options.append(
                Option(live_tree_label(index, live.branch, live.parent, live.activity, depth=depth), id=f"live-{index}")
            )
    return options
