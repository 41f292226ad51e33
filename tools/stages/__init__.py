"""[judge] The judge's stages, one module each, named as ``evaluation.STAGES`` names them.

``compile`` (import the candidate in its worker, building its extensions; with ``warmup``),
``correctness`` (every trial, compared in the reference worker), ``legality`` (the recorded aten ops
against the allowlist), ``benchmark`` (the candidate's time against the baselines, and the checks on
it), ``profile`` (Nsight Compute), ``sanitize`` (compute-sanitizer). Each takes a
:class:`~kernelfix.tools.stages.stage_context.StageContext` (what it may use of the judge) and an
``Evaluation``, and returns the evaluation advanced: none imports the judge.
"""
