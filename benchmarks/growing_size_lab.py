"""Whether an append to a large growing file costs what one to a small file does.

    python benchmarks/growing_size_lab.py [--big-gb 10] [--small-mb 10] [--appends 50]
                                          [--dir DIR]

Two raw growing files (``cpersist.dump(..., growing=True)``) are built by
appends of 100,000 x 128 float32 rows (51 MB each) until one holds about
``--big-gb`` GB and the other about ``--small-mb`` MB. Then ``--appends``
appends of 10,000 x 128 float32 rows (half smooth, half noise) are made to
each, alternating between the two files (each through its own open
``cpersist.open(path, "a")``), so that both see the same state of the
machine. Printed: the median wall-clock and CPU time of an append to each
file, and their ratio, big over small (the target is at most 1.2). The
files are removed at the end; the free space of ``--dir`` is checked first.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import cpersist  # noqa: E402

from growing_lab import batch  # noqa: E402

COLUMNS = 128
BUILD_ROWS = 100_000


def build(path, target_bytes):
    """A raw growing file of about ``target_bytes``, by appends."""
    cpersist.dump({"x": np.zeros((0, COLUMNS), np.float32)}, path, growing=True)
    filler = np.random.default_rng(0).standard_normal((BUILD_ROWS, COLUMNS)).astype(np.float32)
    rows = max(1, min(BUILD_ROWS, target_bytes // (4 * COLUMNS)))
    with cpersist.open(path, "a") as f:
        while os.path.getsize(path) + rows * 4 * COLUMNS <= target_bytes:
            f.append("obj['x']", filler[:rows])
        left = (target_bytes - os.path.getsize(path)) // (4 * COLUMNS)
        if left > 0:
            f.append("obj['x']", filler[:left])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-gb", type=float, default=10)
    parser.add_argument("--small-mb", type=float, default=10)
    parser.add_argument("--appends", type=int, default=50)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    big_bytes = int(args.big_gb * 1e9)
    small_bytes = int(args.small_mb * 1e6)
    added = 2 * args.appends * args.rows * COLUMNS * 4
    where = args.dir or tempfile.gettempdir()
    free = shutil.disk_usage(where).free
    if free < 1.2 * (big_bytes + small_bytes + added):
        sys.exit(f"{free / 1e9:.1f} GB free in {where}; this needs about "
                 f"{1.2 * (big_bytes + small_bytes + added) / 1e9:.1f} GB")
    batches = [batch(i, args.rows, COLUMNS) for i in range(4)]  # made once
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        paths = {"big": os.path.join(tmp, "big.cp"), "small": os.path.join(tmp, "small.cp")}
        built = {}
        for name, size in (("big", big_bytes), ("small", small_bytes)):
            start = time.perf_counter()
            build(paths[name], size)
            built[name] = os.path.getsize(paths[name])
            print(f"built {name}: {os.path.getsize(paths[name]) / 1e9:.3f} GB in "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
        wall = {"big": [], "small": []}
        cpu = {"big": [], "small": []}
        with cpersist.open(paths["big"], "a") as big, cpersist.open(paths["small"], "a") as small:
            handles = {"big": big, "small": small}
            for i in range(args.appends):
                # Alternate which goes first, so neither always follows the other.
                for name in (("big", "small") if i % 2 else ("small", "big")):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    handles[name].append("obj['x']", batches[i % 4])
                    wall[name].append(time.perf_counter() - start)
                    cpu[name].append(time.process_time() - start_cpu)
        with cpersist.open(paths["big"]) as f:
            last = f.arrays["obj['x']"][-args.rows:]
            assert np.array_equal(last, batches[(args.appends - 1) % 4])
        for what, times in (("wall", wall), ("CPU", cpu)):
            b, s = statistics.median(times["big"]), statistics.median(times["small"])
            print(f"median {what} time of an append: {b * 1e3:.2f} ms to the file of "
                  f"{built['big'] / 1e9:.1f} GB at the start, {s * 1e3:.2f} ms to the one of "
                  f"{built['small'] / 1e6:.0f} MB (ratio {b / s:.3f})")


if __name__ == "__main__":
    main()
