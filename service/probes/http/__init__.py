"""The probes' HTTP surface: ``endpoints`` (``/v1/probes``, ``/v1/probe-kinds``, ``/v1/probe-sets``),
installed with the schedule by ``service.probes.feature``."""
