"""The bundled benchmark of cpersist (docs/benchmarks.rst).

Run ``python -m cpersist.benchmarks --help``; from code::

    from cpersist.benchmarks import main
    main(["--quick", "--out", "bench-out"])

:mod:`.cli` reads the command line and :mod:`.suites` runs what it chose.
The maintainers' investigations, acceptance bounds and publishing tools
live in the repository's ``benchmarks/`` folder, not installed.
"""

from .cli import build_parser, main

__all__ = ["main", "build_parser"]
