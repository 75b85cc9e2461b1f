"""Record logs against a pickle record log: the issue's targets, as ratios.

    python benchmarks/records_lab.py [--n 100000] [--calls 20000] [--dir DIR]

The record is ``dict((str(n), n) for n in range(100))``. Measured, each the
best of ``--repeat`` runs:

* appends through an open log (``cpersist.open(path, "a")``) against
  ``pickle.dump`` to a file opened once (``"ab"``), per record;
* reading them all back (iterating the log) against a ``pickle.load`` loop;
* ``cpersist.append(obj, path)`` (opening the file each time) against
  ``open(path, "ab")`` + ``pickle.dump``;
* what ``fsync=True`` costs per append (1,000 appends each way);
* flat cost: the median time of the last 50 of ``--calls`` calls of
  ``cpersist.append`` (and of ``--n`` appends through an open log) over
  the median of the first 50.
"""

import argparse
import os
import pickle
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cpersist  # noqa: E402

RECORD = dict((str(n), n) for n in range(100))


def _fresh(path):
    if os.path.exists(path):
        os.remove(path)


def handle_appends(path, n):
    _fresh(path)
    t = time.perf_counter()
    with cpersist.open(path, "a") as log:
        append = log.append
        for _ in range(n):
            append(RECORD)
    return time.perf_counter() - t


def pickle_appends(path, n):
    _fresh(path)
    t = time.perf_counter()
    with open(path, "ab") as file:
        for _ in range(n):
            pickle.dump(RECORD, file, pickle.HIGHEST_PROTOCOL)
    return time.perf_counter() - t


def handle_reads(path, n):
    t = time.perf_counter()
    with cpersist.open(path) as log:
        count = sum(1 for _ in log)
    assert count == n
    return time.perf_counter() - t


def pickle_reads(path, n):
    t = time.perf_counter()
    count = 0
    with open(path, "rb") as file:
        while True:
            try:
                pickle.load(file)
            except EOFError:
                break
            count += 1
    assert count == n
    return time.perf_counter() - t


def path_appends(path, calls):
    """Seconds of each of ``calls`` calls of cpersist.append."""
    _fresh(path)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        cpersist.append(RECORD, path)
        times.append(time.perf_counter() - t)
    return times


def pickle_path_appends(path, calls):
    _fresh(path)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        with open(path, "ab") as file:
            pickle.dump(RECORD, file, pickle.HIGHEST_PROTOCOL)
        times.append(time.perf_counter() - t)
    return times


def handle_append_times(path, n):
    _fresh(path)
    times = []
    clock = time.perf_counter
    with cpersist.open(path, "a") as log:
        for _ in range(n):
            t = clock()
            log.append(RECORD)
            times.append(clock() - t)
    return times


def fsync_cost(path, n=1000):
    """Median seconds of an append through an open log without and with
    ``fsync=True``."""
    medians = []
    for fsync in (False, True):
        _fresh(path)
        times = []
        with cpersist.open(path, "a", fsync=fsync) as log:
            for _ in range(n):
                t = time.perf_counter()
                log.append(RECORD)
                times.append(time.perf_counter() - t)
        medians.append(statistics.median(times))
    return medians


def flat(times):
    return statistics.median(times[-50:]) / statistics.median(times[:50])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        log, pkl = os.path.join(tmp, "log.cpl"), os.path.join(tmp, "log.pkl")
        best = {}
        for _ in range(args.repeat):
            for name, run, path in (("append, open log", handle_appends, log),
                                    ("pickle.dump, open file", pickle_appends, pkl),
                                    ("read all, log", handle_reads, log),
                                    ("pickle.load loop", pickle_reads, pkl)):
                best[name] = min(best.get(name, float("inf")), run(path, args.n))
        per = {name: seconds / args.n * 1e6 for name, seconds in best.items()}
        calls = path_appends(log, args.calls)
        pickle_calls = pickle_path_appends(pkl, args.calls)
        handle_times = handle_append_times(log, args.n)
        plain_median, fsync_median = fsync_cost(log)
    print(f"record: {len(pickle.dumps(RECORD, pickle.HIGHEST_PROTOCOL))} bytes pickled; "
          f"{args.n:,} records; {args.calls:,} calls of cpersist.append")
    for name, micros in per.items():
        print(f"  {name:<26} {micros:7.2f} us per record")
    print(f"appends through an open log / pickle.dump:   "
          f"{per['append, open log'] / per['pickle.dump, open file']:.2f}x (target <= 2)")
    print(f"reading all back / pickle.load loop:         "
          f"{per['read all, log'] / per['pickle.load loop']:.2f}x (target <= 2)")
    ratio = statistics.median(calls) / statistics.median(pickle_calls)
    print(f"cpersist.append(obj, path) / open('ab')+dump: {ratio:.2f}x (target <= 3; "
          f"medians {statistics.median(calls) * 1e6:.1f} and "
          f"{statistics.median(pickle_calls) * 1e6:.1f} us)")
    print(f"fsync=True: median append {fsync_median * 1e6:.0f} us against "
          f"{plain_median * 1e6:.1f} us without ({fsync_median / plain_median:.0f}x)")
    print(f"flat cost, last 50 / first 50 calls of cpersist.append: {flat(calls):.2f}x; "
          f"appends through an open log: {flat(handle_times):.2f}x (target <= 1.15)")


if __name__ == "__main__":
    main()
