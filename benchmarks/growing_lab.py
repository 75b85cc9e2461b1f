"""Time appends of row batches to a growing file: whether an append costs the
same however many came before it.

    python benchmarks/growing_lab.py [--appends 200] [--rows 10000] [--columns 128]
                                     [--compress 0 3] [--dir DIR]

The data is the issue's: batches of ``rows x columns`` float32, half smooth
and half noise. For each ``--compress``, a file is dumped with
``growing=True`` holding an empty array, then the batches are appended
through one ``cpersist.open(path, "a")``. Printed per codec: the median
time of the first 50 appends and of the last 50 and their ratio (the
target is at most 1.15), in wall-clock time and in the process's CPU time
(all its threads; less swayed by other processes on a shared machine and by
the kernel's writeback of the file), the total, the file's size, and the time of a
slice crossing 10 batches through ``cpersist.open``.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import cpersist  # noqa: E402


def batch(i, rows, columns):
    rng = np.random.default_rng(i)
    if i % 2:
        return rng.standard_normal((rows, columns)).astype(np.float32)
    smooth = np.linspace(i, i + 1, rows * columns, dtype=np.float32).reshape(rows, columns)
    return smooth + np.sin(smooth)


def run(path, compress, appends, rows, columns):
    batches = [batch(i, rows, columns) for i in range(4)]  # made once: time the appends only
    cpersist.dump({"x": np.zeros((0, columns), np.float32)}, path, compress=compress,
                  growing=True)
    times, cpu = [], []
    with cpersist.open(path, "a") as f:
        for i in range(appends):
            start, start_cpu = time.perf_counter(), time.process_time()
            f.append("obj['x']", batches[i % 4])
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    with cpersist.open(path) as f:
        x = f.arrays["obj['x']"]
        middle = appends // 2 * rows
        start = time.perf_counter()
        x[middle - 5 * rows + rows // 2:middle + 5 * rows - rows // 2]
        slice_time = time.perf_counter() - start
    return times, cpu, os.path.getsize(path), slice_time


def _medians(what, times):
    first, last = statistics.median(times[:50]), statistics.median(times[-50:])
    return (f"median {what} time of the first 50 appends {first * 1e3:.2f} ms, of the last "
            f"50 {last * 1e3:.2f} ms (ratio {last / first:.3f})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--columns", type=int, default=128)
    parser.add_argument("--compress", nargs="+", default=["0", "3"])
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    print(f"{args.appends} appends of {args.rows} x {args.columns} float32 "
          f"({args.rows * args.columns * 4 / 1e6:.1f} MB each)")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for compress in args.compress:
            compress = int(compress) if compress.isdigit() else compress
            path = os.path.join(tmp, "grow.cp")
            times, cpu, size, slice_time = run(path, compress, args.appends, args.rows,
                                               args.columns)
            print(f"compress={compress!r}: {_medians('wall', times)}; {_medians('CPU', cpu)}; "
                  f"total {sum(times):.2f} s; file {size / 1e6:.1f} MB; slice across 10 "
                  f"batches {slice_time * 1e3:.1f} ms")
            os.remove(path)


if __name__ == "__main__":
    main()
