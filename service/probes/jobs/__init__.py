"""Probe jobs: ``spec`` (a request validated into a ``ProbeSpec``), ``manager`` (jobs as tasks with
status and progress, bounded), ``probe_store`` (jobs, history and baselines in the shared state),
``schedule`` (``COMPCAP_PROBE_SCHEDULE``), ``gauges`` (the Prometheus gauges of the last results) and
``probe_service`` (``ProbeService``: what the routes and the schedule share)."""
