"""[reference worker] The reference worker, by concern: ``server`` (start, requests), and the parts of
the :class:`~kernelfix.tools.workers.reference.server.ReferenceServer` it is made of."""
