"""``python -m ipusim``: the command line interface of :mod:`ipusim.cli`."""

from __future__ import annotations

import sys

from ipusim.cli import main

if __name__ == "__main__":
    sys.exit(main())
