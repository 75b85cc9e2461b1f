"""Whether one file takes ``O_DIRECT`` writes and buffered writes at the
same time: a thread writes the first half of a new file directly (32 MiB
pwrites), another its second half through the page cache (1 MiB pwrites),
at once. Printed per round: wall time, the time each thread spent inside
its writes, the buffered thread's CPU time, and the buffered writes that
took over 5 ms (a 1 MiB copy into the page cache takes well under that)
and the time they took. If the two ran side by side, the buffered thread
would spend about its CPU time in writes; where the file's lock is held
through each direct write (ext4), its long writes add up to about the
direct writes' time instead. ``--prealloc`` first gives the file its
blocks (``fallocate``) or its size (``ftruncate``).

    python benchmarks/two_sinks.py [--size 1073741824] [--rounds 3]
                                   [--prealloc none|falloc|trunc] [--dir DIR]
"""

import argparse
import mmap
import os
import shutil
import tempfile
import threading
import time

DIRECT_WRITE = 32 << 20
BUFFERED_WRITE = 1 << 20


def direct_half(path, source, end, log):
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    try:
        for offset in range(0, end, DIRECT_WRITE):
            start = time.perf_counter()
            os.pwrite(fd, memoryview(source)[offset:offset + DIRECT_WRITE], offset)
            log.append((start, time.perf_counter()))
    finally:
        os.close(fd)


def buffered_half(fd, source, begin, end, log):
    cpu = time.thread_time()
    for offset in range(begin, end, BUFFERED_WRITE):
        start = time.perf_counter()
        os.pwrite(fd, memoryview(source)[offset:offset + BUFFERED_WRITE], offset)
        log.append((start, time.perf_counter()))
    return time.thread_time() - cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prealloc", choices=("none", "falloc", "trunc"), default="none")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    size = args.size // (2 * DIRECT_WRITE) * (2 * DIRECT_WRITE)
    source = mmap.mmap(-1, size)  # page-aligned, as direct writes need
    source.write(os.urandom(1 << 20) * (size >> 20))
    directory = tempfile.mkdtemp(prefix="cpersist-two-sinks-", dir=args.dir)
    try:
        for _ in range(args.rounds):
            path = os.path.join(directory, "file")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            if args.prealloc == "falloc":
                os.posix_fallocate(fd, 0, size)
            elif args.prealloc == "trunc":
                os.ftruncate(fd, size)
            direct_log, buffered_log = [], []
            start = time.perf_counter()
            thread = threading.Thread(target=direct_half,
                                      args=(path, source, size // 2, direct_log))
            thread.start()
            cpu = buffered_half(fd, source, size // 2, size, buffered_log)
            thread.join()
            wall = time.perf_counter() - start
            os.close(fd)
            os.unlink(path)
            long_writes = [end - begin for begin, end in buffered_log if end - begin > 0.005]
            print(f"{args.prealloc}: wall {wall:.2f} s; direct writes {sum(e - b for b, e in direct_log):.2f} s"
                  f", buffered writes {sum(e - b for b, e in buffered_log):.2f} s (cpu "
                  f"{cpu:.2f} s), of which {len(long_writes)} over 5 ms: {sum(long_writes):.2f} s",
                  flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
