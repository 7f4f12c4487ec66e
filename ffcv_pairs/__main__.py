"""``python -m ffcv_pairs write|inspect|verify|warmup ...``; see :mod:`ffcv_pairs.cli`."""

import sys

from .cli import main

sys.exit(main())
