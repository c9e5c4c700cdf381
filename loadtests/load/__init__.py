"""Load generation and the load tests that are not the bench. What every load test shares: a server in
a subprocess on a free port and closed-loop HTTP clients (``http_load``), CPU accounting (``cpu``), the
images sent (``inputs``), printing and saving a result (``results``). The tests: ``compcap-lab probe-load``
(``probe_load``), ``compcap-lab shadow-load`` (``shadow_load``), gateway settings A/B (``python -m
loadtests.load.ab_settings``) and single-client latency (``python -m loadtests.load.latency``)."""
