"""Concurrent ``mmap_mode="r+"`` loads and plain loads of one file.

An ``r+`` load marks the file edited in place; plain loads of the same file
at the same moment must neither fail nor see it damaged, and neither must
the other ``r+`` loads. Each trial dumps a new file, then releases worker
processes at once (a barrier): ``--rplus`` of them load it ``r+``,
``--plain`` of them plainly (checksums verified); every error is counted by
its message, and the file is verified afterwards::

    python benchmarks/rplus_race.py [--trials 150] [--rplus 3] [--plain 3]
"""

import argparse
import collections
import multiprocessing
import os
import tempfile

import numpy as np


def _worker(mode, barrier, paths, results):
    import cpersist

    while True:
        barrier.wait()
        path = paths.get()
        if path is None:
            return
        try:
            obj = cpersist.load(path, mmap_mode=mode)
            ok = int(obj["x"][123]) == 123 and obj["name"] == "race"
            results.put((mode, "ok" if ok else "wrong values"))
        except Exception as exc:  # counted by message
            results.put((mode, f"{type(exc).__name__}: {str(exc).split(': ', 1)[-1][:80]}"))
        barrier.wait()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=150)
    parser.add_argument("--rplus", type=int, default=3)
    parser.add_argument("--plain", type=int, default=3)
    args = parser.parse_args(argv)
    import cpersist

    modes = ["r+"] * args.rplus + [None] * args.plain
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(modes) + 1)
    paths = [ctx.Queue() for _ in modes]
    results = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(mode, barrier, q, results))
               for mode, q in zip(modes, paths)]
    for w in workers:
        w.start()
    counts = collections.Counter()
    damaged = 0
    with tempfile.TemporaryDirectory() as tmp:
        for trial in range(args.trials):
            path = os.path.join(tmp, f"t{trial}.cp")
            cpersist.dump({"x": np.arange(1 << 16), "y": np.ones(1 << 15),
                           "name": "race"}, path)
            for q in paths:
                q.put(path)
            barrier.wait()  # all load at once
            barrier.wait()  # all done
            for _ in modes:
                mode, outcome = results.get()
                counts[(mode or "plain", outcome)] += 1
            try:
                cpersist.verify(path)  # raises on damage
            except cpersist.CorruptFileError:
                damaged += 1
            os.unlink(path)
        for q in paths:
            q.put(None)
        barrier.wait()
        for w in workers:
            w.join()
    print(f"{args.trials} trials, {args.rplus} r+ and {args.plain} plain loads each "
          f"({args.trials * args.rplus} r+, {args.trials * args.plain} plain):")
    for (mode, outcome), n in sorted(counts.items()):
        print(f"  {mode:5s} {outcome}: {n}")
    print(f"  files damaged afterwards: {damaged}")
    return 1 if damaged or any(o != "ok" for _, o in counts) else 0


if __name__ == "__main__":
    raise SystemExit(main())
