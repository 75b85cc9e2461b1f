"""Whether a background dump's file would be done sooner if its direct
writes came straight from the snapshot's copies (page-aligned memory, at
page-aligned file offsets) rather than through
:class:`cpersist.container.direct_io.DirectFile`'s own buffers, which
copies every byte it is handed once more.

    python benchmarks/direct_from_snapshot.py [--mb 1024] [--rounds 5] [--dir DIR]

A checkpoint of ``--mb`` MB in float32 arrays of 64 MB, as
``training_loop.py calls`` dumps, timed in turn each round (order rotated):

``plain``
    ``cpersist.dump(obj, path)`` (through the page cache; replaces its file).
``background``
    ``cpersist.dump(obj, path, background=True).result()``, as released.
``lab copy``
    the same pipeline as cpersist's background dump, modelled: the calling
    thread copies the arrays from the last back into snapshot memory
    (reused, page-aligned), while a dump thread takes 4 MiB chunks from the
    first on, from the originals until the two meet, then from the copies,
    checksums each on a pool thread and writes it into a ``DirectFile``
    (copy into its buffers, direct writes on another thread).
``lab aligned``
    the same, but the dump thread puts each chunk it reads from an original
    into the snapshot's copy (the copy the call would have made) and
    hands 32 MiB runs of the snapshot memory to the writing thread, which
    writes them ``O_DIRECT`` at the same (page-aligned) offsets in the file:
    no copy into a buffer of the file's.
``raw direct``
    the floor: 32 MiB direct writes of memory already in place, nothing
    copied nor checksummed.

Each writes a new file and renames it onto the one it wrote the round
before (no fsync), and after each, untimed, the deletion of replaced files
and the page cache's write-back are waited for. Printed: wall ms (min,
median) and process CPU ms (median) per contender, and each's per-round
ratio to ``plain`` (median); with the load average before and after.
"""

import argparse
import mmap
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cpersist  # noqa: E402
from cpersist._runtime.threads import run_later  # noqa: E402
from cpersist.container.direct_io import DirectFile  # noqa: E402
from cpersist.container.layout import verbatim_checksums  # noqa: E402
from benchmarks.timing import remove_scratch  # noqa: E402

MB = 1 << 20
CHUNK = 4 * MB  # a raw section's chunks
RUN = 32 * MB  # a direct write (DirectFile.BUFFER_SIZE)
BLOCK = 4 * MB  # what the call copies at a time (snapshot.COPY_BLOCK)


def load_average():
    return subprocess.run(["uptime"], capture_output=True,
                          text=True).stdout.split("average:")[-1].strip()


class Meeting:
    """The call copying chunks from the last back, the dump taking them from
    the first on; each chunk is the call's or the dump's, once."""

    def __init__(self, n):
        self.low = n  # the call has claimed chunks [low, n)
        self.taken = 0  # the dump has taken chunks [0, taken) from the originals
        self.copied = [False] * n
        self.cond = threading.Condition()

    def call_claims(self):
        with self.cond:
            if self.low <= self.taken:
                return None
            self.low -= 1
            return self.low

    def call_copied(self, i):
        with self.cond:
            self.copied[i] = True
            self.cond.notify_all()

    def dump_takes(self, i):
        """True: read chunk i from the original; False: from the copy (waited for)."""
        with self.cond:
            if i < self.low:
                self.taken = i + 1
                return True
            while not self.copied[i]:
                self.cond.wait()
            return False


def pipeline(originals, copies, path, aligned, pool):
    """One background-dump-like write of ``originals`` (uint8 views, each a
    multiple of CHUNK) to ``path``, the call's copies into ``copies``."""
    per = [a.nbytes // CHUNK for a in originals]
    n = sum(per)
    where = [(k, j * CHUNK) for k, count in enumerate(per) for j in range(count)]
    meet = Meeting(n)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.posix_fallocate(fd, 0, n * CHUNK)
    digests = []
    error = []

    def dump():
        try:
            if aligned:
                fcntl_direct(fd)
                runs = queue.Queue()
                writer = threading.Thread(target=write_runs, args=(fd, runs))
                writer.start()
            else:
                file = DirectFile(fd)
            pending, run_start, run_len = [], None, 0
            for i, (k, at) in enumerate(where):
                original = meet.dump_takes(i)
                copy = copies[k][at:at + CHUNK]
                if aligned:
                    if original:  # put it in the snapshot: the dump writes from there
                        np.copyto(copy, originals[k][at:at + CHUNK])
                    chunk = copy
                else:
                    chunk = originals[k][at:at + CHUNK] if original else copy
                pending.append(pool.submit(verbatim_checksums, chunk))
                if aligned:
                    if run_start is None:
                        run_start, run_k, run_at = i * CHUNK, k, at
                    run_len += CHUNK
                    if run_len == RUN or at + CHUNK == originals[k].nbytes:
                        runs.put((memoryview(copies[k])[run_at:run_at + run_len], run_start))
                        run_start, run_len = None, 0
                else:
                    file.write(chunk)
                while len(pending) > 4:
                    digests.append(pending.pop(0).result())
            for future in pending:
                digests.append(future.result())
            if aligned:
                runs.put(None)
                writer.join()
            else:
                file.close()
        except BaseException as exc:  # noqa: BLE001
            error.append(exc)

    thread = threading.Thread(target=dump)
    thread.start()
    while True:  # the call: copy from the last back until the dump is met
        i = meet.call_claims()
        if i is None:
            break
        k, at = where[i]
        np.copyto(copies[k][at:at + CHUNK], originals[k][at:at + CHUNK])
        meet.call_copied(i)
    thread.join()
    os.close(fd)
    if error:
        raise error[0]
    replace(path)


def fcntl_direct(fd):
    import fcntl

    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)


