"""``python -m cpersist VERB ...``: the command line (see :mod:`cpersist.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
