"""SIGKILL processes appending rows to, replacing arrays of and compacting
growing files at random moments, with readers reading all along; count what
went wrong.

    python benchmarks/growing_crash.py [--kills 300] [--seed 0] [--dir DIR]

The file holds ``{"x": rows, "y": array, "name": ...}``. Operation ``k`` is,
by ``k``: a replace of ``obj['y']`` (every 4th), a ``cpersist.compact``
(of the others, every 6th), else an append to ``obj['x']`` of rows all equal to ``k``,
of a size that varies with ``k`` (up to 4 MB, so that kills land inside
writes). State ``j`` is the object after operations ``0 .. j - 1``.

Each round forks a writer that opens the file (which cuts the torn tail the
last kill left) and runs operations from the state the file holds,
reporting each once it returned; the round kills it after a random 0-150 ms
(raw or compressed arrays, by file). Then:

* the file must load, and ``cpersist.verify`` pass (every 10th kill);
* it must be state ``j`` for some ``j``: no wrong value;
* ``j`` must be at least the number of operations reported done: none lost,
  and at most one more (the operation killed).

Two reader processes load every file in a loop the whole time (whole, and a
slice crossing batches through ``cpersist.open``), each state checked to be
some state ``j``, which must never go back. A new file is started every
``--per-file`` kills (25).
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
from cpersist._runtime.temporaries import TMP_SUFFIX  # noqa: E402

COLUMNS = 64
X, Y = "obj['x']", "obj['y']"


def kind(k):
    if k % 4 == 3:
        return "replace"
    if k % 6 == 5:
        return "compact"
    return "append"


def rows(k):
    n = 16000 if k % 13 == 0 else 40 + 97 * (k % 9)
    return np.full((n, COLUMNS), k, np.float32)


def y_of(k):
    return np.full(100 + k % 50, k, np.int32)


def first_object():
    return {"x": np.zeros((0, COLUMNS), np.float32), "y": y_of(-1), "name": "crash"}


def state_of(x, y):
    """``(appends, replace)``: the operations the state holds (the append
    operations in ``x``, in order, and the replace ``y`` is), or None if it
    is no state."""
    if x.ndim != 2 or x.shape[1] != COLUMNS or x.dtype != np.float32:
        return None
    first = x[:, 0]
    if x.size and not (x == first[:, None]).all():
        return None
    appends = []
    at = 0
    while at < len(first):
        k = int(first[at])
        n = len(rows(k))
        if kind(k) != "append" or (appends and k <= appends[-1]) or at + n > len(first) \
                or not (first[at:at + n] == k).all():
            return None
        appends.append(k)
        at += n
    replace = int(y[0]) if len(y) else None
    if replace is None or not np.array_equal(y, y_of(replace)):
        return None
    return appends, replace


def states_matching(found):
    """The states ``j`` whose object is ``found`` (``state_of``'s result)."""
    appends, replace = found
    expected = [k for k in range(appends[-1] + 1 if appends else 0) if kind(k) == "append"]
    if appends != expected:
        return []
    # j covers every append in x and no later one, and the last replace before j.
    low = appends[-1] + 1 if appends else 0
    high = low
    while kind(high) != "append":
        high += 1
    return [j for j in range(low, high + 1)
            if max([k for k in range(j) if kind(k) == "replace"], default=-1) == replace]


def writer(path, start, ack_fd):
    f = cpersist.open(path, "a")
    try:
        for k in range(start, 10 ** 9):
            what = kind(k)
            if what == "append":
                f.append(X, rows(k))
            elif what == "replace":
                f.replace(Y, y_of(k))
            else:
                f.close()  # compact takes the writers' lock itself
                cpersist.compact(path)
                f = cpersist.open(path, "a")
            os.write(ack_fd, (k + 1).to_bytes(8, "little"))
    finally:
        f.close()


def reader(directory, report_fd):
    import warnings

    warnings.simplefilter("ignore", UserWarning)  # compressed arrays are not mapped
    counts = [0, 0, 0]  # reads, wrong, went back
    seen = {}
    try:
        while True:
            for name in sorted(os.listdir(directory)):
                if not name.endswith(".cp"):
                    continue
                path = os.path.join(directory, name)
                try:
                    obj = cpersist.load(path, mmap_mode="r")
                    with cpersist.open(path) as f:
                        lazy = f.arrays[X]
                        part = lazy[max(0, lazy.shape[0] // 2 - 500):lazy.shape[0] // 2 + 500]
                except FileNotFoundError:
                    continue
                except cpersist.CorruptFileError as exc:
                    print(f"reader: {exc}", file=sys.stderr)
                    counts[1] += 1
                    continue
                counts[0] += 1
                found = state_of(obj["x"], obj["y"])
                matching = states_matching(found) if found is not None else []
                if not matching or not (part == part[:, :1]).all():
                    counts[1] += 1
                    continue
                if max(matching) < seen.get(path, 0):
                    counts[2] += 1
                seen[path] = max(seen.get(path, 0), min(matching))
    except _Stop:
        pass
    finally:
        os.write(report_fd, " ".join(map(str, counts)).encode())


class _Stop(Exception):
    pass


def _stop(*args):
    raise _Stop


def _last_ack(ack_r):
    data = b""
    while True:
        chunk = os.read(ack_r, 1 << 16)
        if not chunk:
            break
        data += chunk
    whole = len(data) // 8 * 8
    return int.from_bytes(data[whole - 8:whole], "little") if whole else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=300)
    parser.add_argument("--per-file", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    unloadable = lost = wrong = failed_verify = 0
    killed_in = {"opening": 0, "append": 0, "replace": 0, "compact": 0}
    started = time.time()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        warm = os.path.join(tmp, "warm.tmp")  # modules imported before forking
        cpersist.dump(first_object(), warm, compress=3, growing=True)
        with cpersist.open(warm, "a") as f:
            f.append(X, rows(0))
            f.replace(Y, y_of(6))
        cpersist.compact(warm)
        cpersist.verify(warm)
        readers = []
        for _ in range(2):
            report_r, report_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(report_r)
                signal.signal(signal.SIGTERM, _stop)
                try:
                    reader(tmp, report_w)
                finally:
                    os._exit(0)
            os.close(report_w)
            readers.append((pid, report_r))
        path, done = None, 0
        for kill in range(args.kills):
            if kill % args.per_file == 0:
                path = os.path.join(tmp, f"grow{kill // args.per_file}.cp")
                cpersist.dump(first_object(), path, compress=rng.choice([0, 3]), growing=True)
                done = 0
            ack_r, ack_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(ack_r)
                try:
                    writer(path, done, ack_w)
                except BaseException as exc:
                    print(f"writer: {exc!r}", file=sys.stderr)
                finally:
                    os._exit(1)
            os.close(ack_w)
            time.sleep(rng.uniform(0, 0.15))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            last = _last_ack(ack_r)
            os.close(ack_r)
            acknowledged = max(done, last or 0)
            killed_in["opening" if last is None else kind(acknowledged)] += 1
            try:
                obj = cpersist.load(path)
                if kill % 10 == 9:
                    cpersist.verify(path)
            except cpersist.CorruptFileError as exc:
                unloadable += 1
                print(f"kill {kill}: unloadable: {exc}", file=sys.stderr)
                continue
            found = state_of(obj["x"], obj["y"])
            matching = states_matching(found) if found is not None else []
            # at most the operations done and the one killed
            matching = [j for j in matching if j <= acknowledged + 1]
            if not matching:
                wrong += 1
                print(f"kill {kill}: not a state: {found}", file=sys.stderr)
                continue
            if max(matching) < acknowledged:
                lost += 1
                print(f"kill {kill}: state {matching} after {acknowledged} operations returned",
                      file=sys.stderr)
            # The state the next writer starts from: the operations done, one
            # more if the one killed was committed.
            done = max(matching)
        reads = read_wrong = went_back = 0
        for pid, report_r in readers:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
            fields = os.read(report_r, 1 << 10).split()
            os.close(report_r)
            reads += int(fields[0])
            read_wrong += int(fields[1])
            went_back += int(fields[2])
        leftovers = [n for n in os.listdir(tmp) if n.endswith(TMP_SUFFIX)]
    print(f"{args.kills} kills in {time.time() - started:.0f} s (killed during: "
          + ", ".join(f"{n} {what}" for what, n in killed_in.items()) + ")")
    print(f"unloadable files: {unloadable}, wrong states: {wrong}, committed operations lost: "
          f"{lost}, failed verify: {failed_verify}")
    print(f"readers: {reads} reads, {read_wrong} wrong, {went_back} went back")
    print(f"temporary files left at the end: {len(leftovers)} (a killed compaction's; the "
          f"next compaction or dump to that path removes it)")
    return 1 if unloadable or wrong or lost or read_wrong or went_back else 0


if __name__ == "__main__":
    sys.exit(main())
