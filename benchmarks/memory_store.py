"""joblib.Memory's default store against ``backend="cpersist"``.

Run from the repository root (it is not installed with cpersist)::

    python -m benchmarks.memory_store RUN_DIR [--quick] [--repeat 5] [--size 100MB]

It writes ``memory.csv`` to the run's folder and prints its table.

For each object and store, a function returning the object is cached with
:class:`joblib.Memory` and called twice on an empty cache: the first call's
time is the cache write (hashing the arguments, dumping the output, writing
the metadata), the second's the cache hit (hashing and loading). Raw stores
are also hit through ``mmap_mode="r"``. Stores: joblib's default
(``backend="local"``) and cpersist's (:func:`cpersist.register_joblib_backend`),
each raw (``compress=0``) and at ``compress=3`` (zlib for joblib, zstd-auto
for cpersist). Objects: the random forest fitted on scikit-learn's digits and
the smooth 4-D atlas of the storage suite.

Each (object, store) runs in a fresh process; inside it, every repeat uses a
new cache directory, and the written files are flushed to disk (``os.sync``,
untimed) before the hit, which finds them in the page cache. Times are
medians over the repeats; ``file_bytes`` is the cached output file's size.
"""

import argparse
import os
import shutil
import sys
import statistics
import time
import warnings

from cpersist.benchmarks import datasets as ds
from cpersist.benchmarks.measure import run_in_subprocess
from cpersist.benchmarks.output import write_csv
from cpersist.tools.table import format_table

__all__ = ["MEMORY_COLUMNS", "STORES", "MEMORY_OBJECTS", "run_memory", "format_memory", "main"]

#: (label, joblib.Memory arguments), in display order.
STORES = [
    ("joblib raw", {"backend": "local", "compress": 0}),
    ("joblib compress=3", {"backend": "local", "compress": 3}),
    ("cpersist raw", {"backend": "cpersist", "compress": 0}),
    ("cpersist compress=3", {"backend": "cpersist", "compress": 3}),
]

#: The cached objects: names of storage-suite datasets.
MEMORY_OBJECTS = ("random_forest", "atlas_c")

MEMORY_COLUMNS = [
    "dataset", "store", "backend", "compress", "size_bytes", "file_bytes",
    "write_s", "hit_s", "hit_mmap_s", "repeats", "status", "reason", "write_times", "hit_times",
]

#: The object the cached function returns, set in the measuring process.
_OBJECTS = {}


def produce(name):
    """The cached function: returns the object of this process."""
    return _OBJECTS[name]


def _timed(func, *args):
    t0 = time.perf_counter()
    result = func(*args)
    return time.perf_counter() - t0, result


def _memory_task(task):
    import joblib

    import cpersist

    cpersist.register_joblib_backend()
    _OBJECTS[task["dataset"]] = ds.load_cached(task["data_path"])
    writes, hits, mapped_hits, size = [], [], [], None
    for r in range(task["repeats"]):
        location = os.path.join(task["work"], f"r{r}")
        shutil.rmtree(location, ignore_errors=True)
        memory = joblib.Memory(location, verbose=0, **task["options"])
        func = memory.cache(produce)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a CacheWarning means the store failed
            t_write, _ = _timed(func, task["dataset"])
            # Neither store fsyncs: flushing here keeps the write-back of the
            # files out of the next timing.
            os.sync()
            t_hit, result = _timed(func, task["dataset"])
        del result
        output = os.path.join(memory.store_backend.location, func.func_id,
                              func._get_args_id(task["dataset"]), "output.pkl")
        size = os.path.getsize(output)
        writes.append(t_write)
        hits.append(t_hit)
        if not task["options"]["compress"]:
            mapped = joblib.Memory(location, verbose=0, mmap_mode="r", **task["options"]).cache(produce)
            t_mapped, result = _timed(mapped, task["dataset"])
            mapped_hits.append(t_mapped)
            del result
        shutil.rmtree(location, ignore_errors=True)
    return {"status": "ok", "write_times": writes, "hit_times": hits, "mapped_times": mapped_hits,
            "file_bytes": size}


