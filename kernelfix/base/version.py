"""kernelfix's version: a leaf module, so what records it (a session, a capture, a tune, the server) imports nothing else of kernelfix for it."""

__version__ = "0.1.0"
