"""Compare joblib.Memory's default store with cpersist's store backend.

    python benchmarks/memory_store.py [--repeat N] [--dir DIRECTORY]

For each object, a cached function returning it is called twice on an empty
cache: the first call's time is the cache write (argument hashing, dump,
metadata), the second's the cache hit (hashing and load). Stores: joblib's
default (``backend="local"``) and ``backend="cpersist"``, each raw
(``compress=0``) and at ``compress=3`` (zlib for joblib, zstd-auto for
cpersist); raw stores also with a hit through ``mmap_mode="r"``. Objects:

(a) a RandomForestClassifier(n_estimators=100, random_state=0) fitted on
    scikit-learn's digits;
(b) a smooth float32 volume of 200 x 256 x 512 (105 MB): the cumulative
    sum of seeded gaussian noise along the first axis.

Medians over ``--repeat`` rounds (min-max beside them), the stores taking
turns within each round; the written files are flushed to disk (os.sync,
untimed) before the hits, which find them in the page cache. Size is the
cached output file's.
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings

import joblib
import numpy as np

import cpersist

#: The objects the cached function returns, by name (filled by main()).
OBJECTS = {}

STORES = [
    # label, Memory arguments
    ("joblib raw", dict(backend="local", compress=0)),
    ("joblib compress=3", dict(backend="local", compress=3)),
    ("cpersist raw", dict(backend="cpersist", compress=0)),
    ("cpersist compress=3", dict(backend="cpersist", compress=3)),
]


def produce(name):
    return OBJECTS[name]


def make_forest():
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier

    x, y = load_digits(return_X_y=True)
    return RandomForestClassifier(n_estimators=100, random_state=0).fit(x, y)


def make_volume():
    rng = np.random.default_rng(0)
    return np.cumsum(rng.standard_normal((200, 256, 512), dtype=np.float32), axis=0)


def timed(func, *args):
    t0 = time.perf_counter()
    result = func(*args)
    return time.perf_counter() - t0, result


def one_round(name, label, options, directory):
    location = os.path.join(directory, label.replace(" ", "_").replace("=", ""))
    shutil.rmtree(location, ignore_errors=True)
    memory = joblib.Memory(location, verbose=0, **options)
    func = memory.cache(produce)
    write, _ = timed(func, name)
    # Neither store fsyncs; flushing here keeps the write-back of one store's
    # files out of the next timing.
    os.sync()
    hit, result = timed(func, name)
    del result
    output = os.path.join(memory.store_backend.location, func.func_id,
                          func._get_args_id(name), "output.pkl")
    size = os.path.getsize(output)
    mapped_hit = None
    if not options["compress"]:
        mapped = joblib.Memory(location, verbose=0, mmap_mode="r", **options).cache(produce)
        mapped_hit, result = timed(mapped, name)
        assert isinstance(result, np.memmap) or name != "volume"
        del result
    shutil.rmtree(location, ignore_errors=True)
    return write, hit, mapped_hit, size


def spread(values):
    med = statistics.median(values)
    return f"{med * 1e3:8.1f} ({min(values) * 1e3:.1f}-{max(values) * 1e3:.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the caches go (default: a "
                        "temporary directory, removed at the end)")
    args = parser.parse_args()
    cpersist.register_joblib_backend()
    OBJECTS["forest"] = make_forest()
    OBJECTS["volume"] = make_volume()
    directory = tempfile.mkdtemp(prefix="memory-store-bench-", dir=args.dir)
    print(f"joblib {joblib.__version__}, cpersist {cpersist.__version__}, "
          f"{os.cpu_count()} CPUs, {args.repeat} rounds, caches in {directory}")
    try:
        for name in OBJECTS:
            runs = {label: [] for label, _ in STORES}
            for _ in range(args.repeat):
                for label, options in STORES:
                    with warnings.catch_warnings():
                        warnings.simplefilter("error")  # a CacheWarning would void the run
                        runs[label].append(one_round(name, label, options, directory))
            print(f"\n{name}: median ms (min-max)")
            print(f"{'store':<22}{'write':>22}{'hit':>22}{'hit, mmap_mode=r':>24}"
                  f"{'size MB':>10}")
            for label, _ in STORES:
                writes, hits, mapped, sizes = zip(*runs[label])
                mapped_text = spread(mapped) if mapped[0] is not None else "-"
                print(f"{label:<22}{spread(writes):>22}{spread(hits):>22}"
                      f"{mapped_text:>24}{sizes[0] / 1e6:>10.2f}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
