"""[judge] The judge's handles on its child processes: they start, ask and end the workers.

``worker_handle`` (one long-lived worker: started sandboxed, asked, waited for under a deadline),
``reference`` (the reference worker, one per judge, shared by every evaluation), ``candidate_run``
(one evaluation's candidate worker), ``one_shot`` (a profiler's or a sanitizer's child),
``sandboxing`` (what each child may see, write and use), ``worker_context`` (what a handle needs of its
judge). What runs inside the children is ``kernelfix.tools.workers``.
"""
