"""Modal dialogs: edit a candidate (judged as its own turn), add a hint to the next prompt."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, Label, TextArea


class EditCandidateScreen(ModalScreen[str | None]):
    """Returns the edited source (ctrl+s) or None (escape)."""

    BINDINGS = [Binding("ctrl+s", "submit", "judge it"), Binding("escape", "cancel", "cancel")]

    def __init__(self, source: str, title: str) -> None:
        super().__init__()
        self._source = source
        self._title = title

    def compose(self) -> ComposeResult:
        with Vertical(id="edit-box"):
            yield Label(f"{self._title} · ctrl+s: judge it as a new turn · esc: cancel", id="edit-title")
            # tree-sitter highlighting where textual[syntax] is installed; plain text otherwise
            language = "python" if "python" in TextArea().available_languages else None
            yield TextArea.code_editor(self._source, language=language, id="editor")
        yield Footer()

    def action_submit(self) -> None:
        self.dismiss(self.query_one("#editor", TextArea).text)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HintScreen(ModalScreen[str | None]):
    """Returns the hint (enter) or None (escape or empty)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="hint-box"):
            yield Label("a hint for the model's next prompt (enter: add, esc: cancel)")
            yield Input(placeholder="e.g. use tl.maximum and one program per 1024 elements", id="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
