"""The shipped benchmark's random forest (or a model of many small arrays)
dumped raw and loaded (trusted, and restricted with scikit-learn allowed)
against ``pickle`` at protocol 5, in one process, in paired rounds, by CPU
time (all threads), optionally with an older revision of cpersist side by
side.

    python benchmarks/forest_pickle.py [--old REV] [--rounds 40] [--trees 100]
    python benchmarks/forest_pickle.py --arrays 400 --size 70000
    python benchmarks/forest_pickle.py --arrays 4000 --min-size 8000 --size 70000 --mixed

``--arrays N`` measures a dict of ``N`` float64 arrays of ``--size`` bytes
each instead of the forest (from 64 KiB, each a section of its own in a raw
dump); with ``--min-size`` their sizes are spread evenly from it to
``--size`` (in random order), and ``--mixed`` cycles their dtypes and gives every other 2-D
array Fortran order.

Each round runs every step once, in turn, the garbage collector run before
each; printed: the minimum and the median of each step and their ratios to
pickle's, and the median of the minor page faults each step took. A load
makes a model's memory anew, and whether glibc's malloc gives it pages freed
by the step before or fresh ones from the kernel (about 3 ms more for the
forest's 6 MB, on either side) follows from what ran before, not from the
loader: ``--steady-malloc`` fixes malloc's trim and map thresholds (glibc's
``mallopt``), so that freed memory is kept and every step measures its own
work, none faulting pages in. ``--charge-deferred`` times a cpersist dump
until the work it leaves to cpersist's ``run_later`` thread (closing the
file it replaced, whose deletion frees the old file's pages and blocks) is
done: without it, that CPU time lands in whatever step runs next, here the
load. ``--old`` adds the dump and loads of ``REV`` (exported as in
:mod:`format_ab`), each revision reading its own file.
"""

import argparse
import gc
import os
import pickle
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from format_ab import export, use  # noqa: E402


def forest(trees):
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier

    digits = load_digits()
    return RandomForestClassifier(n_estimators=trees, random_state=0, n_jobs=1).fit(
        digits.data, digits.target)


def arrays(count, size, min_size=None, mixed=False):
    """``{"w0": array, ...}``: ``count`` arrays of ``size`` bytes (from
    ``min_size`` to ``size``, evenly spread, in random order), float64, or with ``mixed``
    dtypes cycled and every other 2-D array in Fortran order."""
    import numpy as np

    rng = np.random.default_rng(0)
    dtypes = ["<f8", "<f4", "<i8", "<i4", "u1", "<c8", "?", ">f8"] if mixed else ["<f8"]
    sizes = ([size] * count if min_size is None else  # shuffled, as a model's layers are
             rng.permutation([min_size + (size - min_size) * i // max(count - 1, 1)
                              for i in range(count)]).tolist())
    model = {}
    for i, nbytes in enumerate(sizes):
        dtype = np.dtype(dtypes[i % len(dtypes)])
        items = max(nbytes // dtype.itemsize, 1)
        arr = rng.integers(0, 100, items).astype(dtype)
        if mixed and i % 3:
            arr = arr[:items - items % 4].reshape(-1, 4)
            if i % 3 == 2:
                arr = np.asfortranarray(arr)
        model[f"w{i}"] = arr
    return model


def steady_malloc():
    """Fix glibc malloc's thresholds: freed memory is never given back to
    the kernel (trim), and blocks up to 32 MiB come from the heap, not maps
    of their own; both otherwise move with what the process freed last."""
    import ctypes

    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3
    if not (libc.mallopt(m_trim_threshold, 1 << 30) and
            libc.mallopt(m_mmap_threshold, 32 << 20)):
        raise SystemExit("--steady-malloc: mallopt failed (not glibc?)")


def cpersist_steps(lib, label, model, directory, charge_deferred=False):
    """``{name: (lib, step)}``: ``lib`` is put in place (:func:`use`: the
    stream names cpersist.pickler) before each step, untimed: it walks every
    module the process has imported. With ``charge_deferred`` the dump step
    waits for the work it left to ``lib``'s run_later thread."""
    path = os.path.join(directory, f"{label}.cp")
    run_later = sys.modules[f"{lib.__name__}._runtime.threads"].run_later

    def dump():
        lib.dump(model, path, compress=0)
        if charge_deferred:
            done = threading.Event()
            run_later(done.set)
            done.wait()

    return {
        f"{label} dump": (lib, dump),
        f"{label} load": (lib, lambda: lib.load(path)),
        f"{label} restricted load": (lib, lambda: lib.load(path, trusted=["sklearn"])),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="a revision to measure beside the working tree")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--arrays", type=int, help="measure a dict of this many arrays, "
                        "not the forest")
    parser.add_argument("--size", type=int, default=70000, help="bytes of each array")
    parser.add_argument("--min-size", type=int, help="sizes spread from this to --size")
    parser.add_argument("--mixed", action="store_true", help="mixed dtypes, C and F orders")
    parser.add_argument("--charge-deferred", action="store_true",
                        help="time a cpersist dump until its deferred work is done")
    parser.add_argument("--steady-malloc", action="store_true",
                        help="keep freed memory in the process (glibc mallopt)")
    args = parser.parse_args(argv)
    if args.steady_malloc:
        steady_malloc()
    packages = tempfile.mkdtemp(prefix="forest-pickle-")
    sys.path.insert(0, packages)
    libs = {"new": export(None, "cp_new", packages)}
    if args.old:
        libs["old"] = export(args.old, "cp_old", packages)
    if args.arrays:
        model = arrays(args.arrays, args.size, args.min_size, args.mixed)
        what = (f"{args.arrays} arrays of {args.min_size or args.size}-{args.size} bytes"
                f"{' (mixed)' if args.mixed else ''}")
    else:
        model = forest(args.trees)
        what = f"{args.trees} trees"
    directory = tempfile.mkdtemp(prefix="forest-pickle-files-")
    pickled = os.path.join(directory, "forest.pkl")

    def pickle_dump():
        with open(pickled, "wb") as file:
            pickle.dump(model, file, protocol=5)

    def pickle_load():
        with open(pickled, "rb") as file:
            return pickle.load(file)

    try:
        steps = {"pickle dump": (None, pickle_dump), "pickle load": (None, pickle_load)}
        for label, lib in libs.items():
            steps.update(cpersist_steps(lib, label, model, directory, args.charge_deferred))
        for lib, step in steps.values():  # the files written, the code paths warm
            if lib is not None:
                use(lib)
            step()
        times = {name: [] for name in steps}
        faults = {name: [] for name in steps}
        for _ in range(args.rounds):
            for name, (lib, step) in steps.items():
                if lib is not None:
                    use(lib)
                gc.collect()
                faulted = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.process_time()
                step()
                times[name].append(time.process_time() - start)
                faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faulted)
        print(f"{what}, {args.rounds} rounds, CPU time of all threads; "
              f"load average {os.getloadavg()[0]:.1f}")
        for name, ts in times.items():
            base = times["pickle dump" if name.endswith("dump") else "pickle load"]
            print(f"{name:26s} min {min(ts) * 1e3:7.2f} ms  median {statistics.median(ts) * 1e3:7.2f} ms"
                  f"   / pickle's: min {min(ts) / min(base):.2f}  median "
                  f"{statistics.median(ts) / statistics.median(base):.2f}"
                  f"   page faults: median {statistics.median(faults[name]):.0f}")

    finally:  # the exported packages and the files written
        shutil.rmtree(packages, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)

if __name__ == "__main__":
    main()
