"""Writing model repositories, offline: ``hf`` (``compcap import hf``), ``quantize``, ``packaging`` (ONNX
graphs, Triton configs, the manifest, calibration), ``models`` (the shipped architectures and the step
contract), ``probesets`` and ``data`` (the probe sets and the compositional splits they are drawn from).
The service never imports it; it reads only what this writes (``model_repo/manifest.json``)."""
