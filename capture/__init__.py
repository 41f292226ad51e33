"""Capture a submodule of the user's own model as a task, and put the optimized kernel back.

    kernelfix capture train.py --module model.blocks.0.mlp --out tasks/mlp.py
    kernelfix optimize tasks/mlp.py --model M --session-dir sessions/mlp
    model.blocks[0].mlp = kernelfix.load_best("sessions/mlp", model.blocks[0].mlp)

:func:`kernelfix.capture.pipeline.capture` runs the script, records the module's
call, traces it with torch.export and writes a task whose output is checked
against the captured call before it is kept. :func:`kernelfix.capture.swap.load_best`
loads a session's best kernel as a module called as the captured one was.
"""
