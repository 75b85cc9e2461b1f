"""What a commit costs on a growing file of many chunks against one of a few.

    python benchmarks/growing_commit_lab.py [--big-gb 10] [--commits 100] [--dir DIR]
                                            [--keep] [--profile]

Every commit of a growing file writes the index of its whole state, so the
part of its cost that grows with the file's chunk count is what keeps an
append to a large file from costing what one to a small file does. A raw
growing file of about ``--big-gb`` GB (4 MB chunks, about 250 per GB) is
built as ``growing_size_lab.py`` builds it, and one of 6 chunks; then
``--commits`` appends of 16 rows (8 KB: the commit all but alone) are made to
each, alternating. Printed: the median and minimum CPU time of a commit to
each (microseconds) and their ratios. Each run adds ``--commits`` chunks to
the large file; ``--keep`` keeps it in ``--dir`` for the next run.
``--profile`` prints where the large file's commits spend their time.
"""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import cpersist  # noqa: E402

from growing_size_lab import COLUMNS, build  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-gb", type=float, default=10)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    if args.keep and not args.dir:
        parser.error("--keep needs --dir")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        big = os.path.join(args.dir if args.keep else tmp, "growing-commit-big.cp")
        small = os.path.join(tmp, "small.cp")
        if not os.path.exists(big):
            build(big, int(args.big_gb * 1e9))
        build(small, 20_000_000)
        rows = np.random.default_rng(1).standard_normal((16, COLUMNS)).astype(np.float32)
        cpu = {"big": [], "small": []}
        profile = cProfile.Profile() if args.profile else None
        with cpersist.open(big, "a") as b, cpersist.open(small, "a") as s:
            handles = {"big": b, "small": s}
            for handle in handles.values():
                handle.append("obj['x']", rows)  # the first commit after opening is not timed
            for i in range(args.commits):
                for name in (("big", "small") if i % 2 else ("small", "big")):
                    if profile and name == "big":
                        profile.enable()
                    start = time.process_time()
                    handles[name].append("obj['x']", rows)
                    cpu[name].append(time.process_time() - start)
                    if profile and name == "big":
                        profile.disable()
        size = os.path.getsize(big)
        med = {name: statistics.median(times) for name, times in cpu.items()}
        low = {name: min(times) for name, times in cpu.items()}
        print(f"CPU time of a commit: {med['big'] * 1e6:.0f} us median, {low['big'] * 1e6:.0f} us "
              f"minimum to the file of {size / 1e9:.1f} GB; {med['small'] * 1e6:.0f} us, "
              f"{low['small'] * 1e6:.0f} us to the one of 20 MB (ratio of the medians "
              f"{med['big'] / med['small']:.2f}, of the minimums {low['big'] / low['small']:.2f}; "
              f"load {os.getloadavg()[0]:.1f})")
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(20)


if __name__ == "__main__":
    main()
