"""Shared state: what every replica of the gateway must see the same — probe jobs and their progress,
accepted baselines, the probe history, the shadow reservoir, and the leases that let exactly one replica
run a schedule. One store per process, chosen by ``COMPCAP_STATE_URL``: an embedded SQLite file by
default (one host, one or several processes), PostgreSQL when there are replicas. The features keep
their own queries (``service.probes.jobs.probe_store``, ``service.compare.stored``); this package is the kit:
the store, its schema and versioned migrations, and leases."""
