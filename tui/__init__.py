"""The Textual terminal UI (kernelfix.tui)."""
