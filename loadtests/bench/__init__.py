"""``compcap bench`` (``bench``: the run's stages — in-process limit and naive decoding, the gateway's
load levels, the references over HTTP — and ``--compare-precision``), its summary table (``table``),
the zero-overhead ceiling (``ceiling``), ``--mix`` (``mix``), ``--profile`` (``profile``) and the plot of
its JSON files (``python -m loadtests.bench.plot``)."""
