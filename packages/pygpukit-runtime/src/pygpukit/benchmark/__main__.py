"""``python -m pygpukit.benchmark``."""

import sys

from .cli import main

sys.exit(main())
