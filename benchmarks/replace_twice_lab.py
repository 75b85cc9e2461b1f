"""What a raw dump replacing a large file costs depending on what ran just
before it: np.save of another file, a dump to the same path, or that dump
and a pause.

    python benchmarks/replace_twice_lab.py [--size 1e9] [--rounds 5] [--pause 2] [--dir DIR]

Each round: np.save, then three dumps of the same array to one path (the
old file's pages still dirty, as in the paired raw benchmark), the third
after ``--pause`` seconds. On a virtual machine that gives freed memory
back to its host, a dump right after a dump to the same path (whose old
file is freed as the next one writes) has cost several times the system
time of one after np.save. Paired benchmarks that reverse their order
every other round run each contender right after itself at every other
turn.
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
from benchmarks.timing import remove_scratch  # noqa: E402


def timed(call):
    c0, t0 = time.process_time(), time.perf_counter()
    call()
    return time.perf_counter() - t0, time.process_time() - c0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=1e9)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause", type=float, default=2.0)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    arr = np.random.default_rng(0).random(int(args.size) // 8)
    directory = tempfile.mkdtemp(prefix="cpersist-replace-lab-", dir=args.dir)
    path, npy = os.path.join(directory, "a.cp"), os.path.join(directory, "a.npy")
    rows = {"np.save": [], "dump after np.save": [], "dump after a dump": [],
            f"dump {args.pause:g} s after a dump": []}
    try:
        np.save(npy, arr)
        cpersist.dump(arr, path)
        for _ in range(args.rounds):
            rows["np.save"].append(timed(lambda: np.save(npy, arr)))
            rows["dump after np.save"].append(timed(lambda: cpersist.dump(arr, path)))
            rows["dump after a dump"].append(timed(lambda: cpersist.dump(arr, path)))
            time.sleep(args.pause)
            rows[f"dump {args.pause:g} s after a dump"].append(
                timed(lambda: cpersist.dump(arr, path)))
        med = statistics.median
        for name, times in rows.items():
            wall, cpu = zip(*times)
            print(f"{name:26} wall {min(wall) * 1e3:7.0f} / {med(wall) * 1e3:7.0f} ms"
                  f"  cpu {min(cpu) * 1e3:7.0f} / {med(cpu) * 1e3:7.0f} ms (min / median)")
    finally:
        remove_scratch(directory)


if __name__ == "__main__":
    main()
