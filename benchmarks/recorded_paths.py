"""What recording each array's path in the index costs a dump, and saves a listing.

Run from the repository root::

    python benchmarks/recorded_paths.py [--arrays 10000] [--repeat 7]

A dump of ``cpersist.pickling.write.RECORD_PATHS_FROM`` array sections or more in plain
dicts, lists and tuples writes each array's path in its section's meta, so
that ``cpersist.open(...).arrays`` reads them instead of walking the pickle
stream. This script dumps the same object of many small arrays with the
paths recorded and without (the threshold raised out of reach), and prints
for each the dump time, the file size and the time of the listing; and
``pickle.dumps`` of the object for scale. Medians of ``--repeat`` runs, the
two ways alternating.
"""

import argparse
import os
import pickle
import statistics
import tempfile
import time

import numpy as np

import cpersist
from cpersist.pickling import write
from cpersist.container import ContainerReader
from cpersist.tools.table import format_table


def _time(func):
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main(argv=None):
    """Measure, print the table, and return the medians and sizes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arrays", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    n = args.arrays
    obj = {f"layer{i}": {"w": np.full(4, i, dtype=np.float32)} for i in range(n)}
    ways = {"recorded": write.RECORD_PATHS_FROM, "walked": 10**9}
    times = {way: {"dump": [], "listing": []} for way in ways}
    sizes = {}
    with tempfile.TemporaryDirectory() as directory:
        paths = {way: os.path.join(directory, f"{way}.cp") for way in ways}

        def listing(path):
            with cpersist.open(path) as handle:
                assert len(handle.arrays) == n

        default, inline_below = write.RECORD_PATHS_FROM, write.RAW_INLINE_BELOW
        # Every array a section, as measured here (a raw dump keeps arrays
        # this small in its pickle stream).
        write.RAW_INLINE_BELOW = 0
        try:
            for _ in range(args.repeat):
                for way, threshold in ways.items():
                    write.RECORD_PATHS_FROM = threshold
                    times[way]["dump"].append(_time(lambda: cpersist.dump(obj, paths[way])))
                    times[way]["listing"].append(_time(lambda: listing(paths[way])))
        finally:
            write.RECORD_PATHS_FROM, write.RAW_INLINE_BELOW = default, inline_below
        for way, path in paths.items():
            sizes[way] = os.path.getsize(path)
            with open(path, "rb") as f:
                reader = ContainerReader(f, path)
                recorded = all("path" in s.meta for s in reader.sections if s.index != reader.root)
            assert recorded == (way == "recorded"), f"{way}: paths recorded {recorded}"
    pickled = statistics.median(_time(lambda: pickle.dumps(obj, protocol=5))
                                for _ in range(args.repeat))
    median = {way: {k: statistics.median(v) for k, v in t.items()} for way, t in times.items()}
    print(f"{n} arrays of 16 bytes, each in a dict of its own, medians of {args.repeat}")
    print(format_table(["paths", "dump ms", "file bytes", "listing ms"],
                       [[way, f"{median[way]['dump'] * 1e3:.1f}", f"{sizes[way]:,d}",
                         f"{median[way]['listing'] * 1e3:.1f}"] for way in ways], right=(1, 2, 3)))
    r, w = median["recorded"], median["walked"]
    print(f"recording: dump x{r['dump'] / w['dump']:.3f}, file x{sizes['recorded'] / sizes['walked']:.3f} "
          f"(+{sizes['recorded'] - sizes['walked']:,d} B), listing x{r['listing'] / w['listing']:.3f}; "
          f"pickle.dumps {pickled * 1e3:.1f} ms")
    return {"times": median, "sizes": sizes, "pickle_dumps": pickled}


if __name__ == "__main__":
    main()
