"""CompCap's research lab, its own distribution (``compcap-lab``) beside the product: SceneWorld training
and the model zoo (``pipeline``, ``training``), the reproduction studies and their reports (``studies``),
the load studies beside user traffic (``load``), the step-level and GPU measurements (``steps``, ``gpu``),
the random-weight Hugging Face snapshots they and the tests build (``snapshots``), and its command line
(``cli``, ``commands``). It depends on the product (``service``, ``export``, ``loadtests``); the product
never imports it."""
