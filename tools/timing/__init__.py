"""How fast: CUDA-event timing (``clock``), the baselines and their cache (``baselines``),
and the checks that catch a kernel lying about its time (``checks``)."""
