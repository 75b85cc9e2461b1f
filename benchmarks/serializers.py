"""The serializer comparison (picklebench): a dict of str -> int grown x4 from
1,000 entries, stored to and loaded from disk (each in a fresh process) with
pickle protocols 0-5, the pickler's "fast" mode (no memo), ``marshal``,
``json`` and cpersist; and ``dumps``/``loads`` of two small objects timed in
this process as :mod:`timeit` does (many calls per clock read, best of 7).
Sizes are MB = 10**6 bytes; ``rss_*`` are peaks above the level before the
call, ``rss_taken_MB`` what the loaded dict still holds, ``rss_per_file_MB``
the load's peak per MB of file. The store is not fsync-ed and the load reads
from the page cache, as in the original experiment.

Run from the repository root (it is not installed with cpersist)::

    python -m benchmarks.serializers RUN_DIR [--quick] [--max-entries N]

It writes ``serializers.csv``, ``small_objects.csv`` and ``serializers.png``
to the run's folder, which ``benchmarks/publish.py`` publishes.
"""

import argparse
import gc
import io
import json
import marshal
import os
import pickle
import shutil
import sys
import time

import cpersist

from cpersist.benchmarks.measure import PeakMemory, rss_bytes, run_in_subprocess
from cpersist.benchmarks.output import write_csv
from cpersist.tools.table import format_table

__all__ = ["SERIALIZERS", "SER_COLUMNS", "SMALL_COLUMNS", "make_dict", "run_serializers",
           "run_small_objects", "format_serializers", "plot_serializers", "main"]

MB = 1e6


def best_time(statement, namespace, number, repeat=7):
    """Seconds per call of ``statement``, best of ``repeat`` clock reads of
    ``number`` calls each, as ``python -m timeit`` measures."""
    import timeit
    timer = timeit.Timer(statement, globals=namespace)
    return min(timer.repeat(repeat=repeat, number=number)) / number


def make_dict(n):
    """The picklebench payload: ``{str(i): i for i in range(n)}``."""
    return dict((str(i), i) for i in range(n))


# Each serializer: (store(obj, path), load(path), dumps(obj) -> bytes, loads(bytes)).
def _pickle_ser(protocol, fast=False):
    def dumps(obj):
        bio = io.BytesIO()
        p = pickle.Pickler(bio, protocol=protocol)
        if fast:
            p.fast = True  # no memo: faster, only safe without shared/cyclic refs
        p.dump(obj)
        return bio.getvalue()

    def store(obj, path):
        with open(path, "wb") as f:
            p = pickle.Pickler(f, protocol=protocol)
            if fast:
                p.fast = True
            p.dump(obj)

    def load(path):
        with open(path, "rb") as f:
            return pickle.load(f)

    return store, load, dumps, pickle.loads


def _marshal_ser():
    def store(obj, path):
        with open(path, "wb") as f:
            marshal.dump(obj, f)

    def load(path):
        with open(path, "rb") as f:
            return marshal.load(f)

    return store, load, marshal.dumps, marshal.loads


def _json_ser():
    def store(obj, path):
        with open(path, "w") as f:
            json.dump(obj, f)

    def load(path):
        with open(path) as f:
            return json.load(f)

    return store, load, lambda o: json.dumps(o).encode(), lambda b: json.loads(b)


def _cpersist_ser(compress):
    def store(obj, path):
        cpersist.dump(obj, path, compress=compress)

    def dumps(obj):
        bio = io.BytesIO()
        cpersist.dump(obj, bio, compress=compress)
        return bio.getvalue()

    def load(path):
        return cpersist.load(path)

    def loads(b):
        return cpersist.load(io.BytesIO(b))

    return store, load, dumps, loads


def _serializers():
    s = {f"pickle{p}": _pickle_ser(p) for p in range(6)}
    s["pickle5-fast"] = _pickle_ser(5, fast=True)
    s["marshal"] = _marshal_ser()
    s["json"] = _json_ser()
    s["cpersist"] = _cpersist_ser(0)
    s["cpersist-c3"] = _cpersist_ser(3)
    return s


#: Serializer names in display order.
SERIALIZERS = list(_serializers())

SER_COLUMNS = [
    "serializer", "entries", "store_s", "load_s", "file_MB", "store_MBps", "load_MBps",
    "rss_store_MB", "rss_load_MB", "rss_taken_MB", "rss_per_file_MB", "status", "reason",
]
SMALL_COLUMNS = ["serializer", "object", "dumps_us", "loads_us", "bytes", "status", "reason"]


def _store_task(task):
    store = _serializers()[task["serializer"]][0]
    obj = make_dict(task["entries"])
    gc.collect()
    with PeakMemory() as pm:
        t0 = time.perf_counter()
        store(obj, task["path"])
        dt = time.perf_counter() - t0
    return {"status": "ok", "store_s": dt, "rss_store": pm.peak, "size": os.path.getsize(task["path"])}


