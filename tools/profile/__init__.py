"""Why is it as fast as it is? Nsight Compute on one forward (``ncu``, ``ncu_csv``), the
bottleneck read from it (``bottleneck``), the profiled child (``target``) and the stage."""
