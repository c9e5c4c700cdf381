"""One part of serving measured alone, each ``python -m compcap_lab.steps.<name>``: where a step call's
time goes (``breakdown``), the imported step forms (``forms``), host top-k (``topk``), onnxruntime's
fusions (``fusions``), its kernels against torch's (``matmul_kernels``), Triton against in-process
onnxruntime (``triton_overhead``), and the engine core's host work per step at large batches
(``engine_profile``)."""
