"""Load tests and measurements that print figures; none is part of the service (``service`` never
imports this package). ``commands`` holds their ``compcap`` commands: ``bench``, ``probe-load`` and
``shadow-load``. The rooms:

- ``bench``: ``compcap bench`` (its stages, summary table, ceiling, ``--mix``, ``--profile``) and its plot;
- ``load``: load generation every load test shares (a gateway on a free port, closed-loop clients, the
  images, CPU accounting, the result) and the other load tests: ``probe-load``, ``shadow-load``, the
  settings A/B, single-client latency;
- ``peers``: the stand-in servers the bench loads beside the gateway (the torch and transformers
  per-request peers, the HTTP floor), one stand-in server shared;
- ``steps``: one part measured alone (a step call's copies, forms, top-k, prefix cost, Triton's
  overhead, the engine core's host work per step);
- ``gpu``: the GPU check (``scripts/gpu_check.py``) and its parity figure and snapshot.
"""
