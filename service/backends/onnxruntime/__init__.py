"""The embedded backend (``COMPCAP_BACKEND=onnxruntime``, the default): ``backend`` (onnxruntime sessions
in this process, run off the event loop; imported only when the backend is built) and ``settings`` (its
section of the settings: the device, the threads, spinning). This ``__init__`` imports nothing, so that
validating the settings imports no onnxruntime."""
