"""Size and time of cpersist at two git revisions side by side, in one process.

Each repeat dumps and loads a fitted ``RandomForestClassifier(n_estimators=100)``
on ``load_digits`` and a 100 MB float64 array, raw and ``compress=3``, with
both revisions (the order rotating), and keeps the minimum of each. With
``--control`` a second copy of the old revision runs too: the difference it
shows is the noise.

Run from the repository root::

    python benchmarks/format_ab.py OLD_REV [NEW_REV] [--repeat 40] [--threads 1] [--clock cpu] [--control]

``NEW_REV`` defaults to the working tree. Each revision's ``cpersist``
package is exported with ``git archive`` into a temporary directory under its
own package name, so the revisions are imported side by side.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import import_module

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def export(rev, name, into):
    """The ``cpersist`` package at ``rev`` (None: the working tree) as package ``name``."""
    target = os.path.join(into, name)
    if rev is None:
        shutil.copytree(os.path.join(ROOT, "cpersist"), target,
                        ignore=shutil.ignore_patterns("__pycache__"))
    else:
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "cpersist"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
        os.rename(os.path.join(into, "cpersist"), target)
    # The codec table names its modules by absolute dotted paths.
    registry = os.path.join(target, "codecs", "registry.py")
    if os.path.exists(registry):
        with open(registry) as f:
            text = f.read()
        with open(registry, "w") as f:
            f.write(text.replace('"cpersist.codecs.', f'"{name}.codecs.'))
    lib = import_module(name)
    import_module(name + ".pickler")  # the module whose functions the pickle stream names
    return lib


def use(lib):
    """Point the ``cpersist.*`` names a pickle stream may import at ``lib``'s modules."""
    for module in [m for m in sys.modules if m == "cpersist" or m.startswith("cpersist.")]:
        del sys.modules[module]
    prefix = lib.__name__
    for module in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        sys.modules["cpersist" + module[len(prefix):]] = sys.modules[module]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the revision to compare against (a commit, tag or branch)")
    parser.add_argument("new", nargs="?", help="the revision to measure (default: the working tree)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="n_threads (default: all CPUs)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time of all threads, less disturbed by other processes")
    parser.add_argument("--control", action="store_true",
                        help="also run a second copy of OLD: its difference is the noise")
    args = parser.parse_args(argv)

    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier

    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    tree = tempfile.mkdtemp(prefix="cpersist-format-ab-")
    sys.path.insert(0, tree)
    try:
        libs = {"old": export(args.old, "cpersist_old", tree),
                "new": export(args.new, "cpersist_new", tree)}
        if args.control:
            libs["old again"] = export(args.old, "cpersist_control", tree)
        X, y = load_digits(return_X_y=True)
        forest = RandomForestClassifier(n_estimators=100, random_state=0).fit(X, y)
        big = np.random.default_rng(0).standard_normal(12_500_000)  # 100 MB float64
        for name, obj in (("forest", forest), ("array100MB", big)):
            for compress in (0, 3):
                best = {v: {"dump": float("inf"), "load": float("inf")} for v in libs}
                order = list(libs.items())
                for i in range(args.repeat):
                    for v, lib in order[i % len(order):] + order[:i % len(order)]:
                        path = os.path.join(tree, f"{v.replace(' ', '-')}.cp")
                        use(lib)
                        t = clock()
                        lib.dump(obj, path, compress=compress, n_threads=args.threads)
                        best[v]["dump"] = min(best[v]["dump"], clock() - t)
                        t = clock()
                        lib.load(path, n_threads=args.threads)
                        best[v]["load"] = min(best[v]["load"], clock() - t)
                        best[v]["bytes"] = os.path.getsize(path)
                b, a = best["old"], best["new"]
                print(f"{name:10s} compress={compress}  bytes {b['bytes']:>10d} -> {a['bytes']:>10d} "
                      f"({(a['bytes'] / b['bytes'] - 1) * 100:+.3f}%)  "
                      f"dump {b['dump'] * 1e3:7.2f} -> {a['dump'] * 1e3:7.2f} ms "
                      f"({(a['dump'] / b['dump'] - 1) * 100:+.1f}%)  "
                      f"load {b['load'] * 1e3:7.2f} -> {a['load'] * 1e3:7.2f} ms "
                      f"({(a['load'] / b['load'] - 1) * 100:+.1f}%)", flush=True)
                if "old again" in best:
                    c = best["old again"]
                    print(f"{'':10s} control (old vs old): dump {(c['dump'] / b['dump'] - 1) * 100:+.1f}%  "
                          f"load {(c['load'] / b['load'] - 1) * 100:+.1f}%", flush=True)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


if __name__ == "__main__":
    main()
