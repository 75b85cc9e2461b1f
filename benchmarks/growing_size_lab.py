"""Whether an append to a large growing file costs what one to a small file does.

    python benchmarks/growing_size_lab.py [--big-gb 10] [--small-mb 10] [--appends 50]
                                          [--compress 0] [--dir DIR] [--keep]

Two growing files (``cpersist.dump(..., growing=True, compress=...)``, raw
by default) are built by appends of 100,000 x 128 float32 rows of noise (51
MB each, stored as they are in a compressed file too: the probe finds
noise incompressible) until one holds about ``--big-gb`` GB and the other
about ``--small-mb`` MB. Then ``--appends``
appends of 10,000 x 128 float32 rows (half smooth, half noise) are made to
each, alternating between the two files (each through its own open
``cpersist.open(path, "a")``), so that both see the same state of the
machine. Printed: the median wall-clock and CPU time of an append to each
file, and their ratio, big over small (the target is at most 1.2). The
files are removed at the end (with ``--keep``, they are kept in ``--dir`` and
a later run with the same ``--compress`` appends to the large one rather than
building it again); the free space of ``--dir`` is checked first.
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


def build(path, target_bytes, compress=0):
    """A growing file of about ``target_bytes``, by appends."""
    cpersist.dump({"x": np.zeros((0, COLUMNS), np.float32)}, path, growing=True,
                  compress=compress)
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
    parser.add_argument("--compress", type=int, default=0)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true",
                        help="keep the files in --dir, and append to those a run before kept")
    args = parser.parse_args(argv)
    if args.keep and not args.dir:
        parser.error("--keep needs --dir")
    big_bytes = int(args.big_gb * 1e9)
    small_bytes = int(args.small_mb * 1e6)
    added = 2 * args.appends * args.rows * COLUMNS * 4
    where = args.dir or tempfile.gettempdir()
    free = shutil.disk_usage(where).free
    if args.keep:
        names = {name: os.path.join(where, f"growing-{name}-c{args.compress}.cp")
                 for name in ("big", "small")}
        if os.path.exists(names["small"]):
            os.remove(names["small"])  # built again: the appends made it larger
        if os.path.exists(names["big"]):
            big_bytes = 0  # built already
    if free < 1.2 * (big_bytes + small_bytes + added):
        sys.exit(f"{free / 1e9:.1f} GB free in {where}; this needs about "
                 f"{1.2 * (big_bytes + small_bytes + added) / 1e9:.1f} GB")
    batches = [batch(i, args.rows, COLUMNS) for i in range(4)]  # made once
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.keep:
            paths = names
        else:
            paths = {"big": os.path.join(tmp, "big.cp"), "small": os.path.join(tmp, "small.cp")}
        built = {}
        for name, size in (("big", big_bytes), ("small", small_bytes)):
            if not os.path.exists(paths[name]):
                start = time.perf_counter()
                build(paths[name], size, args.compress)
                print(f"built {name}: {os.path.getsize(paths[name]) / 1e9:.3f} GB in "
                      f"{time.perf_counter() - start:.1f} s", flush=True)
            built[name] = os.path.getsize(paths[name])
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
            print(f"compress={args.compress}: median {what} time of an append: {b * 1e3:.2f} ms "
                  f"to the file of {built['big'] / 1e9:.1f} GB at the start, {s * 1e3:.2f} ms "
                  f"to the one of {built['small'] / 1e6:.0f} MB (ratio {b / s:.3f}; of the "
                  f"minimums {min(times['big']) / min(times['small']):.3f})")


if __name__ == "__main__":
    main()
