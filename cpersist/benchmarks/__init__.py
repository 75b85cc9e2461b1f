"""The bundled benchmark of cpersist (docs/benchmarks.rst).

Run ``python -m cpersist.benchmarks --help``; from code::

    from cpersist.benchmarks import main
    main(["--quick", "--out", "bench-out"])

Modules, by job: :mod:`.cli` (the command line) and :mod:`.suites` (running
what it chose); the storage suite's :mod:`.datasets` (with
:mod:`.generated`, :mod:`.userfiles`, :mod:`.datacache`), :mod:`.method`
(the interface), :mod:`.methods` (cpersist's and the registry),
:mod:`.peers_classic` and :mod:`.peers`, :mod:`.runner`; :mod:`.measure`
(fresh process per measurement, time, peak RSS), :mod:`.pagecache`,
:mod:`.compare` (checking what was read back); the other suites
(:mod:`.lazy`, :mod:`.checkpoints` with :mod:`.jax_checkpoints`,
:mod:`.appends` with :mod:`.append_peers`), with
:mod:`.turns` (contenders timed in turn) and :mod:`.ratios` (the checkpoint
and append suites' comparisons as ratios); the outputs :mod:`.output` (CSV, JSON),
:mod:`.figures` and :mod:`.report` (the printed text). The maintainers'
investigations (reading from S3, serializers, joblib.Memory's store), the
acceptance machinery and the tools that publish results live in the
repository's ``benchmarks/`` folder, not installed.
"""

from .cli import build_parser, main

__all__ = ["main", "build_parser"]
