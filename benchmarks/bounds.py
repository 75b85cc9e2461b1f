"""The bounds the maintainers hold the benchmark's published ratios to, and
a verdict on a run: met or missed, target by target.

Run from the repository root (it is not installed with cpersist)::

    python -m cpersist.benchmarks --suite all --out RUN    # or any suites
    python -m benchmarks.remote RUN                        # reading from S3
    python -m benchmarks.lazy_costs RUN                    # a slice's peak memory, listing
    python -m benchmarks.lazy_dask RUN                     # a dask sum, 2 workers
    python -m benchmarks.coldstart RUN                     # start-up and cold start
    python -m benchmarks.bounds RUN [RUN ...]

Each comparison is a ratio row with a ``key``: :mod:`benchmarks.ratios`
makes those of the lazy suite, the lazy costs, the dask sum and the S3 reads from their
results and keys the checkpoint suite's ``checkpoints.csv`` and the raw
files' and random forest's ``raw.csv`` and ``forest.csv``;
:mod:`benchmarks.coldstart` writes ``coldstart.csv``. This module maps each
key to its bound. A row without a
key (a scaled-down run, a user's own file, a ratio given for context) is
shown without a verdict. Exits 1 when a target is missed or a keyed
comparison failed.
"""

import argparse
import sys

from cpersist.tools.table import format_table

from .ratios import ratio_files

__all__ = ["BOUNDS", "judge", "format_verdicts", "main"]

#: Ratio key -> (operator, bound).
BOUNDS = {
    # cpersist.open: bytes and time of a 1% row slice, peak memory, listing, dask.
    "lazy.slice_bytes": ("<=", 1),
    "lazy.slice_vs_blosc2": ("<=", 1),
    "lazy.slice_vs_zarr": ("<=", 1),
    "lazy.slice_vs_load": ("<=", 0.05),
    "lazy.slice_peak": ("<=", 1),
    "lazy.listing": ("<=", 1),
    "lazy.dask_vs_zarr": ("<=", 1.25),
    "lazy.dask_speedup": (">=", 1.5),
    # Reading from S3.
    "remote.load_vs_zarr": (">=", 0.8),
    "remote.load_vs_download": (">=", 0.8),
    "remote.slice_requests": ("<=", 1),
    # Model checkpoints (the generated float32 and bfloat16 ones).
    "checkpoints.dump_vs_torch": ("<=", 0.83),
    "checkpoints.load_vs_torch": ("<=", 0.67),
    "checkpoints.size_vs_torch": ("<=", 1),
    "checkpoints.mmap_vs_torch": ("<=", 1),
    "checkpoints.mmap_vs_safetensors": ("<=", 2),
    "checkpoints.untrusted_vs_trusted": ("<=", 1.1),
    "checkpoints.compress3_size_vs_torch": ("<=", 0.77),
    "checkpoints.compress3_dump_vs_raw": ("<=", 2),
    "checkpoints.compress3_load_vs_torch": ("<=", 1),
    "checkpoints.max_size": ("<=", 0.87),
    # JAX training states against orbax StandardCheckpointer (both zstd level 3).
    "checkpoints.jax_dump_vs_orbax": ("<=", 0.67),
    "checkpoints.jax_load_vs_orbax": ("<=", 0.67),
    "checkpoints.jax_size_vs_orbax": ("<=", 1),
    "checkpoints.jax_mmap_vs_orbax": ("<=", 1),
    # Raw files against numpy, and a model of many small arrays against pickle 5.
    "raw.dump_vs_numpy": ("<=", 1),
    "raw.load_vs_numpy": ("<=", 1),
    "forest.dump_vs_pickle": ("<=", 1),
    "forest.load_vs_pickle": ("<=", 1),
    # Cold start and small objects.
    "coldstart.one_shot": ("<=", 0.5),
    "coldstart.first_call": ("<=", 1.3),
    "coldstart.info_command": ("<=", 1.5),
    "coldstart.dumps_vs_pickle": ("<=", 3),
    "coldstart.loads_vs_pickle": ("<=", 2),
    "coldstart.dumps_bytes": ("<=", 1),
    "coldstart.file_dump": ("<=", 1),
    "coldstart.file_load": ("<=", 1),
    "coldstart.file_bytes": ("<=", 1),
}


def judge(rows):
    """The ratio rows with ``bound`` (e.g. ``"<= 1.3"``) and ``met``
    (``"yes"``, ``"no"``, or empty: no bound, or not measured) added.

    Raises
    ------
    KeyError
        A row's key has no bound here (a comparison added to a suite
        without its bound).
    """
    out = []
    for r in rows:
        r = dict(r, bound="", met="")
        if r.get("key"):
            op, limit = BOUNDS[r["key"]]
            r["bound"] = f"{op} {limit:g}"
            if r.get("status") == "ok":
                ratio = float(r["ratio"])
                r["met"] = "yes" if (ratio <= limit if op == "<=" else ratio >= limit) else "no"
        out.append(r)
    return out


def format_verdicts(rows):
    """Judged rows as a text table."""
    return format_table(["target", "ratio", "bound", "met", "measured"], [
        [r["target"], f"{float(r['ratio']):.3f}", r["bound"] or "-", r["met"] or "-", r["measured"]]
        if r["status"] == "ok" else [r["target"], f"{r['status']}: {r['reason']}"]
        for r in rows], right=(1, 2, 3))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bounds",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN", help="output folders of benchmark runs")
    args = parser.parse_args(argv)
    missed = found = 0
    for run in args.runs:
        for name, rows in ratio_files(run).items():
            found += 1
            rows = judge(rows)
            print(f"{run}: {name}\n{format_verdicts(rows)}\n")
            missed += sum(r["met"] == "no" or bool(r["bound"] and r["status"] == "failed")
                          for r in rows)
    if not found:
        parser.error(f"no results of the lazy, remote, checkpoints, cold-start, raw or forest "
                     f"suites in {', '.join(args.runs)}")
    print(f"{missed} target(s) missed" if missed else "every target with a bound met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
