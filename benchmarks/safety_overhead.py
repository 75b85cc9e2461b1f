"""Measure what cpersist's safety costs (numbers quoted in docs/safety.rst).

    python benchmarks/safety_overhead.py [directory]

1. Checksum verification on load: a 100 MB float64 array compressed with the
   default codec (zstd 3), loaded with verify=True vs verify=False; and the
   same array raw. 2. fsync on dump: a 100 MB raw array dumped with
   fsync=False vs fsync=True. Medians of 7 runs, page cache warm.
"""

import os
import statistics
import sys
import tempfile
import time
import zlib

import numpy as np

import cpersist


def median_time(func, runs=7):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(directory):
    rng = np.random.default_rng(0)
    # Smooth, quantised data: compresses ~2-3x, like many real arrays.
    arr = np.cumsum(rng.standard_normal(12_500_000)).round(2)  # 100 MB
    path = os.path.join(directory, "safety_bench.cp")
    print(f"crc32 alone on 100 MB: {median_time(lambda: zlib.crc32(arr)) * 1e3:.1f} ms")
    for compress in ("zstd", 0):
        cpersist.dump({"a": arr}, path, compress=compress)
        size = os.path.getsize(path)
        for n_threads in (1, None):
            on = median_time(lambda: cpersist.load(path, n_threads=n_threads))
            off = median_time(lambda: cpersist.load(path, verify=False, n_threads=n_threads))
            print(f"load {compress or 'raw'} ({size / 1e6:.0f} MB file), n_threads="
                  f"{n_threads or os.cpu_count()}: verify=True {on * 1e3:.0f} ms, "
                  f"verify=False {off * 1e3:.0f} ms, overhead {100 * (on - off) / off:.1f}%")
    print(f"cpersist.verify() of the raw file: "
          f"{median_time(lambda: cpersist.verify(path)) * 1e3:.0f} ms")
    plain = median_time(lambda: cpersist.dump({"a": arr}, path))
    synced = median_time(lambda: cpersist.dump({"a": arr}, path, fsync=True))
    print(f"dump raw 100 MB: fsync=False {plain * 1e3:.0f} ms, fsync=True "
          f"{synced * 1e3:.0f} ms (+{(synced - plain) * 1e3:.0f} ms)")
    os.unlink(path)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(dir=sys.argv[1] if len(sys.argv) > 1 else None) as d:
        main(d)
