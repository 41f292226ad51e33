"""[workers] What runs inside the judge's child processes, a package (or module) per process.

``reference/`` the reference worker (trusted: the task's code and kernelfix's, never the candidate's):
it draws each trial's inputs, runs Model (and its float64 copy), keeps what fits its cache, times the
eager and torch.compile baselines, and compares a candidate's outputs on the device. ``candidate/`` the
candidate worker (hostile until proven otherwise): it imports one candidate, builds ModelNew, and runs
each request's forward on inputs that arrive through shared memory, under the op recorder.
``profile_target`` and ``sanitizer_target``: the one-shot children a profiler or compute-sanitizer
watches. ``child``: what all of them share (loading, seeding, serving requests). The judge's side of
each is in ``kernelfix.tools.handles``.
"""
