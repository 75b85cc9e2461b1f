"""The JAX part of the checkpoints suite alone: a flax model with its optax
Adam state (about 300 MB, float32 and bfloat16) against orbax's
``StandardCheckpointer`` (sync and async) and flax's msgpack, every
contender once in turn per round (:mod:`cpersist.benchmarks.jax_checkpoints`).
Prints each contender's median time and size and the suite's ratio rows,
with the load average before and after.

    python benchmarks/jax_checkpoints.py --rounds 5
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cpersist.benchmarks import jax_checkpoints  # noqa: E402
from cpersist.benchmarks.turns import format_ratios  # noqa: E402


def load_average():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.split("average:")[-1].strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny states, to try the script")
    args = parser.parse_args(argv)
    before = load_average()
    directory = tempfile.mkdtemp(prefix="cpersist-jax-checkpoints-")
    try:
        results = jax_checkpoints.run(directory, args.quick, args.rounds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if results.get("missing"):
        raise SystemExit(f"needs {results['missing']} (pip install 'cpersist[jax]')")
    print(f"{args.rounds} rounds; load average {before} -> {load_average()}")
    print(jax_checkpoints.format_results(results))
    print(format_ratios(jax_checkpoints.ratios(results)))


if __name__ == "__main__":
    main()
