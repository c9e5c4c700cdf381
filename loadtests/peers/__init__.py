"""What ``compcap bench`` loads beside the gateway with the same clients and images: the per-request
peers a user would run instead of CompCap (``--baseline torch``: ``torch_baseline``; ``--baseline
transformers``: ``transformers_baseline``) and the HTTP floor (``http_floor``, the least work any
server must do), all one stand-in server (``stand_in``) that differs in its caption route."""
