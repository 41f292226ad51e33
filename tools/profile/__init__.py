"""[judge, one-shot child] Why is it as fast as it is? Nsight Compute's command line and output (``ncu``, ``ncu_csv``,
``ncu_source``), the bottleneck read from it (``bottleneck``), the named defects (``findings``) and
the host syncs (``host_sync``). The profiled child is ``kernelfix.tools.workers.profile_target``, the
stage ``kernelfix.tools.stages.profile``."""
