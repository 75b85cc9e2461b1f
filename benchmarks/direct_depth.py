"""Whether the disk takes ``O_DIRECT`` writes faster with more of them in
flight: a new file of ``size`` bytes written in ``O_DIRECT`` pwrites of
``--write`` bytes each, by 1, 2 or 3 threads at once (each thread takes
the next offset, so up to that many writes are in flight), and with
larger writes on one thread; and a background dump of as many bytes of
arrays with each number of buffers of
:class:`cpersist.container.direct_io.DirectFile` (one writing thread).

    python benchmarks/direct_depth.py [--size 1e9] [--rounds 5] [--dir DIR]
                                      [--ways d1,d2,d3,w64,w128,b2,b3]
                                      [--busy 0]

The ways: ``dN`` is N threads writing ``--write`` bytes (32 MiB) each at
a time; ``wN`` one thread writing N MiB at a time; ``bN``
``cpersist.dump(..., background=True).result()`` of 16 float64 arrays
with N buffers per file. With ``--busy K``, K threads copy arrays (as a
background dump's call and its dump do, each on a core) while each way
that writes directly (dN, wN) runs. The ways run in turn
in each round, their order reversed every other round (the machine's
other work changes over a run). Printed per way: wall time of the file
(open to close, no fsync, as a dump's), min and median, and GB/s of the
median.
"""

import argparse
import mmap
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.timing import remove_scratch  # noqa: E402
from cpersist.container import direct_io  # noqa: E402



def background_dump(path, obj, buffers):
    """A background dump of ``obj`` to ``path`` through direct files of
    ``buffers`` buffers, to its end."""
    import cpersist

    direct_io.BUFFERS = buffers
    cpersist.dump(obj, path, background=True).result()


def busy_copying(threads, stop):
    """Start ``threads`` threads copying 64 MiB arrays until ``stop`` is set."""
    import numpy as np

    def run():
        source = np.ones(8 << 20)
        target = np.empty_like(source)
        while not stop.is_set():
            np.copyto(target, source)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    return workers


def write_file(path, size, write, threads, buffers):
    """Write ``size`` bytes (a multiple of ``write``) to a new ``path`` with
    ``threads`` threads, each pwriting ``write`` bytes at the next offset."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    next_offset = [0]
    lock = threading.Lock()

    def run(buffer):
        view = memoryview(buffer)[:write]
        while True:
            with lock:
                offset = next_offset[0]
                if offset >= size:
                    return
                next_offset[0] = offset + write
            done = 0
            while done < write:
                done += os.pwrite(fd, view[done:], offset + done)

    try:
        workers = [threading.Thread(target=run, args=(buffers[i],)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        os.close(fd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=1e9)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", type=int, default=32, help="MiB per write of dN")
    parser.add_argument("--ways", default="d1,d2,d3,w64,w128")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--busy", type=int, default=0,
                        help="threads copying arrays while dN and wN write")
    args = parser.parse_args()
    ways = []
    for name in args.ways.split(","):
        if name.startswith("d"):
            ways.append((name, args.write << 20, int(name[1:])))
        elif name.startswith("w"):
            ways.append((name, int(name[1:]) << 20, 1))
        elif name.startswith("b"):
            ways.append((name, None, int(name[1:])))
        else:
            parser.error(f"unknown way {name!r}")
    largest = max([write for _, write, _ in ways if write] + [args.write << 20])
    size = int(args.size) // largest * largest  # whole writes for every way
    obj = None
    if any(write is None for _, write, _ in ways):
        import numpy as np

        obj = {f"a{i}": np.random.default_rng(i).standard_normal(size // 16 // 8)
               for i in range(16)}
    buffers = []
    for _ in range(max([count for _, write, count in ways if write] + [1])):
        buffer = mmap.mmap(-1, largest)
        buffer[:] = os.urandom(1 << 20) * (largest >> 20)
        buffers.append(buffer)
    directory = tempfile.mkdtemp(prefix="cpersist-direct-depth-", dir=args.dir)
    times = {name: [] for name, _, _ in ways}
    try:
        for round_number in range(args.rounds):
            order = ways if round_number % 2 == 0 else ways[::-1]
            line = []
            for name, write, count in order:
                path = os.path.join(directory, name)
                if write is None:
                    t0 = time.perf_counter()
                    background_dump(path, obj, count)
                    elapsed = time.perf_counter() - t0
                else:
                    stop = threading.Event()
                    copying = busy_copying(args.busy, stop)
                    t0 = time.perf_counter()
                    try:
                        write_file(path, size, write, count, buffers)
                    finally:
                        elapsed = time.perf_counter() - t0
                        stop.set()
                        for worker in copying:
                            worker.join()
                os.unlink(path)
                times[name].append(elapsed)
                line.append(f"{name} {elapsed:.3f}")
            print(f"round {round_number}: " + ", ".join(line), flush=True)
    finally:
        remove_scratch(directory)
    print(f"{size / 1e9:.2f} GB per file; wall s: min, median; GB/s of median")
    for name, _, _ in ways:
        median = statistics.median(times[name])
        print(f"{name:6s} {min(times[name]):.3f} {median:.3f}  {size / median / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main()
