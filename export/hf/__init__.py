"""Importing a user's own Hugging Face ``transformers`` model from a snapshot directory on disk into a
CompCap model repository (``compcap import hf``): ``architectures`` recognises a snapshot (one record
module per architecture: ViT + GPT-2, BLIP, GIT, CLIP), ``adapter`` wraps it in the model contract,
``importer`` exports, checks and adds it to the repository."""
