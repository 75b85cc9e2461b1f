"""Compare joblib.Memory's default store with cpersist's store backend.

    python benchmarks/memory_store.py [OPTIONS]

The comparison is the benchmark's ``memory`` suite
(:mod:`cpersist.benchmarks.memory`): this script runs
``python -m cpersist.benchmarks --suite memory OPTIONS`` (``--quick``,
``--repeat``, ``--size``, ``--out`` ... as there).
"""

import sys

from cpersist.benchmarks import main as bench_main


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    return bench_main(["--suite", "memory"] + argv)


if __name__ == "__main__":
    sys.exit(main())
