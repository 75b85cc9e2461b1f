"""``python -m cpersist.benchmarks``: see :func:`cpersist.benchmarks.cli.main`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
