"""How close a dump and a load come to their codec alone, in paired rounds.

Run from the repository root (it is not installed with cpersist)::

    python benchmarks/codec_limit.py [--datasets atlas_c,timeseries] [--size 100MB]
        [--compress 3] [--rounds 9] [--out DIR]

The storage suite's ``write_of_limit`` and ``read_of_limit`` are the
medians of a few repeats, each in a fresh process, of a write or a read
from disk (cold by default). This script times the same fractions within
one process, round after round: a dump, then the codec alone encoding the
same chunks on the same threads (:class:`cpersist.benchmarks.limits.Limit`);
a load of that file from the page cache, then the codec alone decoding them
into new memory. Each round gives a fraction per operation, of wall time and
of CPU time (every thread of the process); on a shared machine, the machine's
speed drifts within seconds, and a fraction of two timings taken moments
apart carries less of that drift than either timing.
"""

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a script: import this checkout's cpersist
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cpersist  # noqa: E402
from cpersist._runtime.threads import default_n_threads  # noqa: E402
from cpersist.benchmarks import datasets as ds  # noqa: E402
from cpersist.benchmarks.limits import Limit  # noqa: E402


def _timed(func):
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = func()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def fractions(obj, compress, rounds, path, n_threads):
    """``{"dump wall": [...], "dump cpu": [...], "load wall": ..., "load cpu": ...}``:
    per round, the codec alone's time over the operation's."""
    limit = Limit(obj, compress, n_threads)
    limit.encode_s()
    out = {key: [] for key in ("dump wall", "dump cpu", "load wall", "load cpu")}
    for _ in range(rounds):
        if os.path.exists(path):
            os.remove(path)  # every dump creates its file, as the storage suite's
        wall, cpu, _ = _timed(lambda: cpersist.dump(obj, path, compress=compress,
                                                    n_threads=n_threads))
        limit_wall, limit_cpu, _ = _timed(limit.encode_s)
        out["dump wall"].append(limit_wall / wall)
        out["dump cpu"].append(limit_cpu / cpu)
        wall, cpu, loaded = _timed(lambda: cpersist.load(path, n_threads=n_threads))
        del loaded  # freed before the limit allocates its own
        limit_wall, limit_cpu, _ = _timed(limit.decode_s)
        out["load wall"].append(limit_wall / wall)
        out["load cpu"].append(limit_cpu / cpu)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="atlas_c,timeseries")
    p.add_argument("--size", default="100MB")
    p.add_argument("--compress", default="3")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default=None, help="directory for the file (default: a temporary one)")
    args = p.parse_args(argv)
    compress = int(args.compress) if args.compress.isdigit() else args.compress
    size = ds.parse_size(args.size)
    n_threads = default_n_threads()
    chosen = ds.select_datasets(args.datasets.split(","), ds.builtin_datasets())
    with tempfile.TemporaryDirectory(dir=args.out) as folder:
        path = os.path.join(folder, "limit.cp")
        for dataset in chosen:
            obj = dataset.make(size, False)
            out = fractions(obj, compress, args.rounds, path, n_threads)
            print(f"{dataset.name} compress={args.compress} n_threads={n_threads} "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
            for key, values in out.items():
                print(f"  {key} of limit: min {min(values):.2f}  median "
                      f"{statistics.median(values):.2f}  max {max(values):.2f}", flush=True)


if __name__ == "__main__":
    main()
