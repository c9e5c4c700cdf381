"""``python -m service.cli``: ``compcap``."""

import sys

from service.cli import main

sys.exit(main())
