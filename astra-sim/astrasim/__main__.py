"""``python -m astrasim``: see :mod:`astrasim.cli`."""
import sys

from .cli import main

sys.exit(main())
