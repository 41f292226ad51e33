"""The leaf helpers every layer may use, importing nothing of kernelfix's: the version, atomic file writes, the cache
root, terminal output and settings errors in a user's words (docs/architecture.md, "Layers")."""