def run_memory(out_dir, data, repeats=3, timeout=1800, progress=True):
    """Rows (:data:`MEMORY_COLUMNS`) of caching each object of ``data`` (name
    -> what :func:`cpersist.benchmarks.datasets.save_cached` returns) with each store, one fresh
    process per (object, store), ``repeats`` write + hit rounds in it (medians
    reported); scratch caches in ``out_dir/_work/memory``."""
    from cpersist.benchmarks.runner import progress_bar

    work = os.path.join(out_dir, "_work", "memory")
    os.makedirs(work, exist_ok=True)
    rows = []
    bar = progress_bar(len(data) * len(STORES), desc="joblib.Memory", disable=not progress)
    try:
        for name, info in data.items():
            for label, options in STORES:
                bar.set_postfix_str(f"{name} | {label}")
                row = {c: "" for c in MEMORY_COLUMNS}
                row.update(dataset=name, store=label, backend=options["backend"],
                           compress=options["compress"], size_bytes=info["size_bytes"], repeats=repeats)
                task = {"op": "memory", "call": _memory_task, "dataset": name, "data_path": info["path"],
                        "options": options, "repeats": repeats, "work": os.path.join(work, label.replace(" ", "_"))}
                res = run_in_subprocess(task, timeout)
                bar.update(1)
                if res["status"] != "ok":
                    rows.append(dict(row, status="failed", reason=res.get("reason", "?")))
                    continue
                rows.append(dict(
                    row, status="ok", file_bytes=res["file_bytes"],
                    write_s=round(statistics.median(res["write_times"]), 6),
                    hit_s=round(statistics.median(res["hit_times"]), 6),
                    hit_mmap_s=round(statistics.median(res["mapped_times"]), 6) if res["mapped_times"] else "",
                    write_times=";".join(f"{t:.6g}" for t in res["write_times"]),
                    hit_times=";".join(f"{t:.6g}" for t in res["hit_times"]),
                ))
    finally:
        bar.close()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def format_memory(rows):
    """The suite's printed table: milliseconds and MB per dataset and store."""
    table = []
    for r in rows:
        if r["status"] != "ok":
            table.append([r["dataset"], r["store"], f"{r['status']}: {r['reason']}"])
            continue
        mapped = f"{float(r['hit_mmap_s']) * 1e3:.1f}" if r["hit_mmap_s"] != "" else "-"
        table.append([r["dataset"], r["store"], f"{float(r['write_s']) * 1e3:.1f}",
                      f"{float(r['hit_s']) * 1e3:.1f}", mapped, f"{int(r['file_bytes']) / 1e6:.3f}"])
    return format_table(["dataset", "store", "write ms", "hit ms", "hit mmap ms", "file MB"], table,
                        right=(2, 3, 4, 5))


def main(argv=None):
    """Measure, print the table, write ``memory.csv``; 1 when a row failed."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory_store",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="RUN_DIR", help="folder of a benchmark run (made if new)")
    parser.add_argument("--quick", action="store_true", help="tiny objects, one repeat")
    parser.add_argument("--repeat", type=int, default=None,
                        help="write + hit rounds per store (default 3; --quick: 1)")
    parser.add_argument("--size", default=None,
                        help="size of the atlas (as the benchmark's --size; default 1MB, "
                             "--quick: tiny)")
    parser.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                        help="seconds before one (object, store) is killed and reported failed")
    args = parser.parse_args(argv)
    size = ds.parse_size(args.size or ("tiny" if args.quick else "1MB"))
    cache_dir = os.path.join(args.out, "_work", "memory_data")
    os.makedirs(cache_dir, exist_ok=True)
    data = {d.name: ds.save_cached(d, d.make(size, args.quick),
                                          os.path.join(cache_dir, d.name + ".pkl"))
            for d in ds.select(list(MEMORY_OBJECTS), ds.all_datasets())}
    repeats = args.repeat or (1 if args.quick else 3)
    try:
        rows = run_memory(args.out, data, repeats=repeats, timeout=args.timeout, progress=False)
    finally:
        shutil.rmtree(os.path.join(args.out, "_work"), ignore_errors=True)
    write_csv(os.path.join(args.out, "memory.csv"), rows, MEMORY_COLUMNS)
    print(f"joblib.Memory: cache write and hit\n{format_memory(rows)}")
    return 1 if any(r["status"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    # Imported by its name, so that the measuring processes find its tasks.
    from benchmarks import memory_store

    sys.exit(memory_store.main())
