"""What :func:`cpersist.open` costs on its own, beside the lazy suite's
comparisons with zarr and blosc2: the peak memory of slicing 0.1% of a
400 MB compressed array (in a fresh process) and the time of listing the
arrays of a file of 10,000 (``lazy.slice_peak`` and ``lazy.listing`` in
:mod:`benchmarks.bounds`).

Run from the repository root (it is not installed with cpersist)::

    python -m benchmarks.lazy_costs RUN_DIR [--scale 1] [--repeat 5]

It writes ``lazy_costs.json`` to the run's folder, which
:mod:`benchmarks.ratios` reads beside the lazy suite's ``lazy.json``, and
prints two lines.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

import cpersist
from cpersist.benchmarks.lazy import MB, make_array
from cpersist.benchmarks.measure import PeakMemory
from cpersist.benchmarks.output import measure_into
from cpersist.pickling.write import RAW_INLINE_BELOW

from .timing import time_runs

__all__ = ["measure_peak", "measure_listing", "format_costs", "main"]

#: The part of the array's rows the peak memory is measured for.
PEAK_FRACTION = 0.001


def _middle(length, fraction):
    count = max(1, int(length * fraction))
    start = (length - count) // 2
    return slice(start, start + count)


def _child_peak(path, fraction):
    """In a fresh process: peak RSS above the start while opening and slicing."""
    from cpersist import handle  # noqa: F401  (imports are not what is measured)
    from cpersist.codecs import get_codec
    get_codec("zstd-auto")
    with PeakMemory() as peak:
        with cpersist.open(path) as f:
            lazy = f.arrays["obj['a']"]
            part = lazy[_middle(len(lazy), fraction)]
    return {"peak_mb": peak.peak / MB, "exact": peak.exact, "slice_mb": part.nbytes / MB}


def measure_peak(nbytes, directory):
    """The peak memory of a 0.1% slice of a compressed array of ``nbytes``."""
    arr = make_array("compressible", nbytes, seed=1)
    path = os.path.join(directory, "peak.cp")
    cpersist.dump({"a": arr}, path, compress=True)
    del arr
    done = subprocess.run([sys.executable, "-m", "benchmarks.lazy_costs", "--child", path,
                           str(PEAK_FRACTION)], capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return dict(json.loads(done.stdout), array_mb=nbytes / MB)


def measure_listing(n_arrays, directory, repeats):
    """The median time of listing the arrays of a file of ``n_arrays``."""
    # Each array as small as a raw dump gives a section of its own.
    obj = {f"layer{i}": {"w": np.full(RAW_INLINE_BELOW // 4, i, dtype=np.float32)}
           for i in range(n_arrays)}
    path = os.path.join(directory, "many.cp")
    cpersist.dump(obj, path)

    def listing():
        with cpersist.open(path) as f:
            assert len(f.arrays) == n_arrays

    listing()  # untimed: the first call imports what opening a file needs
    return {"arrays": n_arrays, "listing_s": statistics.median(time_runs(listing, repeats))}


def format_costs(results):
    """The measurements as lines of text."""
    p, listed = results["peak"], results["listing"]
    return (f"0.1% slice of {p['array_mb']:.0f} MB: peak {p['peak_mb']:.1f} MB above the RSS "
            f"before ({'VmHWM' if p['exact'] else 'sampled'})\n"
            f"open().arrays of {listed['arrays']} arrays: {listed['listing_s'] * 1e3:.1f} ms")


def main(argv=None):
    """Measure, print the lines, write ``lazy_costs.json``."""
    if argv is None and sys.argv[1:2] == ["--child"]:  # measure_peak's fresh process
        print(json.dumps(_child_peak(sys.argv[2], float(sys.argv[3]))))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lazy_costs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="RUN_DIR", help="folder of a benchmark run (made if new)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies the array's 400 MB and the 10,000 arrays listed (the "
                             "sizes the bounds are set for)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed listings (median kept; default 5)")
    args = parser.parse_args(argv)
    results = measure_into(args.out, "lazy_costs.json", "cpersist-lazy-costs-", lambda directory: {
        "peak": measure_peak(int(400 * MB * args.scale), directory),
        "listing": measure_listing(max(10, int(10000 * args.scale)), directory, args.repeat)})
    print(format_costs(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
