"""The GPU check (``check``; ``scripts/gpu_check.py``, ``make gpu-check``): its stages, table and JSON,
the CPU-against-CUDA parity figure (``parity``); its real stage's random-weight ViT + GPT-2 snapshot is
``compcap_lab.snapshots.vit_gpt2``'s."""
