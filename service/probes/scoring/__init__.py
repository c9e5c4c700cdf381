"""The probes' maths, pure functions of captions and references (no engine, no HTTP): one module per
kind's figures — ``systematicity`` (Recall@K of held-out vs seen pairs), ``productivity`` (per-bucket
length, nouns, coverage, CIDEr-D), ``substitutivity`` (original vs substituted captions),
``counterfactual`` (hit@K on minimal pairs) —, ``uncertainty`` (their intervals and paired tests) and
``parser`` (the attachment parser in a process of its own, giving the pairs each caption attaches).
Offline studies (``compcap_lab.studies``) import them too."""
