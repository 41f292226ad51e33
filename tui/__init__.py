"""The Textual terminal UI (kernelfix.tui): ``kernelfix.tui.app.KernelfixApp``."""
