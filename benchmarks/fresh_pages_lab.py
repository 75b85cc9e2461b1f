"""Ways of replacing a large file's bytes, timed side by side: what the
page-cache pages a write lands in cost, and whether a second thread or
``O_DIRECT`` makes a fresh file as cheap as np.save's truncated one.

    python benchmarks/fresh_pages_lab.py [--size 1e9] [--rounds 5]
                                         [--ways npsave,atomic,...] [--dir DIR]

Each way writes the same ``size`` bytes (a float64 array's) to a path that
already holds a file of that size, each to its own path. A call's cost
depends on the pages the call before it freed (pages freed a moment ago
are cheap to reuse; on a virtual machine that gives freed memory back to
its host, older ones are not): in each round, every way after the first
runs right after the first way (the order of the ways reversed every
other round), as the paired benchmarks run them. A dump that runs right
after a dump of its own (as a way does at the turn of the rounds in a
benchmark that reverses the order) has been seen to pay several times the
system time, whatever it is: compare two ways with each in both places
before believing a difference. The ways:

``npsave``       np.save: opens with 'wb', truncating the old file first,
                 and writes into the pages just freed.
``truncate``     the same with a plain write of the array's buffer.
``atomic``       a temporary file beside it, its blocks reserved, 4 MiB
                 writes, renamed onto the path (what a raw dump does).
``whole``        ``atomic`` with one write of the whole buffer (as np.save's).
``atomic64``     ``atomic`` with 64 MiB writes.
``fresh``        the path removed first, then ``atomic``: np.save's cost
                 with no old file to reuse.
``pwrite2``      ``atomic`` with two threads each writing one half.
``mmap2``        ``atomic`` with the temporary file mapped and two threads
                 each faulting in and copying one half.
``mmap1``        ``mmap2`` on one thread.
``direct``       ``atomic`` through :class:`cpersist.container.direct_io.DirectFile`
                 (O_DIRECT: no page cache, at the disk's speed).
``dump``         cpersist.dump itself.
``dropold``      ``atomic``, the old file's page cache dropped first
                 (``POSIX_FADV_DONTNEED``; only clean pages go).

Printed per way: wall, process CPU (all threads) and system time per
call, min and median, and the ratio of medians to the first way's.
"""

import argparse
import ctypes
import mmap
import os
import resource
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import cpersist  # noqa: E402
from benchmarks.timing import remove_scratch  # noqa: E402
from cpersist.container.direct_io import DirectFile  # noqa: E402

STEP = 4 << 20
MADV_POPULATE_WRITE = 23
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _temporary(path, size):
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    if size:
        os.posix_fallocate(fd, 0, size)
    return fd, tmp


def _write_range(fd, view, start, end, step=STEP):
    at = start
    while at < end:
        n = os.pwrite(fd, view[at:min(end, at + step)], at)
        at += n


def _finish(fd, tmp, path):
    os.close(fd)
    os.replace(tmp, path)


def npsave(arr, path):
    np.save(path, arr)


def truncate(arr, path):
    with open(path, "wb", buffering=0) as f:
        f.write(memoryview(arr).cast("B"))


def atomic(arr, path):
    view = memoryview(arr).cast("B")
    fd, tmp = _temporary(path, view.nbytes)
    _write_range(fd, view, 0, view.nbytes)
    _finish(fd, tmp, path)


def whole(arr, path):
    view = memoryview(arr).cast("B")
    fd, tmp = _temporary(path, view.nbytes)
    _write_range(fd, view, 0, view.nbytes, view.nbytes)
    _finish(fd, tmp, path)


def atomic64(arr, path):
    view = memoryview(arr).cast("B")
    fd, tmp = _temporary(path, view.nbytes)
    _write_range(fd, view, 0, view.nbytes, 64 << 20)
    _finish(fd, tmp, path)


def fresh(arr, path):
    if os.path.exists(path):
        os.unlink(path)
    atomic(arr, path)


