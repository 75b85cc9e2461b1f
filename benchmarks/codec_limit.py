"""How close a dump and a load come to their codec alone, in paired rounds.

Run from the repository root (it is not installed with cpersist)::

    python benchmarks/codec_limit.py [--datasets atlas_c,timeseries] [--size 100MB]
        [--compress 3] [--rounds 9] [--out DIR] [--cold] [--paired-hints] [--window]
        [--unprimed] [--each]

The storage suite's ``write_of_limit`` and ``read_of_limit`` are the
medians of a few repeats' fractions, each operation in a fresh process, of
a write or a read from disk (cold by default). This script times the same fractions within
one process, round after round: a dump and the codec alone encoding the
same chunks on the same threads (:class:`cpersist.benchmarks.methods.Limit`);
a load of that file from the page cache and the codec alone decoding them
into new memory; in even rounds the operation first, in odd rounds the
codec. Each round gives a fraction per operation, of wall time and
of CPU time (every thread of the process); on a shared machine, the
machine's speed drifts within seconds, and a fraction of two timings taken
moments apart carries less of that drift than either timing. ``best`` is
the codec's shortest time over the operation's. One untimed
round comes first: it pays what a process pays once (imports, each
thread's codec contexts, the pool's threads), which the codec alone, timed
after the operation, would not.

Each call is timed right after new memory of the arrays' size and the
file's is touched and freed (:func:`prime_memory
<cpersist.benchmarks.measure.prime_memory>`, as the storage suite does;
``--unprimed``: not): on a virtual machine whose host takes back the memory
its guest frees, a decode of 100 MB into new memory otherwise took from
50 ms to 1.9 s, of which up to 0.6 s of the kernel's time, the load and
the codec alone alike in turn. ``--each`` prints every round's wall and
kernel times, where such rounds show.

``--cold`` drops the file from the page cache before each load, as the
storage suite does. The codec alone reads nothing, so a cold load's
fraction of it also counts the disk: extra information, not the figure
the target is set for (a load from the page cache). Cold, each round
also times the file's bytes read alone from the disk (after eviction
again), and gives the load as a fraction of the longer of that and the
codec alone (``load ... of disk or limit``): what a load reading and
decoding side by side could reach. ``--paired-hints`` also loads it, in each round, with
the read-ahead hints switched off (:meth:`LocalFileSource.will_need
<cpersist.container.sources.LocalFileSource.will_need>` asking for nothing),
the two loads in alternating order: the rows ``load, no hints`` and
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
import resource
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
from cpersist.benchmarks.measure import evict_from_cache, prime_memory  # noqa: E402
from cpersist.benchmarks.methods import arrays_of  # noqa: E402
from cpersist.container.sources import ByteSource, LocalFileSource  # noqa: E402


def _timed(func, prime=0):
    """``(wall, cpu, sys)`` seconds of ``func()`` (CPU time of every thread
    of the process; ``sys``, the kernel's part of it), and its result;
    ``prime`` bytes of new memory touched first (:func:`prime_memory
    <cpersist.benchmarks.measure.prime_memory>`)."""
    gc.collect()
    prime_memory(prime)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    wall, cpu = time.perf_counter(), time.process_time()
    result = func()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_stime - usage.ru_stime, result


def _load_timed(path, n_threads, cold, prime, hints=True, window=False):
    """``(wall, cpu, sys)`` seconds of a load of ``path``, evicted first if
    ``cold``, with or without the read-ahead hints (with ``window``, every
    device taken for one that reads ahead little)."""
    if cold:
        evict_from_cache(path)
    real, reads_ahead = LocalFileSource.will_need, LocalFileSource.__dict__["reads_ahead"]
    if not hints:
        LocalFileSource.will_need = ByteSource.will_need
    elif window:
        LocalFileSource.reads_ahead = 0
    try:
        *timed, loaded = _timed(lambda: cpersist.load(path, n_threads=n_threads), prime)
    finally:
        LocalFileSource.will_need, LocalFileSource.reads_ahead = real, reads_ahead
    del loaded  # freed before anything else allocates
    return tuple(timed)


#: Bytes of each read of the disk alone.
DISK_READ = 4 << 20


def _disk_timed(path, prime):
    """``(wall, cpu, sys)`` seconds of reading ``path``'s bytes whole, in
    order, from the disk (evicted first) and nothing else: what a cold load
    cannot go below however well it hides its reads behind its decoding."""
    evict_from_cache(path)

    def read():
        with open(path, "rb", buffering=0) as file:
            while file.read(DISK_READ):
                pass

    return _timed(read, prime)[:3]


def times(obj, compress, rounds, path, n_threads, cold=False, paired_hints=False,
          window=False, prime=True):
    """``{side: [(wall, cpu, sys), ...]}``, a tuple per round, for the sides
    ``"dump"``, ``"encode"`` (the codec alone), ``"load"``, ``"decode"``;
    ``cold``, also ``"disk"`` (:func:`_disk_timed`, right before the
    loads); ``paired_hints``, also ``"load, no hints"``. In even rounds
    each operation is timed before its codec alone, in odd rounds after
    it: what a round's first call pays and the second does not (a slow
    spell of the machine, fresh memory the system has to back again) falls
    on either side in turn. With ``prime``, each call is timed right after
    new memory of the size of the arrays and the file is touched and freed
    (:func:`prime_memory <cpersist.benchmarks.measure.prime_memory>`)."""
    limit = Limit(obj, compress, n_threads)
    # Each side once untimed (see the module's docstring).
    limit.encode_s()
    cpersist.dump(obj, path, compress=compress, n_threads=n_threads)
    # Every call is primed with what a load allocates: the arrays, and the
    # file in the page cache.
    prime = sum(arr.nbytes for arr in arrays_of(obj)) + os.path.getsize(path) if prime else 0
    cpersist.load(path, n_threads=n_threads)
    limit.decode_s()
    sides = ["dump", "encode", "load", "decode"] + ["disk"] * cold + \
        ["load, no hints"] * paired_hints
    out = {side: [] for side in sides}

    def dump():
        if os.path.exists(path):
            os.remove(path)  # every dump creates its file, as the storage suite's
        out["dump"].append(_timed(lambda: cpersist.dump(obj, path, compress=compress,
                                                        n_threads=n_threads), prime)[:3])

    def loads():
        if cold:
            out["disk"].append(_disk_timed(path, prime))
        # With paired hints, which load goes first alternates from round to round.
        order = [True, False] if paired_hints else [True]
        for hints in (order if r % 2 == 0 else order[::-1]):
            out["load" if hints else "load, no hints"].append(
                _load_timed(path, n_threads, cold, prime, hints, window))

    def encode():
        out["encode"].append(_timed(limit.encode_s, prime)[:3])

    def decode():
        out["decode"].append(_timed(limit.decode_s, prime)[:3])

    for r in range(rounds):
        for call in ([dump, encode, loads, decode] if r % 2 == 0 else
                     [encode, dump, decode, loads]):
            call()
    return out


def rows(out):
    """``(name, per-round values, best)`` of each figure of :func:`times`'
    ``out``: per round, the codec alone's time over the operation's, of
    wall and of CPU time; ``best``, the codec's shortest wall time over the
    operation's shortest, which a machine slow in spells disturbs least
    (None for CPU time). Cold, also the load against the longer of the
    disk alone and the codec alone in its round: the best a cold load could
    do, reading and decoding side by side."""
    cold = "disk" in out
    # A cold load against the codec alone counts the disk, which the limit
    # does not: extra information, not the target's figure.
    note = " (cold: the limit reads nothing)" if cold else ""
    pairs = [("dump", out["dump"], out["encode"], "limit", ""),
             ("load", out["load"], out["decode"], "limit", note)]
    if "load, no hints" in out:
        pairs.append(("load, no hints", out["load, no hints"], out["decode"], "limit", note))
    if cold:
        slower = [max(decode, disk) for decode, disk in zip(out["decode"], out["disk"])]
        pairs.append(("load", out["load"], slower, "disk or limit", ""))
    for op, ops, limits, against, suffix in pairs:
        for k, kind in ((0, "wall"), (1, "cpu")):
            values = [lim[k] / t[k] for lim, t in zip(limits, ops) if t[k]]
            best = min(lim[k] for lim in limits) / min(t[k] for t in ops) if k == 0 else None
            yield f"{op} {kind} of {against}{suffix}", values, best
    if "load, no hints" in out:
        yield ("load hints / no hints",
               [a[0] / b[0] for a, b in zip(out["load"], out["load, no hints"])], None)


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
    p.add_argument("--unprimed", action="store_true",
                   help="time each call without touching new memory first")
    p.add_argument("--each", action="store_true",
                   help="also print every round's times, wall and the kernel's CPU time")
    args = p.parse_args(argv)
    compress = int(args.compress) if args.compress.isdigit() else args.compress
    size = ds.parse_size(args.size)
    n_threads = default_n_threads()
    chosen = ds.select(args.datasets.split(","), ds.builtin_datasets())
    with tempfile.TemporaryDirectory(dir=args.out) as folder:
        path = os.path.join(folder, "limit.cp")
        for dataset in chosen:
            obj = dataset.make(size, False)
            out = times(obj, compress, args.rounds, path, n_threads, args.cold,
                        args.paired_hints, args.window, not args.unprimed)
            print(f"{dataset.name} compress={args.compress} n_threads={n_threads} "
                  f"{'cold' if args.cold else 'warm'}{' window' if args.window else ''}"
                  f"{' unprimed' if args.unprimed else ''}, "
                  f"{args.rounds} rounds, load average {os.getloadavg()[0]:.1f}", flush=True)
            for name, values, best in rows(out):
                print(f"  {name}: min {min(values):.2f}  median {statistics.median(values):.2f}"
                      f"  max {max(values):.2f}" + ("" if best is None else f"  best {best:.2f}"),
                      flush=True)
            print(_times_line("median ms", out, statistics.median), flush=True)
            for r in range(args.rounds if args.each else 0):
                print(_times_line(f"round {r} ms", out, lambda values: values[r]), flush=True)


def _times_line(title, out, pick):
    return f"  {title} (wall / sys): " + ", ".join(
        f"{side} {pick([t[0] for t in timed]) * 1e3:.1f} / {pick([t[2] for t in timed]) * 1e3:.1f}"
        for side, timed in out.items())


if __name__ == "__main__":
    main()
