"""The GPU check (``check``; ``scripts/gpu_check.py``, ``make gpu-check``): its stages, table and JSON,
the CPU-against-CUDA parity figure (``parity``) and the random-weight ViT + GPT-2 snapshot of its real
stage (``snapshot``)."""
