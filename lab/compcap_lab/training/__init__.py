"""Training (``compcap-lab build``'s first stage): ``train`` (GradNorm joint training of the encoder's heads,
the captioners and the rankers, selection on validation BLEU-4) and ``resume`` (checkpoints keyed by a
fingerprint of what they were trained from, so a rerun picks up where it stopped)."""
