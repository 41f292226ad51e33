"""Does the candidate do the work in its own kernels? The runtime op record against the allowlist."""
