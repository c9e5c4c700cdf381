"""Packaging trained or imported models as a Triton model repository: ``onnx`` (export + parity),
``programs`` (torch.export programs for the explanations), ``topk`` and ``state_gather`` (step graph
variants), ``package`` (the contract's graphs of trained models), ``triton_repo`` (``config.pbtxt``,
manifest, vocabulary), ``decoding`` (bulk decoding through the served engine), ``quality`` (a
repository's caption quality), ``runs`` (the (captioner, ranker) runs a repository offers) and
``calibrate`` (``compcap calibrate``: the ``in_domain`` tests)."""
