"""`kernelfix tune`: a faster model, not only a faster kernel.

    kernelfix tune train.py --model M --top 3 --out tuned/
    model = kernelfix.load_tuned("tuned/", model)

1. Rank (:mod:`kernelfix.tune.rank`): the script's model runs under the profiler; each module's share of
   the forward's time (CUDA kernel time on a GPU, CPU time on a CPU; forward+backward with --backward) and
   the Amdahl bound; the modules worth a kernel are the leaf-most ones that run several ops.
2. Optimize: the top K are captured (``kernelfix capture --calls all``) and optimized as the sessions of
   ``kernelfix batch`` (``DIR/sessions``; resumed like any batch).
3. Keep (:mod:`kernelfix.tune.swaps`, :mod:`kernelfix.tune.decide`): a module's best kernel stays only if
   the model's own forward is faster with it, beyond the timing's noise, eager and under
   ``torch.compile(fullgraph=True)``, and its output matches. ``DIR/report.json`` (:class:`TuneReport`)
   records every step; :func:`kernelfix.tune.load.load_tuned` applies the kept swaps to a model.
"""
