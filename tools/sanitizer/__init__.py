"""[judge, one-shot child] compute-sanitizer names the cause of a wrong or crashing kernel (docs/sanitizer.md).

``tool`` finds compute-sanitizer and writes its command line, ``parse`` reads its text report into
records, ``hazards`` turns records into typed hazards on the candidate's own lines with their fixes,
``reduce`` picks the reduced input. The watched child is ``kernelfix.tools.workers.sanitizer_target``,
the stage ``kernelfix.tools.stages.sanitize``.
"""
