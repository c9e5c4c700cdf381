"""The Triton backend (``COMPCAP_BACKEND=triton``): ``backend`` (``TritonBackend``, gRPC calls to Triton
Inference Servers; imported only when the backend is built), ``url`` (``COMPCAP_TRITON_URL``'s forms),
``pool`` and ``addresses`` (one client per address, health, picking), ``request`` (one model call),
``shm`` (system shared memory) and ``settings`` (its section of the settings). This ``__init__`` imports
nothing, so that validating the settings imports no tritonclient."""
