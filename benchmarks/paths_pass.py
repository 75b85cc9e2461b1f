"""What the dump's pass looking for array paths costs on large objects of
literals, beside ``pickle.dump`` of the same object.

Run from the repository root::

    python benchmarks/paths_pass.py [--repeat 9] [--old REV]

For each object, a raw ``cpersist.dump`` and ``pickle.dump`` (protocol 5)
to a file are timed in turn within every round, in CPU time (the process's:
a dump's pool threads count), and the CPU time of the pass alone
(:func:`cpersist.pickling.object_paths.object_paths`, as the dump calls it)
is noted. ``--old REV`` times the dump with that revision's pass too, in
the same rounds (the rest of the dump is this checkout's).
Printed: min and median of each, the dump's ratio to ``pickle.dump``, and
the load average.
"""

import argparse
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def objects():
    config = {f"section{i}": {"lr": 1e-3 * i, "name": f"layer{i}", "sizes": [i, 2 * i, 3 * i],
                              "flags": {"a": True, "b": None}, "betas": (0.9, 0.999)}
              for i in range(20_000)}
    return {
        "200k-key dict + 1 array": {f"k{i}": i for i in range(200_000)} | {"a": np.zeros(10**6)},
        "1e6 floats + 2 arrays": {"x": [float(i) for i in range(10**6)], "a": np.zeros(10**6),
                                  "b": np.ones(10**5)},
        "nested config + 3 arrays": {"config": config, "w": np.zeros(10**6),
                                     "b": np.ones(10**5), "e": np.arange(10**5)},
    }


def _cpu(func):
    start = time.process_time()
    func()
    return time.process_time() - start


def _pass_at(rev):
    """``object_paths`` as :mod:`cpersist.pickling.object_paths` is at git revision ``rev``."""
    import types

    source = subprocess.run(["git", "-C", HERE, "show", f"{rev}:cpersist/pickling/object_paths.py"],
                            check=True, capture_output=True, text=True).stdout
    module = types.ModuleType("cpersist.pickling._old_object_paths")
    module.__package__ = "cpersist.pickling"
    exec(compile(source, f"{rev}:object_paths.py", "exec"), module.__dict__)
    return module.object_paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--old", help="a git revision whose pass to time beside this checkout's")
    args = parser.parse_args(argv)
    sys.path.insert(0, HERE)
    import cpersist
    from cpersist.pickling import write

    passes = {}

    def timing(way, real):
        def timed(*a, **k):
            start = time.process_time()
            result = real(*a, **k)
            passes[way].append((time.process_time() - start, result is not None))
            return result
        return timed

    real = write.object_paths
    ways = {"pickle.dump": None, "cpersist.dump": timing("cpersist.dump", real)}
    if args.old:
        ways[f"cpersist.dump, pass@{args.old}"] = timing(f"cpersist.dump, pass@{args.old}",
                                                         _pass_at(args.old))
    print(f"load average {os.getloadavg()[0]:.2f} (before)")
    try:
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "x")
            for name, obj in objects().items():
                times = {way: [] for way in ways}
                passes.update((way, []) for way in ways)
                for _ in range(args.repeat):
                    for way, pass_ in ways.items():
                        if pass_ is None:
                            times[way].append(_cpu(lambda: _pickle(obj, path)))  # noqa: B023
                        else:
                            write.object_paths = pass_
                            times[way].append(_cpu(lambda: cpersist.dump(obj, path)))  # noqa: B023
                        os.unlink(path)
                base, low = statistics.median(times["pickle.dump"]), min(times["pickle.dump"])
                print(f"{name}")
                for way, t in times.items():
                    print(f"  {way:30s} min {min(t) * 1e3:8.1f} ms  median "
                          f"{statistics.median(t) * 1e3:8.1f} ms  x{statistics.median(t) / base:.2f}"
                          f" (min/min x{min(t) / low:.2f})")
                    if passes[way]:
                        cpu = [c for c, _ in passes[way]]
                        print(f"    its pass: min {min(cpu) * 1e3:8.3f} ms  median "
                              f"{statistics.median(cpu) * 1e3:8.3f} ms, paths recorded: "
                              f"{passes[way][-1][1]}")
    finally:
        write.object_paths = real
    print(f"load average {os.getloadavg()[0]:.2f} (after)")


def _pickle(obj, path):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=5)


if __name__ == "__main__":
    main()
