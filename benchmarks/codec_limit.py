"""How close a dump and a load come to their codec alone, in paired rounds.

Run from the repository root (it is not installed with cpersist)::

    python benchmarks/codec_limit.py [--datasets atlas_c,timeseries] [--size 100MB]
        [--compress 3] [--rounds 9] [--out DIR] [--cold] [--paired-hints] [--window]

The storage suite's ``write_of_limit`` and ``read_of_limit`` are the
medians of a few repeats' fractions, each operation in a fresh process, of
a write or a read from disk (cold by default). This script times the same fractions within
one process, round after round: a dump, then the codec alone encoding the
same chunks on the same threads (:class:`cpersist.benchmarks.methods.Limit`);
a load of that file from the page cache, then the codec alone decoding them
into new memory. Each round gives a fraction per operation, of wall time and
of CPU time (every thread of the process); on a shared machine, the
machine's speed drifts within seconds, and a fraction of two timings taken
moments apart carries less of that drift than either timing. One untimed
round comes first: it pays what a process pays once (imports, each
thread's codec contexts, the pool's threads), which the codec alone, timed
after the operation, would not.

``--cold`` drops the file from the page cache before each load, as the
storage suite does. ``--paired-hints`` also loads it, in each round, with
the read-ahead hints switched off (:meth:`LocalFileSource.will_need
<cpersist.container.sources.LocalFileSource.will_need>` asking for nothing),
the two loads in alternating order: the rows ``load wall, no hints`` and
``load hints / no hints`` (per round, the time with hints over the time
without) show what the hints give. A local file's device that reads far
enough ahead by itself (:attr:`LocalFileSource.reads_ahead
<cpersist.container.sources.LocalFileSource.reads_ahead>`) is asked for no
window of chunks (a load of arrays then gives no hint at all, and the two
loads differ only by noise); ``--window`` has the loads with hints treat
every device as one that reads ahead little.
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
from cpersist.benchmarks.methods import Limit  # noqa: E402
from cpersist.benchmarks.measure import evict_from_cache  # noqa: E402
from cpersist.container.sources import ByteSource, LocalFileSource  # noqa: E402


def _timed(func):
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = func()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def _load_timed(path, n_threads, cold, hints=True, window=False):
    """``(wall, cpu)`` seconds of a load of ``path``, evicted first if ``cold``,
    with or without the read-ahead hints (with ``window``, every device
    taken for one that reads ahead little)."""
    if cold:
        evict_from_cache(path)
    real, reads_ahead = LocalFileSource.will_need, LocalFileSource.__dict__["reads_ahead"]
    if not hints:
        LocalFileSource.will_need = ByteSource.will_need
    elif window:
        LocalFileSource.reads_ahead = 0
    try:
        wall, cpu, loaded = _timed(lambda: cpersist.load(path, n_threads=n_threads))
    finally:
        LocalFileSource.will_need, LocalFileSource.reads_ahead = real, reads_ahead
    del loaded  # freed before anything else allocates
    return wall, cpu


def fractions(obj, compress, rounds, path, n_threads, cold=False, paired_hints=False,
              window=False):
    """``{"dump wall": [...], "dump cpu": [...], "load wall": ..., "load cpu": ...}``:
    per round, the codec alone's time over the operation's; with
    ``paired_hints``, also the load without the read-ahead hints."""
    limit = Limit(obj, compress, n_threads)
    # Each side once untimed (see the module's docstring).
    limit.encode_s()
    cpersist.dump(obj, path, compress=compress, n_threads=n_threads)
    cpersist.load(path, n_threads=n_threads)
    limit.decode_s()
    keys = ["dump wall", "dump cpu", "load wall", "load cpu"]
    if paired_hints:
        keys += ["load wall, no hints", "load cpu, no hints", "load hints / no hints"]
    out = {key: [] for key in keys}
    for r in range(rounds):
        if os.path.exists(path):
            os.remove(path)  # every dump creates its file, as the storage suite's
        wall, cpu, _ = _timed(lambda: cpersist.dump(obj, path, compress=compress,
                                                    n_threads=n_threads))
        limit_wall, limit_cpu, _ = _timed(limit.encode_s)
        out["dump wall"].append(limit_wall / wall)
        out["dump cpu"].append(limit_cpu / cpu)
        # With paired hints, which load goes first alternates from round to round.
        order = [True, False] if paired_hints else [True]
        timed = {hints: _load_timed(path, n_threads, cold, hints, window)
                 for hints in (order if r % 2 == 0 else order[::-1])}
        limit_wall, limit_cpu, _ = _timed(limit.decode_s)
        for hints, (wall, cpu) in timed.items():
            suffix = "" if hints else ", no hints"
            out["load wall" + suffix].append(limit_wall / wall)
            out["load cpu" + suffix].append(limit_cpu / cpu)
        if paired_hints:
            out["load hints / no hints"].append(timed[True][0] / timed[False][0])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="atlas_c,timeseries")
    p.add_argument("--size", default="100MB")
    p.add_argument("--compress", default="3")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default=None, help="directory for the file (default: a temporary one)")
    p.add_argument("--cold", action="store_true",
                   help="drop the file from the page cache before each load")
    p.add_argument("--paired-hints", action="store_true",
                   help="also load without the read-ahead hints, in alternating order")
    p.add_argument("--window", action="store_true",
                   help="loads with hints ask for the chunks a window ahead on any device")
    args = p.parse_args(argv)
    compress = int(args.compress) if args.compress.isdigit() else args.compress
    size = ds.parse_size(args.size)
    n_threads = default_n_threads()
    chosen = ds.select(args.datasets.split(","), ds.builtin_datasets())
    with tempfile.TemporaryDirectory(dir=args.out) as folder:
        path = os.path.join(folder, "limit.cp")
        for dataset in chosen:
            obj = dataset.make(size, False)
            out = fractions(obj, compress, args.rounds, path, n_threads, args.cold,
                            args.paired_hints, args.window)
            print(f"{dataset.name} compress={args.compress} n_threads={n_threads} "
                  f"{'cold' if args.cold else 'warm'}{' window' if args.window else ''} load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            for key, values in out.items():
                name = key if "/" in key else f"{key} of limit"
                print(f"  {name}: min {min(values):.2f}  median "
                      f"{statistics.median(values):.2f}  max {max(values):.2f}", flush=True)


if __name__ == "__main__":
    main()
