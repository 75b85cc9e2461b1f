"""The bundled benchmark of cpersist.

Compares cpersist with PyTables, NIfTI (nibabel), ``np.savez_compressed``,
``np.save``, joblib and pickle across compression levels, on generated
datasets, on real data shipped with installed packages and on the user's own
files; plus the picklebench serializer comparison.

Run ``python -m cpersist.benchmarks --help``; from code::

    from cpersist.benchmarks import main
    main(["--quick", "--out", "bench-out"])

Modules: :mod:`.datasets`, :mod:`.methods`, :mod:`.measure` (fresh process
per measurement, peak RSS, page-cache handling), :mod:`.compare` (checking
what was read back), :mod:`.report` (CSV, JSON, figures),
:mod:`.serializers` (picklebench), :mod:`.importtime` (start-up time beside
joblib), :mod:`.runner` and :mod:`.cli`. Tools that publish results and
investigate this project's own performance live in the repository's
top-level ``benchmarks/`` folder and are not installed.
"""

from .cli import build_parser, main

__all__ = ["main", "build_parser"]
