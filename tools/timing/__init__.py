"""[any] How fast: CUDA-event timing (``clock``, in the workers) and the baselines' cache on disk
(``baselines``, in the judge). The stage is ``kernelfix.tools.stages.benchmark``."""