def write_runs(fd, runs):
    while True:
        item = runs.get()
        if item is None:
            return
        view, offset = item
        while view.nbytes:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n


def raw_direct(copies, path):
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        offset = 0
        for copy in copies:
            view = memoryview(copy)
            for at in range(0, view.nbytes, RUN):
                part = view[at:at + RUN]
                while part.nbytes:
                    n = os.pwrite(fd, part, offset)
                    part, offset = part[n:], offset + n
    finally:
        os.close(fd)
    replace(path)


def replace(path):
    """Rename the new file onto ``path``, the replaced file deleted on
    cpersist's run_later thread, as a dump's atomic replace does."""
    try:
        replaced = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        replaced = None
    os.replace(path + ".tmp", path)
    if replaced is not None:
        run_later(os.close, replaced)


def check(path, originals):
    """Raise unless the file at ``path`` holds the arrays' bytes in order."""
    with open(path, "rb") as file:
        for original in originals:
            if file.read(original.nbytes) != original.tobytes():
                raise AssertionError(f"{path} does not hold the arrays' bytes")
        if file.read(1):
            raise AssertionError(f"{path} is longer than the arrays")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    count = max(1, args.mb // 64)
    rng = np.random.default_rng(0)
    obj = {f"layer{i}": rng.standard_normal(args.mb * MB // 4 // count, np.float32)
           for i in range(count)}
    originals = [v.view(np.uint8) for v in obj.values()]
    # Page-aligned snapshot memory, reused round after round (as Buffers does).
    maps = [mmap.mmap(-1, a.nbytes) for a in originals]
    copies = [np.frombuffer(m, np.uint8) for m in maps]
    for copy, original in zip(copies, originals):
        np.copyto(copy, original)
    pool = ThreadPoolExecutor(1)
    directory = tempfile.mkdtemp(prefix="cpersist-direct-snapshot-", dir=args.dir)

    def path_of(name):
        return os.path.join(directory, name.replace(" ", "-"))

    contenders = {
        "plain": lambda: cpersist.dump(obj, path_of("plain")),
        "background": lambda: cpersist.dump(obj, path_of("background"),
                                            background=True).result(),
        "lab copy": lambda: pipeline(originals, copies, path_of("lab copy"), False, pool),
        "lab aligned": lambda: pipeline(originals, copies, path_of("lab aligned"), True, pool),
        "raw direct": lambda: raw_direct(copies, path_of("raw direct")),
    }
    names = list(contenders)
    wall = {name: [] for name in names}
    cpu = {name: [] for name in names}

    def settle():
        done = threading.Event()
        run_later(done.set)
        done.wait()
        os.sync()

    before = load_average()
    try:
        for number in range(args.rounds + 1):  # round 0 untimed: files to replace
            line = []
            for j in range(len(names)):
                name = names[(number + j) % len(names)]
                t0, c0 = time.perf_counter(), time.process_time()
                contenders[name]()
                elapsed, spent = time.perf_counter() - t0, time.process_time() - c0
                settle()
                if number:
                    wall[name].append(elapsed)
                    cpu[name].append(spent)
                elif name.startswith(("lab", "raw")):
                    check(path_of(name), originals)
                line.append(f"{name} {elapsed * 1e3:.0f}")
            print(f"round {number}{'' if number else ' (untimed)'}: " + ", ".join(line),
                  flush=True)
    finally:
        remove_scratch(directory)
        pool.shutdown()
    print(f"{args.mb} MB in {count} arrays, {args.rounds} rounds; load average {before} -> "
          f"{load_average()}")
    for name in names:
        paired = [a / b for a, b in zip(wall[name], wall["plain"])]
        print(f"  {name:12s} wall min {min(wall[name]) * 1e3:6.0f} median "
              f"{statistics.median(wall[name]) * 1e3:6.0f} ms, cpu median "
              f"{statistics.median(cpu[name]) * 1e3:5.0f} ms; / plain per round median "
              f"{statistics.median(paired):.3f}")


if __name__ == "__main__":
    main()
