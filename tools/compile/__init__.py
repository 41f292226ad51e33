"""[any] How a candidate's extensions build, in the processes that import it.

``load_inline`` (the hook on torch's ``load_inline``), ``ninja_build`` (the faster replacement for
torch's ninja step, with ``ninja_file``, ``nvcc_pipeline`` and ``host_pch``), ``nvrtc`` (kernels
compiled at run time), ``times`` (the measured compile times per source layout), ``store`` and
``toolchain`` (the content-addressed build store, and what the compilers are). The compile stage
itself is ``kernelfix.tools.stages.compile``.
"""


class GpuRequired(Exception):
    """The candidate compiled, but running it needs a CUDA GPU this machine lacks (raised by ``load_inline``'s and
    ``nvrtc``'s hooks; here, light, so a worker's failure report names it without loading the toolchain)."""
