"""Studies on the trained models, decoded through the served engine: ``evaluate`` (one split),
``report`` (the reproduction report), ``rerank_select`` (BUTR+RR's re-ranking weight), ``substitutivity``
and ``productivity`` (Pantazopoulos et al., 2022), ``examples`` (the README's example captions). The training
pipeline they read from stays in ``export``; nothing in it imports a study."""