def _load_task(task):
    load = _serializers()[task["serializer"]][1]
    gc.collect()
    with PeakMemory() as pm:
        t0 = time.perf_counter()
        obj = load(task["path"])
        dt = time.perf_counter() - t0
    taken = rss_bytes()[0] - pm.base
    expected = make_dict(task["entries"])
    if obj != expected:
        return {"status": "failed", "reason": "wrong data read back"}
    return {"status": "ok", "load_s": dt, "rss_load": pm.peak, "rss_taken": max(0, taken)}


def run_serializers(out_dir, max_entries=4_096_000, mem_budget_mb=4096, serializers=None,
                    timeout=1800, progress=True):
    """The growing-dict rows (:data:`SER_COLUMNS`): sizes 1000 * 4**k up to
    ``max_entries``, a serializer stopped before a size whose expected peak RSS
    (4x the previous size's) would exceed ``mem_budget_mb``; scratch files in
    ``out_dir/_work``; each store and load in a fresh process, killed after
    ``timeout`` seconds."""
    from cpersist.benchmarks.runner import progress_bar

    names = serializers or SERIALIZERS
    sizes = []
    n = 1000
    while n <= max_entries:
        sizes.append(n)
        n *= 4
    work = os.path.join(out_dir, "_work")
    os.makedirs(work, exist_ok=True)
    rows = []
    bar = progress_bar(len(names) * len(sizes), desc="picklebench", disable=not progress)
    for name in names:
        prev_peak = 0.0
        stopped = None
        for n in sizes:
            bar.update(1)
            row = {c: "" for c in SER_COLUMNS}
            row.update(serializer=name, entries=n)
            if stopped:
                rows.append(dict(row, status="n/a", reason=stopped))
                continue
            if prev_peak * 4 > mem_budget_mb:
                stopped = f"memory budget {mem_budget_mb:.0f} MB would be exceeded (~{prev_peak * 4:.0f} MB)"
                rows.append(dict(row, status="n/a", reason=stopped))
                continue
            path = os.path.join(work, f"pb_{name}_{n}.bin")
            task = {"op": "store", "call": _store_task, "serializer": name, "entries": n, "path": path}
            try:
                s = run_in_subprocess(task, timeout)
                if s["status"] == "ok":
                    r = run_in_subprocess(dict(task, op="load", call=_load_task), timeout)
                else:
                    r = s
            finally:
                if os.path.exists(path):
                    os.unlink(path)
            if r["status"] != "ok":
                rows.append(dict(row, status="failed", reason=r.get("reason", "?")))
                stopped = "stopped after a failure at a smaller size"
                continue
            file_mb = s["size"] / MB
            # The dict itself is also in memory in the store process: count it.
            prev_peak = max(s["rss_store"], r["rss_load"]) / MB + r["rss_taken"] / MB
            rows.append(dict(
                row,
                store_s=round(s["store_s"], 6), load_s=round(r["load_s"], 6), file_MB=round(file_mb, 4),
                store_MBps=round(file_mb / s["store_s"], 2) if s["store_s"] else "",
                load_MBps=round(file_mb / r["load_s"], 2) if r["load_s"] else "",
                rss_store_MB=round(s["rss_store"] / MB, 3), rss_load_MB=round(r["rss_load"] / MB, 3),
                rss_taken_MB=round(r["rss_taken"] / MB, 3),
                rss_per_file_MB=round(r["rss_load"] / s["size"], 3) if s["size"] else "",
                status="ok",
            ))
    bar.close()
    return rows


SMALL_OBJECTS = {
    "people": lambda: {"people": [{"name": "Alice"}]},
    "dict100": lambda: dict((str(n), n) for n in range(100)),
}


def _small_calls(name, dumps, loads):
    """``(namespace, dumps statement, loads statement)`` timed for one
    serializer: pickle's own functions for the protocols (what ``python -m
    timeit`` times, not a wrapper around a Pickler)."""
    if name.startswith("pickle") and name[6:].isdigit():
        return ({"dumps": pickle.dumps, "loads": pickle.loads, "p": int(name[6:])},
                "dumps(obj, protocol=p)", "loads(data)")
    return {"dumps": dumps, "loads": loads}, "dumps(obj)", "loads(data)"


