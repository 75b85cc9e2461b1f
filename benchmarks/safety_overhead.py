"""Measure what cpersist's safety costs (numbers quoted in docs/safety.rst).

    python benchmarks/safety_overhead.py [directory]

1. Checksum verification on load: a 100 MB float64 array compressed with the
   default codec (zstd 3), loaded with verify=True vs verify=False; and the
   same array raw. 2. fsync on dump: a 100 MB raw array dumped with
   fsync=False vs fsync=True. Medians of 15 alternating runs (7 for the rest), page cache
   warm.
"""

import os
import statistics
import sys
import tempfile
import time
import xxhash

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
    print(f"xxh3_64 alone on 100 MB: {median_time(lambda: xxhash.xxh3_64_intdigest(arr)) * 1e3:.1f} ms")
    for compress in ("zstd", 0):
        cpersist.dump({"a": arr}, path, compress=compress)
        size = os.path.getsize(path)
        for n_threads in (1, None):
            # Alternate the two settings so that noise hits both alike.
            times = {True: [], False: []}
            cpu = {True: [], False: []}
            for _ in range(15):
                for verify in (True, False):
                    c0, t0 = time.process_time(), time.perf_counter()
                    cpersist.load(path, verify=verify, n_threads=n_threads)
                    times[verify].append(time.perf_counter() - t0)
                    cpu[verify].append(time.process_time() - c0)
            on, off = statistics.median(times[True]), statistics.median(times[False])
            con, coff = statistics.median(cpu[True]), statistics.median(cpu[False])
            print(f"  CPU time (all threads): verify=True {con * 1e3:.0f} ms, verify=False "
                  f"{coff * 1e3:.0f} ms, overhead {100 * (con - coff) / coff:.1f}%")
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
