"""Importing a user's own Hugging Face ``transformers`` model from a snapshot directory on disk into a
CompCap model repository (``compcap import hf``): ``snapshot`` reads and recognises it (offline),
``ved`` wraps a ``VisionEncoderDecoderModel`` in the model contract, ``importer`` exports, checks and
adds it to the repository."""
