"""Peak memory of dumping a dask array four times larger than the memory allowed.

Each measurement runs in a fresh process, which builds a dask array of
``4 * budget`` MiB (float32, blocks of ``block`` MiB along the first axis,
half of them smooth and half noise), dumps it with ``cpersist.dump`` and
reports its wall-clock and CPU time (the CPU of this process's threads,
not the workers'), the growth of its peak resident memory (``VmHWM``, reset just
before the dump) over its resident memory then, against the bound of two blocks plus
64 MiB. The dumped file is then read back band by band and compared with the
array, computed again::

    python benchmarks/dask_dump_memory.py [--budget 256] [--block 32] [--compress 0,3]

* ``threads``: dask's threaded scheduler, in the dumping process;
* ``cluster``: a ``distributed.LocalCluster`` of 2 worker processes whose
  memory limits (which count all of a worker's memory, about 120 MiB of it
  before any work) add up to ``budget`` MiB, the dumping process being its
  client; each worker's peak is reported too, and that no worker was
  restarted (a worker past 95% of its limit is).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

MB = 1 << 20
SLACK = 64 * MB


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak():
    """Start the process's peak resident memory (VmHWM) afresh, at its
    resident memory now (Linux 4.0 and later)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


def _array(budget, block):
    import dask.array as da
    import numpy as np

    cols = 256
    rows = 4 * budget * MB // (4 * cols)
    block_rows = block * MB // (4 * cols)

    def fill(x, block_info=None):
        (start, stop), _ = block_info[0]["array-location"]
        rng = np.random.default_rng(start)
        if (start // block_rows) % 2:  # noise
            return rng.random((stop - start, cols), dtype=np.float32)
        # Smooth, made in place: the block is all the memory it takes.
        out = np.empty((stop - start, cols), dtype=np.float32)
        np.add(np.arange(start, stop, dtype=np.float32)[:, None] / 5000,
               np.arange(cols, dtype=np.float32) / 50, out=out)
        return np.sin(out, out=out)

    shape = (rows, cols)
    template = da.empty(shape, chunks=(block_rows, cols), dtype=np.float32)
    return template.map_blocks(fill, dtype=np.float32)


def _check(path, x):
    import numpy as np

    import cpersist

    with cpersist.open(path) as f:
        lazy = f.arrays["obj['x']"]
        step = x.chunks[0][0]
        for start in range(0, x.shape[0], step):
            expected = x[start:start + step].compute()
            got = lazy[start:start + step]
            if got.dtype != expected.dtype or not np.array_equal(got, expected):
                return False
    return lazy.shape == x.shape


def child(args):
    import dask
    import numpy as np  # noqa: F401

    import cpersist

    x = _array(args.budget, args.block)
    path = os.path.join(args.dir, "x.cp")
    client = cluster = None
    if args.mode == "cluster":
        import distributed

        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
            scheduler_port=0, dashboard_address="127.0.0.1:0",
            scheduler_kwargs={"dashboard": False}, worker_dashboard_address=None,
            memory_limit=args.budget * MB // 2)
        client = distributed.Client(cluster)
        pids = client.run(os.getpid)
    else:
        dask.config.set(scheduler="threads")
    # dask's first compute imports what it needs (distributed, among
    # others), which is no part of what a dump holds.
    dask.compute(x[:1, :1])
    _reset_peak()
    before = _rss()
    start, start_cpu = time.perf_counter(), time.process_time()
    cpersist.dump({"x": x}, path, compress=args.compress)
    seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    peak = _peak()
    result = {
        "mode": args.mode, "compress": args.compress, "array_mb": x.nbytes / MB,
        "block_mb": x.chunks[0][0] * x.shape[1] * 4 / MB, "budget_mb": args.budget,
        "seconds": seconds, "cpu_seconds": cpu, "file_mb": os.path.getsize(path) / MB,
        "rss_before_mb": before / MB, "peak_mb": peak / MB,
        "growth_mb": (peak - before) / MB,
        "bound_mb": (2 * args.block * MB + SLACK) / MB,
    }
    if client is not None:
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        result["worker_peak_mb"] = [p / MB for p in peaks.values()]
        result["workers_restarted"] = client.run(os.getpid) != pids
        client.close()
        cluster.close()
    # Checked by the threaded scheduler here: the workers, whose memory
    # limits leave room for little more than the dump's blocks, would be
    # restarted computing the slices and their copies.
    with dask.config.set(scheduler="threads"):
        result["equal"] = _check(path, x)
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=int, default=256, help="MiB allowed (the array is 4x)")
    parser.add_argument("--block", type=int, default=32, help="MiB per dask block")
    parser.add_argument("--compress", default="0,3")
    parser.add_argument("--modes", default="threads,cluster")
    parser.add_argument("--child", choices=("threads", "cluster"))
    parser.add_argument("--dir")
    args = parser.parse_args()
    if args.child:
        args.mode = args.child
        args.compress = int(args.compress)
        child(args)
        return
    rows = []
    for mode in args.modes.split(","):
        for compress in args.compress.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", mode, "--budget", str(args.budget),
                     "--block", str(args.block), "--compress", compress, "--dir", tmp],
                    capture_output=True, text=True,
                    env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
                        os.path.abspath(__file__)))))
            if out.returncode:
                sys.exit(f"{mode} compress={compress} failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for r in rows:
        extra = ""
        if "worker_peak_mb" in r:
            extra = (f"  workers' peaks {', '.join(f'{p:.0f}' for p in r['worker_peak_mb'])} MiB"
                     f" (limit {r['budget_mb'] / 2:.0f} each), restarted: "
                     f"{r['workers_restarted']}")
        verdict = "within" if r["growth_mb"] <= r["bound_mb"] else "OVER"
        print(f"{r['mode']:8s} compress={r['compress']}: {r['array_mb']:.0f} MiB array in "
              f"{r['block_mb']:.0f} MiB blocks, {r['seconds']:.1f} s (CPU of this process "
              f"{r['cpu_seconds']:.1f} s), file {r['file_mb']:.0f} "
              f"MiB; peak RSS {r['peak_mb']:.0f} MiB, {r['growth_mb']:.0f} MiB over the "
              f"{r['rss_before_mb']:.0f} MiB before the dump ({verdict} the bound of "
              f"{r['bound_mb']:.0f}); equal: {r['equal']}{extra}")


if __name__ == "__main__":
    main()
