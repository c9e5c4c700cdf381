"""The pipeline's two entry points, each world → splits → training → packaging: ``build`` (the default
repository, ``compcap-lab build``) and ``zoo`` (every architecture on every split, ``compcap-lab models``)."""
