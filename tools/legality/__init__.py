"""[judge] Does the candidate do the work in its own kernels? ``allowlist`` (the aten ops a forward may
run), ``static_checks`` (the first layer: the candidate's source). The runtime record is the candidate
worker's (``kernelfix.tools.workers.candidate.recorder``); the stage is ``kernelfix.tools.stages.legality``."""
