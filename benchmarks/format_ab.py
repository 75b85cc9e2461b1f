"""Size and time of two cpersist checkouts side by side, in one process: each
repeat dumps and loads a fitted RandomForestClassifier(n_estimators=100) on
load_digits and a 100 MB float64 array, raw and compress=3, with both (the
order rotating), and the minimum of each is kept. With CONTROL=1 a second
copy of the old checkout runs too: the difference it shows is the noise.

Setup (OLD = a commit before the change)::

    mkdir -p /tmp/fab && git archive OLD cpersist | tar -x -C /tmp/fab
    mv /tmp/fab/cpersist /tmp/fab/cpersist_before
    cp -r cpersist /tmp/fab/cpersist_after
    cp -r /tmp/fab/cpersist_before /tmp/fab/cpersist_control
    for v in before after control; do
        sed -i "s/\"cpersist\.codecs\./\"cpersist_$v.codecs./" /tmp/fab/cpersist_$v/codecs/registry.py
    done
    PYTHONPATH= REPEAT=40 THREADS=1 CLOCK=cpu CONTROL=1 python benchmarks/format_ab.py
"""
import json, os, sys, time
sys.path.insert(0, "/tmp/fab")
import numpy as np
import cpersist_before, cpersist_after, cpersist_control
import cpersist_before.pickler, cpersist_after.pickler, cpersist_control.pickler


def use(lib):
    """The pickle stream names cpersist.pickler.*: point it at ``lib``'s."""
    sys.modules["cpersist"] = lib
    sys.modules["cpersist.pickler"] = lib.pickler
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier

X, y = load_digits(return_X_y=True)
forest = RandomForestClassifier(n_estimators=100, random_state=0).fit(X, y)
big = np.random.default_rng(0).standard_normal(12_500_000)  # 100 MB float64
REPEAT = int(os.environ.get("REPEAT", "20"))
THREADS = int(os.environ.get("THREADS", "0")) or None
#: CLOCK=cpu: process CPU time (all threads), less disturbed by other
#: processes on a shared machine than wall time.
clock = time.process_time if os.environ.get("CLOCK") == "cpu" else time.perf_counter
libs = {"1.1": cpersist_before, "2.0": cpersist_after}
if os.environ.get("CONTROL"):
    # A second copy of the old code: the difference it shows is the noise.
    libs["1.1 again"] = cpersist_control
for name, obj in (("forest", forest), ("array100MB", big)):
    for compress in (0, 3):
        best = {v: {"dump": 1e9, "load": 1e9} for v in libs}
        for i in range(REPEAT):
            order = list(libs.items())
            for v, lib in order[i % len(order):] + order[:i % len(order)]:
                path = f"/tmp/format2-ab-{v}.cp"
                use(lib)
                t = clock(); lib.dump(obj, path, compress=compress, n_threads=THREADS)
                best[v]["dump"] = min(best[v]["dump"], clock() - t)
                t = clock(); lib.load(path, n_threads=THREADS)
                best[v]["load"] = min(best[v]["load"], clock() - t)
                best[v]["bytes"] = os.path.getsize(path)
        b, a = best["1.1"], best["2.0"]
        print(f"{name:10s} compress={compress}  bytes {b['bytes']:>10d} -> {a['bytes']:>10d} "
              f"({(a['bytes'] / b['bytes'] - 1) * 100:+.3f}%)  "
              f"dump {b['dump'] * 1e3:7.2f} -> {a['dump'] * 1e3:7.2f} ms "
              f"({(a['dump'] / b['dump'] - 1) * 100:+.1f}%)  "
              f"load {b['load'] * 1e3:7.2f} -> {a['load'] * 1e3:7.2f} ms "
              f"({(a['load'] / b['load'] - 1) * 100:+.1f}%)", flush=True)
        if "1.1 again" in best:
            c = best["1.1 again"]
            print(f"{'':10s} control (1.1 vs 1.1): dump {(c['dump'] / b['dump'] - 1) * 100:+.1f}%  "
                  f"load {(c['load'] / b['load'] - 1) * 100:+.1f}%", flush=True)
for v in libs:
    if os.path.exists(f"/tmp/format2-ab-{v}.cp"):
        os.unlink(f"/tmp/format2-ab-{v}.cp")
