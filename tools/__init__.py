"""[any] The judge (kernelfix.tools): compile, correctness, legality, timing, profile, sanitizer.

Layers, each importing only the ones below it (tests/test_module_layout.py; docs/architecture.md):

    judge.py        the Judge: the stages in order, the verdict                         [judge]
    stages/         one module per stage, run in the judge's process                    [judge]
    handles/        the judge's handles on its child processes                          [judge]
    workers/        what runs inside those children, by process and concern             [workers]
    compile/ correctness/ legality/ timing/ profile/ sanitizer/
                    each concern's library: no process of its own, called by either side
    gpu/ transport/ and the loose modules (verdict, config, task, ...): the base

The public face is the top package: ``kernelfix.Judge``, ``kernelfix.Verdict``, ``kernelfix.JudgeConfig``.
"""
