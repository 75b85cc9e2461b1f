"""Why a dask sum over a compressed array gains less than 2x on 2 cores.

Three measurements, printed as a table::

    python benchmarks/dask_scaling.py [--mb 1024] [--blocks 16,37,64] [--malloc glibc]

* ``memory``: a NumPy loop filling and summing 64 MiB (or 16 MiB) arrays, fresh
  or reused, alone and in two processes at once: how much one process slows
  the other when the work is memory-bound; fresh arrays also without NumPy's
  advice to back them with huge pages (faulting in 2 MiB pages is faster
  alone and contends more);
* ``block``: CPU time per MiB of reading a block of a cpersist array and
  summing it, by block size (glibc reuses blocks under 32 MiB instead of
  faulting fresh pages in);
* ``cluster``: the sum on a ``distributed.LocalCluster`` of 2 worker processes
  against one thread, by number of dask blocks. distributed's nanny starts
  workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which keeps glibc from
  reusing freed blocks; ``--malloc glibc`` starts them with glibc's defaults,
  as the one-thread baseline runs.
"""

import argparse
import multiprocessing
import os
import resource
import statistics
import tempfile
import time

import numpy as np

import cpersist
from cpersist.benchmarks.lazy import make_array
from cpersist.lazy.plan import merged_blocks
from cpersist.tools.table import format_table

MB = 1 << 20


def _fill(size, count, fresh):
    x = None if fresh else np.ones(size, np.uint8)
    start = time.perf_counter()
    for _ in range(count):
        if fresh:
            x = np.empty(size, np.uint8)
        x[:] = 1
        x.sum()
    return time.perf_counter() - start


def _child(args, queue):
    queue.put(_fill(*args))


def _huge_pages(on):
    # NumPy asks the kernel for transparent huge pages on large arrays.
    np._core.multiarray._set_madvise_hugepage(on)


def memory():
    rows = []
    cases = [(size, count, fresh, True) for size, count in ((64 * MB, 10), (16 * MB, 40))
             for fresh in (True, False)]
    cases += [(64 * MB, 10, True, False), (16 * MB, 40, True, False)]
    try:
        for size, count, fresh, huge in cases:
            _huge_pages(huge)
            args = (size, count, fresh)
            alone = min(_fill(*args) for _ in range(3))
            queue = multiprocessing.Queue()
            # Forked children inherit the huge-page setting.
            procs = [multiprocessing.Process(target=_child, args=(args, queue)) for _ in range(2)]
            for p in procs:
                p.start()
            pair = max(queue.get() for _ in procs)
            for p in procs:
                p.join()
            name = f"{size // MB} MiB {'fresh' if fresh else 'reused'}"
            rows.append((name + ("" if huge else ", no huge pages"),
                         f"alone {alone:.3f} s, two at once {pair:.3f} s: {pair / alone:.2f}x"))
    finally:
        _huge_pages(True)
    return rows


def _cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def block(lazy):
    rows = []
    rows_per_chunk = lazy.chunks[0][0]
    for chunks in (16, 8, 7, 4):
        n = rows_per_chunk * chunks
        costs = []
        for k in range(min(8, len(lazy) // n)):
            start = _cpu()
            lazy[k * n:(k + 1) * n].sum(dtype=np.int64)
            costs.append(_cpu() - start)
        mib = n * lazy.nbytes / len(lazy) / MB
        rows.append((f"blocks of {mib:.1f} MiB",
                     f"{statistics.median(costs) * 1e3 / mib:.2f} ms CPU per MiB"))
    return rows


def cluster(lazy, counts, malloc="nanny"):
    import dask
    from distributed import Client, LocalCluster

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    if malloc == "glibc":
        environ.pop("MALLOC_TRIM_THRESHOLD_", None)

    sums = {n: lazy.to_dask(chunks=merged_blocks(lazy.chunks, lazy.shape, lazy.nbytes,
                                                  lazy.nbytes // n)).sum(dtype=np.int64)
            for n in counts}
    rows = []
    config = dask.config.set({"distributed.nanny.pre-spawn-environ": environ})
    with config, LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                              host="127.0.0.1", scheduler_port=0,
                              dashboard_address="127.0.0.1:0",
                              worker_dashboard_address=None) as cl, Client(cl) as client:
        for total in sums.values():
            client.compute(total).result()
        times = {n: ([], []) for n in counts}
        for _ in range(5):
            for n, total in sums.items():
                start = time.perf_counter()
                with dask.config.set(scheduler="synchronous"):
                    total.compute()
                times[n][0].append(time.perf_counter() - start)
                start = time.perf_counter()
                client.compute(total).result()
                times[n][1].append(time.perf_counter() - start)
    for n, (one, two) in times.items():
        one, two = statistics.median(one), statistics.median(two)
        rows.append((f"{len(sums[n].dask)} tasks ({n} blocks wanted)",
                     f"one thread {one:.3f} s, 2 processes {two:.3f} s: {one / two:.2f}x"))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="array size (default 1024)")
    parser.add_argument("--blocks", default="16,37,64", help="dask block counts to try")
    parser.add_argument("--malloc", choices=("nanny", "glibc"), default="nanny",
                        help="workers' malloc settings: distributed's (default) or glibc's")
    args = parser.parse_args()
    rows = memory()
    with tempfile.TemporaryDirectory(prefix="dask_scaling_") as tmp:
        path = os.path.join(tmp, "a.cp")
        cpersist.dump({"a": make_array("compressible", args.mb * MB, seed=2)}, path,
                      compress=True)
        with cpersist.open(path, n_threads=1) as handle:
            lazy = handle.arrays["obj['a']"]
        rows += block(lazy)
        rows += cluster(lazy, [int(n) for n in args.blocks.split(",")], args.malloc)
    print(format_table(["measurement", "value"], rows, gap="  "))


if __name__ == "__main__":
    main()