def run_small_objects(number=2000):
    """Rows (:data:`SMALL_COLUMNS`, microseconds) of ``dumps``/``loads`` of
    the small objects, timed in this process as :mod:`timeit` does: ``number``
    calls per clock read, best of 7, so that the harness adds nothing to a call
    of a microsecond."""
    rows = []
    serializers = dict(_serializers(), **{"cpersist dumps/loads": (None, None, cpersist.dumps,
                                                                    cpersist.loads)})
    for name, (_, _, dumps, loads) in serializers.items():
        for oname, make in SMALL_OBJECTS.items():
            row = {c: "" for c in SMALL_COLUMNS}
            row.update(serializer=name, object=oname)
            obj = make()
            space, dumps_call, loads_call = _small_calls(name, dumps, loads)
            try:
                data = eval(dumps_call, dict(space, obj=obj))  # noqa: S307 (our own statement)
                if loads(data) != obj:
                    rows.append(dict(row, status="failed", reason="wrong data read back"))
                    continue
                space.update(obj=obj, data=data)
                d = best_time(dumps_call, space, number)
                lo = best_time(loads_call, space, number)
            except Exception as e:
                rows.append(dict(row, status="failed", reason=f"{type(e).__name__}: {e}"))
                continue
            rows.append(dict(row, dumps_us=round(d * 1e6, 3), loads_us=round(lo * 1e6, 3),
                             bytes=len(data), status="ok"))
    return rows


def format_serializers(rows, small):
    """The printed tables of :func:`run_serializers` and :func:`run_small_objects`."""
    big = format_table(
        ["serializer", "entries", "store_s", "load_s", "file_MB", "st MB/s", "ld MB/s", "rssLoad", "rss/MB"],
        [[r["serializer"], r["entries"], f"{r['store_s']:.4f}", f"{r['load_s']:.4f}", f"{r['file_MB']:.3f}",
          r["store_MBps"], r["load_MBps"], f"{r['rss_load_MB']:.1f}", r["rss_per_file_MB"]]
         if r["status"] == "ok" else [r["serializer"], r["entries"], f"{r['status']}: {r['reason']}"]
         for r in rows], right=range(1, 9))
    objects = format_table(
        ["serializer", "object", "dumps_us", "loads_us", "bytes"],
        [[r["serializer"], r["object"], r["dumps_us"], r["loads_us"], r["bytes"]]
         if r["status"] == "ok" else [r["serializer"], r["object"], f"{r['status']}: {r['reason']}"]
         for r in small], right=(2, 3, 4))
    return big + "\n\n" + objects


def plot_serializers(rows, path):
    """Store/load seconds vs number of dict entries, one line per serializer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    sers = list(dict.fromkeys(r["serializer"] for r in ok))
    for ax, key, lab in ((axes[0], "store_s", "store seconds"), (axes[1], "load_s", "load seconds"),
                         (axes[2], "file_MB", "file size, MB")):
        cmap = plt.get_cmap("tab20")
        for i, s in enumerate(sers):
            rs = sorted((r for r in ok if r["serializer"] == s), key=lambda r: int(r["entries"]))
            xs = [int(r["entries"]) for r in rs]
            ys = [max(float(r[key] or 0), 1e-7) for r in rs]
            ax.plot(xs, ys, marker="o", ms=3, label=s, color=cmap(i % 20),
                    ls="--" if s.startswith("cpersist") else "-")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("dict entries (str -> int)")
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("picklebench: dict of str -> int, stored to and loaded from disk", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv=None):
    """Measure, print the tables, write the CSVs (and the figure); 1 when a
    row failed."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serializers",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="RUN_DIR", help="folder of a benchmark run (made if new)")
    parser.add_argument("--quick", action="store_true",
                        help="dicts up to 16,000 entries, 200 calls per clock read")
    parser.add_argument("--max-entries", type=int, default=None,
                        help="largest dict (default 4,096,000; --quick: 16,000)")
    parser.add_argument("--mem-budget", type=float, default=4096.0, metavar="MB",
                        help="stop growing before this peak RSS (default 4096 MB)")
    parser.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                        help="seconds before one store or load is killed and reported failed")
    parser.add_argument("--no-plots", action="store_true", help="skip the figure")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    max_entries = args.max_entries or (16000 if args.quick else 4_096_000)
    rows = run_serializers(args.out, max_entries=max_entries, mem_budget_mb=args.mem_budget,
                           timeout=args.timeout, progress=False)
    shutil.rmtree(os.path.join(args.out, "_work"), ignore_errors=True)
    small = run_small_objects(200 if args.quick else 5000)
    write_csv(os.path.join(args.out, "serializers.csv"), rows, SER_COLUMNS)
    write_csv(os.path.join(args.out, "small_objects.csv"), small, SMALL_COLUMNS)
    if not args.no_plots:
        plot_serializers(rows, os.path.join(args.out, "serializers.png"))
    print(f"Serializers: picklebench, and small objects\n{format_serializers(rows, small)}")
    return 1 if any(r["status"] == "failed" for r in rows + small) else 0


if __name__ == "__main__":
    # Imported by its name, so that the measuring processes find its tasks.
    from benchmarks import serializers

    sys.exit(serializers.main())