def _halves(n, parts=2):
    cut = n // parts // mmap.PAGESIZE * mmap.PAGESIZE
    return [(0, cut), (cut, n)] if parts == 2 else [(0, n)]


def _threads(work, ranges):
    threads = [threading.Thread(target=work, args=r) for r in ranges[1:]]
    for t in threads:
        t.start()
    work(*ranges[0])
    for t in threads:
        t.join()


def pwrite2(arr, path):
    view = memoryview(arr).cast("B")
    fd, tmp = _temporary(path, view.nbytes)
    _threads(lambda s, e: _write_range(fd, view, s, e), _halves(view.nbytes))
    _finish(fd, tmp, path)


def _mapped(arr, path, parts):
    src = memoryview(arr).cast("B")
    n = src.nbytes
    fd, tmp = _temporary(path, n)
    m = mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    dst = np.frombuffer(m, np.uint8)
    s = np.frombuffer(src, np.uint8)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))

    def work(start, end):
        for at in range(start, end, 64 << 20):
            stop = min(end, at + (64 << 20))
            _libc.madvise(base + at, -(-(stop - at) // mmap.PAGESIZE) * mmap.PAGESIZE,
                          MADV_POPULATE_WRITE)
            dst[at:stop] = s[at:stop]

    _threads(work, _halves(n, parts))
    del dst
    m.close()
    _finish(fd, tmp, path)


def mmap2(arr, path):
    _mapped(arr, path, 2)


def mmap1(arr, path):
    _mapped(arr, path, 1)


def direct(arr, path):
    view = memoryview(arr).cast("B")
    fd, tmp = _temporary(path, 0)
    f = DirectFile(fd)
    f.write(view)
    f.close()
    _finish(fd, tmp, path)


def dump(arr, path):
    cpersist.dump(arr, path)


def dropold(arr, path):
    try:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    except OSError:
        pass
    atomic(arr, path)


def _flush(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


WAYS = {f.__name__: f for f in (npsave, truncate, atomic, whole, atomic64, fresh, pwrite2, mmap2, mmap1, direct,
                                dump, dropold)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=1e9)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ways", default="npsave,atomic,fresh,pwrite2,mmap2,direct")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--clean", action="store_true",
                        help="write each old file to disk (untimed) before it is replaced")
    args = parser.parse_args(argv)
    ways = args.ways.split(",")
    arr = np.random.default_rng(0).random(int(args.size) // 8)
    directory = tempfile.mkdtemp(prefix="cpersist-fresh-lab-", dir=args.dir)
    paths = {w: os.path.join(directory, w + ".npy") for w in ways}  # np.save adds .npy
    times = {w: [] for w in ways}
    try:
        for w in ways:
            WAYS[w](arr, paths[w])
        first, rest = ways[0], ways[1:] or ways
        for number in range(args.rounds):
            # Each way right after the first: what it costs depends on the
            # pages the call before it freed.
            for w in rest if number % 2 == 0 else rest[::-1]:
                for name in (first, w) if w != first else (w,):
                    if args.clean:
                        _flush(paths[name])
                    r0 = resource.getrusage(resource.RUSAGE_SELF)
                    c0, t0 = time.process_time(), time.perf_counter()
                    WAYS[name](arr, paths[name])
                    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                    system = resource.getrusage(resource.RUSAGE_SELF).ru_stime - r0.ru_stime
                    times[name].append((wall, cpu, system))
        med = statistics.median
        base = [med(t[i] for t in times[ways[0]]) for i in range(3)]
        for w in ways:
            cols = list(zip(*times[w]))
            print(f"{w:9} " + "  ".join(
                f"{label} {min(c) * 1e3:7.0f} / {med(c) * 1e3:7.0f} ms ({med(c) / b:4.2f})"
                for label, c, b in zip(("wall", "cpu", "sys"), cols, base)), flush=True)
    finally:
        remove_scratch(directory)


if __name__ == "__main__":
    main()
