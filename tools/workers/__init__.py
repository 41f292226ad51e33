"""The judge's two kinds of long-lived child process, and their parent-side handles.

``reference_worker`` (trusted: the task's code and kernelfix's, never the
candidate's) draws each trial's inputs, runs Model (and its float64 copy), keeps
what fits its cache, times the eager and torch.compile baselines, and compares a
candidate's outputs on the device. ``candidate_worker`` (hostile until proven
otherwise) imports one candidate, builds ModelNew, and runs each request's
forward on inputs that arrive through shared memory after its import. Both run
in the sandbox; requests go over a socket, replies over the authenticated pipe.
"""
