"""Compositional probes (Nikolaus et al., 2019; Pantazopoulos et al., 2022; counterfactual minimal
pairs), a client of the engine and a feature of the gateway (``feature.install``). One room each:

- ``kinds/`` — what a probe kind is (``record.ProbeKind``), the registry and one record per kind
  (``systematicity_kind`` …), with the gauge and table helpers the records use (``bounds``, ``tables``);
- ``scoring/`` — the maths of each kind, its intervals, the attachment parser;
- ``jobs/`` — requests into specs, jobs, their store in the shared state, the schedule, the gauges;
- ``http/`` — the routes.

The probe sets the kinds read are ``service.probesets``. The package imports nothing itself, so offline
code that uses its pure parts (``scoring``) does not load the HTTP layer."""
