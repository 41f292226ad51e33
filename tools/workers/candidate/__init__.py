"""[candidate worker, one-shot child] The candidate's worker: ``server`` (import, build, trials, timing) and
``recorder`` (the aten ops every judged forward dispatches: legality's worker side); ``ahead`` also serves the
profiled run (tools/workers/profile_target.py)."""
