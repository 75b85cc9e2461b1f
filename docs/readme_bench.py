"""The small measurement behind the table in README.rst.

Run from the repository root: ``python docs/readme_bench.py [DIR]``. It
writes a 100 MB float32 array (a random walk: smooth data, like a signal or
an image, that compresses a little) with cpersist and with ``np.save``, and
reads it back, timing the best of 3 runs with the file in the page cache
(warm reads; the full benchmark, ``python -m cpersist.benchmarks``, also
measures cold reads and peak memory). Prints an RST table.
"""

import os
import sys
import tempfile
import time

import numpy as np

import cpersist


def best_of(n, func):
    times = []
    for _ in range(n):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(directory):
    rng = np.random.default_rng(0)
    data = np.cumsum(rng.standard_normal(25_000_000, dtype=np.float32), dtype=np.float32)
    assert data.nbytes == 100_000_000
    rows = []

    def measure(label, path, save, load):
        write_s, _ = best_of(3, save)
        read_s, back = best_of(3, load)
        assert np.array_equal(np.asarray(back), data)
        size = os.path.getsize(path)
        rows.append((label, size / 1e6, data.nbytes / size, write_s, read_s))
        os.remove(path)

    npy = os.path.join(directory, "a.npy")
    measure("``np.save`` / ``np.load``", npy,
            lambda: np.save(npy, data), lambda: np.load(npy))
    cp = os.path.join(directory, "a.cp")
    measure("cpersist ``compress=0``", cp,
            lambda: cpersist.dump(data, cp), lambda: cpersist.load(cp))
    measure("cpersist ``compress=0``, ``mmap_mode='r'`` [#touch]_", cp,
            lambda: cpersist.dump(data, cp),
            lambda: _touched(cpersist.load(cp, mmap_mode="r")))
    measure("cpersist ``compress=3`` (zstd-auto)", cp,
            lambda: cpersist.dump(data, cp, compress=3), lambda: cpersist.load(cp))
    measure("cpersist ``compress='blosc:lz4'``", cp,
            lambda: cpersist.dump(data, cp, compress="blosc:lz4"), lambda: cpersist.load(cp))
    npz = os.path.join(directory, "a.npz")
    measure("``np.savez_compressed``", npz,
            lambda: np.savez_compressed(npz, a=data), lambda: np.load(npz)["a"])

    head = ("Method", "File (MB)", "Ratio", "Write (s)", "Read (s)")
    cells = [head] + [(r[0], f"{r[1]:.1f}", f"{r[2]:.2f}", f"{r[3]:.3f}", f"{r[4]:.3f}")
                      for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    print(rule)
    for i, c in enumerate(cells):
        print("  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())
        if i == 0:
            print(rule)
    print(rule)


def _touched(arr):
    arr.sum()  # read every page of the mapping, so the read is not free
    return arr


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory(dir=".") as tmp:
            main(tmp)
