"""How a candidate's extensions build: the hook on ``load_inline`` inside the candidate's worker
(``load_inline``), the faster replacement for torch's ninja step (``runner``, with ``ninja_file``,
``nvcc_pipeline`` and ``host_pch``), NVRTC kernels (``nvrtc``), the measured compile times per
source layout (``times``), the build line of the feedback (``report``) and the compile stage."""
