"""A dask sum over a compressed array opened with :func:`cpersist.open`, on a
local cluster of 2 worker processes, beside zarr v3 holding the same array
and beside one thread (``lazy.dask_vs_zarr`` and ``lazy.dask_speedup`` in
:mod:`benchmarks.bounds`; :mod:`benchmarks.dask_scaling` looks into why the
speed-up is less than 2x).

Run from the repository root (it is not installed with cpersist; it needs
dask and distributed)::

    python -m benchmarks.lazy_dask RUN_DIR [--scale 1] [--repeat 5]

It writes ``dask.json`` to the run's folder, which :mod:`benchmarks.ratios`
reads beside the lazy suite's ``lazy.json``, and prints one line.
"""

import argparse
import os
import statistics
import sys

import numpy as np

import cpersist
from cpersist.benchmarks.lazy import MB, make_array, optional
from cpersist.benchmarks.output import measure_into

from .timing import time_runs

__all__ = ["measure_dask", "format_dask", "main"]


def measure_dask(nbytes, directory, repeats):
    """Sum over a compressed array: 2 worker processes vs zarr v3 vs 1 thread.

    Returns None if dask or distributed is not installed; without zarr, its
    time is None."""
    if optional("dask") is None or optional("distributed") is None:
        return None
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster

    zarr = optional("zarr")
    arr = make_array("compressible", nbytes, seed=2)
    expected = int(arr.sum(dtype=np.int64))
    path = os.path.join(directory, "dask.cp")
    cpersist.dump({"a": arr}, path, compress=True)
    zpath = os.path.join(directory, "dask.zarr")
    if zarr is not None:
        zarr.create_array(store=zpath, data=arr, overwrite=True)
    del arr
    # One decoding thread per block: the parallelism is dask's, one block
    # per worker process (or the one thread of the baseline).
    with cpersist.open(path, n_threads=1) as handle:
        x = handle.arrays["obj['a']"].to_dask()
    # Closed: the arrays reopen the file from its path, as they do on the workers.
    z = da.from_zarr(zpath) if zarr is not None else None
    total = x.sum(dtype=np.int64)
    ztotal = None if z is None else z.sum(dtype=np.int64)

    def one_thread():
        with dask.config.set(scheduler="synchronous"):
            return total.compute()

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      scheduler_port=0, dashboard_address="127.0.0.1:0",
                      worker_dashboard_address=None) as cluster, Client(cluster) as client:
        assert int(client.compute(total).result()) == expected
        if ztotal is not None:
            assert int(client.compute(ztotal).result()) == expected
        # Rounds alternate the three, so that a machine whose speed drifts
        # (other processes, a shared host) weighs on each alike.
        times = {"one": [], "cp": [], "zarr": []}
        for _ in range(repeats):
            times["one"].append(time_runs(one_thread, 1)[0])
            times["cp"].append(time_runs(lambda: client.compute(total).result(), 1)[0])
            if ztotal is not None:
                times["zarr"].append(time_runs(lambda: client.compute(ztotal).result(), 1)[0])
    t_one, t_cp = statistics.median(times["one"]), statistics.median(times["cp"])
    t_zarr = statistics.median(times["zarr"]) if times["zarr"] else None
    return {"array_mb": nbytes / MB, "blocks": len(x.chunks[0]),
            "zarr_blocks": None if z is None else len(z.chunks[0]),
            "cpersist_2proc_s": t_cp, "zarr_2proc_s": t_zarr, "cpersist_1thread_s": t_one,
            "over_zarr": None if t_zarr is None else t_cp / t_zarr,
            "speedup_over_1thread": t_one / t_cp}


def format_dask(p):
    """The measurement as a line of text."""
    if p is None:
        return "dask: not installed (dask and distributed)"
    zarr = (f"{p['over_zarr']:.2f}x zarr ({p['zarr_2proc_s']:.2f} s)"
            if p["zarr_2proc_s"] is not None else "zarr not installed")
    return (f"dask sum over {p['array_mb']:.0f} MB: {p['cpersist_2proc_s']:.2f} s on 2 worker "
            f"processes = {zarr}, {p['speedup_over_1thread']:.2f}x faster than 1 thread "
            f"({p['cpersist_1thread_s']:.2f} s)")


def main(argv=None):
    """Measure, print the line, write ``dask.json``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lazy_dask",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="RUN_DIR", help="folder of a benchmark run (made if new)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies the array's 1 GB (the size the bounds are set for)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (median kept; default 5)")
    args = parser.parse_args(argv)
    result = measure_into(args.out, "dask.json", "cpersist-dask-", lambda directory: measure_dask(
        int(1024 * MB * args.scale), directory, args.repeat))
    print(format_dask(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
