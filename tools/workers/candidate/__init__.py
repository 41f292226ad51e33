"""[candidate worker] The candidate's worker: ``server`` (import, build, trials, timing) and
``recorder`` (the aten ops every judged forward dispatches: legality's worker side)."""
