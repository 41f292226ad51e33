"""[judge] The GPU as the judges share it, and what it can do.

``lease`` (a GPU's lease across threads and processes: exclusive or shared), ``room`` (how much of its
memory a stage declares), ``specs`` (datasheet numbers), ``floor`` (a task's floor on this GPU), ``visible``
(the GPUs this process may use).
"""
