"""SIGKILL processes appending to record logs at random moments, with
readers reading all along; count what went wrong.

    python benchmarks/records_crash.py [--kills 1000] [--seed 0] [--dir DIR]

Each round forks a writer that opens the log (``cpersist.open(path,
"a")``, which cuts the torn tail the last kill left) and appends records
0, 1, 2, ... (every 5th holding arrays, raw or compressed, so that kills
land inside whole dumps as well as light frames), reporting each append
once it returned; the round kills it after a random 0-40 ms. Then:

* the log must load (``cpersist.load``), and ``cpersist.verify`` pass (every
  10th kill);
* its records must be 0, 1, ... with their values: no wrong value;
* it must hold every record whose append returned: none lost.

Two reader processes read the log in a loop the whole time, each record it
sees checked against its number; the count they see must never shrink.
A new log is started every ``--per-log`` kills (25), so that checks stay quick.
"""

import argparse
import os
import random
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import cpersist  # noqa: E402


def record(i):
    if i % 5 == 0:
        return {"i": i, "w": np.full(2000 + 31 * (i % 13), i, dtype=np.int64)}
    if i % 5 == 2:
        return {"i": i, "text": "x" * (i % 300)}
    return {"i": i}


def check(records, start=0):
    """The number of the first wrong record, or None."""
    for i, got in enumerate(records, start):
        if got["i"] != i:
            return i
        if i % 5 == 0 and not np.array_equal(got["w"], record(i)["w"]):
            return i
        if i % 5 == 2 and got["text"] != "x" * (i % 300):
            return i
    return None


def writer(path, ack_fd, compress):
    n = len(cpersist.open(path)) if os.path.exists(path) else 0
    with cpersist.open(path, "a", compress=compress) as log:
        while True:
            log.append(record(n))
            n += 1
            os.write(ack_fd, n.to_bytes(8, "little"))


def reader(directory, stop_at, report_fd):
    """Read every log of ``directory`` in a loop until ``stop_at``; report
    ``reads wrong shrunk`` as text when done."""
    counts = [0, 0, 0]  # reads, wrong, shrunk
    try:
        _read_logs(directory, stop_at, counts)
    finally:
        os.write(report_fd, " ".join(map(str, counts)).encode())


def _read_logs(directory, stop_at, counts):
    seen = {}
    while time.time() < stop_at:
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".cpl"):
                continue
            path = os.path.join(directory, name)
            try:
                with cpersist.open(path) as log:
                    records = list(log)
            except FileNotFoundError:
                continue
            except cpersist.CorruptFileError as exc:
                print(f"reader: {exc}", file=sys.stderr)
                counts[1] += 1
                continue
            counts[0] += 1
            if check(records) is not None:
                counts[1] += 1
            if len(records) < seen.get(path, 0):
                counts[2] += 1
            seen[path] = len(records)


class _Stop(Exception):
    pass


def _stop(*args):
    raise _Stop


def _last_ack(ack_r):
    data = b""
    while True:
        try:
            chunk = os.read(ack_r, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    whole = len(data) // 8 * 8
    return int.from_bytes(data[whole - 8:whole], "little") if whole else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=1000)
    parser.add_argument("--per-log", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    unloadable = lost = wrong = failed_verify = 0
    started = time.time()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        # Every module a writer and a reader need, imported before forking:
        # a forked writer then appends from its first millisecond.
        warm = os.path.join(tmp, "warm.log")
        for compress in (0, 3):
            with cpersist.open(warm, "a", compress=compress) as log:
                log.append(record(0))
                log.append(record(1))
        check(cpersist.load(warm))
        cpersist.verify(warm)
        readers = []
        stop_at = time.time() + 10 ** 6  # told to stop by SIGTERM below
        for _ in range(2):
            report_r, report_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(report_r)
                signal.signal(signal.SIGTERM, _stop)
                try:
                    reader(tmp, stop_at, report_w)
                except _Stop:
                    pass
                except BaseException as exc:  # never run the parent's loop
                    os.write(report_w, f"-1 0 0 {exc!r}".encode())
                finally:
                    os._exit(0)
            os.close(report_w)
            readers.append((pid, report_r))
        acknowledged = appended = 0
        path = None
        for kill in range(args.kills):
            if kill % args.per_log == 0:
                appended += acknowledged
                path = os.path.join(tmp, f"log{kill // args.per_log}.cpl")
                acknowledged = 0
            ack_r, ack_w = os.pipe()
            compress = rng.choice([0, 0, 3])
            pid = os.fork()
            if pid == 0:
                os.close(ack_r)
                try:
                    writer(path, ack_w, compress)
                except BaseException as exc:
                    print(f"writer: {exc!r}", file=sys.stderr)
                finally:
                    os._exit(1)
            os.close(ack_w)
            time.sleep(rng.uniform(0, 0.04))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            last = _last_ack(ack_r)
            os.close(ack_r)
            acknowledged = max(acknowledged, last or 0)
            try:
                records = cpersist.load(path) if os.path.exists(path) else []
                if kill % 10 == 9 and os.path.exists(path):
                    cpersist.verify(path)
            except cpersist.CorruptFileError as exc:
                unloadable += 1
                print(f"kill {kill}: unloadable: {exc}", file=sys.stderr)
                continue
            if check(records) is not None:
                wrong += 1
                print(f"kill {kill}: wrong record {check(records)}", file=sys.stderr)
            if len(records) < acknowledged:
                lost += acknowledged - len(records)
                print(f"kill {kill}: {acknowledged - len(records)} committed records lost",
                      file=sys.stderr)
        read_reports = []
        for pid, report_r in readers:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
            read_reports.append(os.read(report_r, 1000).decode().split())
            os.close(report_r)
    appended += acknowledged
    print(read_reports, file=sys.stderr)
    reads = sum(int(r[0]) for r in read_reports if r)
    read_wrong = sum(int(r[1]) for r in read_reports if r)
    shrunk = sum(int(r[2]) for r in read_reports if r)
    print(f"{appended} appends returned in all", file=sys.stderr)
    print(f"{args.kills} SIGKILLs in {time.time() - started:.0f} s: {unloadable} unloadable "
          f"files, {lost} committed records lost, {wrong} wrong values; concurrent readers: "
          f"{reads} whole reads, {read_wrong} wrong or refused, {shrunk} saw fewer records "
          f"than before")
    return 1 if unloadable or lost or wrong or read_wrong or shrunk else 0


if __name__ == "__main__":
    sys.exit(main())
