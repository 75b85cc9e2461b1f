"""Whether small arrays out of the pickle stream, in one block loaded as views of it, would
make a raw load of many small arrays cheaper than ``pickle.load``: a model of that format
beside ``pickle.load`` (protocol 5) and a raw ``cpersist.load``, and their dumps, in the
shipped benchmark's conditions (:func:`cpersist.benchmarks.turns.timed_in_turn`: each call
in turn, its result freed and the memory given back after it, so that each faults its
memory in afresh).

    python benchmarks/oob_block_lab.py [--datasets forest,d70k,d8k] [--rounds 15] [--runs 3]
                                       [--oob-from BYTES] [--dir DIR]

The model (``oob``) pickles at protocol 5 with a ``buffer_callback`` taking each array's
buffer out of band (only those of ``--oob-from`` bytes or more) and writes, through the raw
dump's ``AtomicFile``: a 64-byte head; a table of each buffer's offset and length and an
XXH3-64 checksum per MiB of the stream and of the block; the stream; the buffers, each at a
multiple of 64 bytes. A load reads the table and stream in one read, the block in ONE
``preadv`` into new memory, verifies both, and unpickles with ``buffers=`` slices of the
block. The block: ``np.empty`` (``oob``; numpy advises huge pages from 4 MiB, which
transparent huge pages in ``madvise`` mode honour), first backed by one
``madvise(MADV_POPULATE_WRITE)`` (``oob-pop``), both without numpy's advice (``oob-4k``,
``oob-4k-pop``), a zeroed ``bytearray`` (``oob-ba``), or none (``oob-scat``: an ``np.empty``
per buffer, filled by the same preadv).

Datasets: ``forest`` (the shipped benchmark's random forest), ``d70k``, ``d8k`` (dicts of
400 float64 arrays of 70 KB, 8 KB). Printed per run (with the load average): wall time
(median, min), the calling thread's CPU time (median, max) and minor page faults per call,
with ratios to pickle's; then the RSS a load's result holds, whole and with one array kept.
"""

import argparse
import ctypes
import gc
import os
import pickle
import resource
import statistics
import struct
import sys
import tempfile
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import xxhash  # noqa: E402
from numpy._core.multiarray import _set_madvise_hugepage  # noqa: E402

import cpersist  # noqa: E402
from cpersist._runtime.pages import fault_in  # noqa: E402
from cpersist.container.atomic import AtomicFile  # noqa: E402
from cpersist.benchmarks.datasets import SIZE_PRESETS, package_datasets  # noqa: E402
from cpersist.benchmarks.turns import timed_in_turn  # noqa: E402

MAGIC = b"OOBLAB01"
HEAD = struct.Struct("<8sQQQ")  # magic, buffers, stream bytes, block bytes
HEAD_BYTES = 64
PIECE = 1 << 20
IOV_MAX = 1024
#: The loads of the model, by the memory their block is read into.
BLOCKS = {"oob": "empty", "oob-pop": "populate", "oob-4k": "empty4k",
          "oob-4k-pop": "populate4k", "oob-ba": "bytearray", "oob-scat": "scatter"}


def up64(n):
    return -(-n // 64) * 64


def sums(*parts):
    """XXH3-64 of each MiB of the bytes of ``parts`` joined, without joining them."""
    out, state, filled = [], xxhash.xxh3_64(), 0
    for p in parts:
        p = memoryview(p).cast("B")
        while p.nbytes:
            take = min(p.nbytes, PIECE - filled)
            state.update(p[:take])
            filled, p = filled + take, p[take:]
            if filled == PIECE:
                out.append(state.intdigest())
                state, filled = xxhash.xxh3_64(), 0
    return out + [state.intdigest()] if filled else out


def oob_dump(obj, path, start=0):
    """``obj`` in the lab's format at ``path``, buffers of ``start`` bytes and more out of band."""
    buffers = []

    def keep(buffer):  # a false value: out of band
        return buffer.raw().nbytes < start or buffers.append(buffer)

    stream = memoryview(pickle.dumps(obj, protocol=5, buffer_callback=keep))
    lengths = [b.raw().nbytes for b in buffers]
    offsets = np.cumsum([0] + [up64(k) for k in lengths])
    parts = [p for b, k in zip(buffers, lengths) for p in (b.raw(), bytes(up64(k) - k))]
    table = np.array(offsets[:-1].tolist() + lengths + sums(stream) + sums(*parts), "<u8")
    head = HEAD.pack(MAGIC, len(lengths), stream.nbytes, offsets[-1]).ljust(HEAD_BYTES, b"\0")
    stream_end = HEAD_BYTES + table.nbytes + stream.nbytes
    iov = [head, table, stream, bytes(up64(stream_end) - stream_end)] + parts
    # As a raw dump writes (its AtomicFile): the old file's clean pages freed first, a
    # temporary file renamed onto the path, the old file held open so that the rename is quick.
    with AtomicFile(path, free_old=True) as target:
        file = target.file()
        for part in iov:
            file.write(part)


def oob_load(path, block="empty"):
    fd = os.open(path, os.O_RDONLY)
    try:
        magic, n, stream_bytes, block_bytes = HEAD.unpack(os.pread(fd, HEAD.size, 0))
        if magic != MAGIC:
            raise ValueError("not a lab file")
        n_table = 8 * (2 * n + -(-stream_bytes // PIECE) + -(-block_bytes // PIECE))
        data = os.pread(fd, n_table + stream_bytes, HEAD_BYTES)
        table = np.frombuffer(data, "<u8", n_table // 8)
        stream = memoryview(data)[n_table:]
        n_stream_sums = -(-stream_bytes // PIECE)
        if sums(stream) != table[2 * n:2 * n + n_stream_sums].tolist():
            raise ValueError("stream checksum mismatch")
        offsets, lengths = table[:n].tolist(), table[n:2 * n].tolist()
        block_at = up64(HEAD_BYTES + n_table + stream_bytes)
        block_sums = table[2 * n + n_stream_sums:]
        if block == "scatter":
            buffers = scatter_read(fd, block_at, lengths, block_sums.tolist())
            return pickle.loads(stream, buffers=buffers)
        if block.endswith("4k"):  # without numpy's huge-page advice on 4 MiB and more
            was = _set_madvise_hugepage(False)
        mem = bytearray(block_bytes) if block == "bytearray" else np.empty(block_bytes, np.uint8)
        if block.endswith("4k"):
            _set_madvise_hugepage(was)
        view = memoryview(mem).cast("B")
        if block.startswith("populate"):
            fault_in(view)
        if block_bytes and os.preadv(fd, [view], block_at) != block_bytes:
            raise ValueError("block cut short")
        if sums(view) != block_sums.tolist():
            raise ValueError("block checksum mismatch")
        return pickle.loads(stream, buffers=[view[o:o + k] for o, k in zip(offsets, lengths)])
    finally:
        os.close(fd)


def scatter_read(fd, at, lengths, expected):
    """Each buffer read into memory of its own, the padding into a scratch buffer; verified."""
    arrays = [np.empty(k, np.uint8) for k in lengths]
    scratch = memoryview(bytearray(64 * len(lengths))).cast("B")
    parts = [p for i, (a, k) in enumerate(zip(arrays, lengths))
             for p in (memoryview(a), scratch[64 * i:64 * i + up64(k) - k])]
    for i in range(0, len(parts), IOV_MAX):
        batch = parts[i:i + IOV_MAX]
        want = sum(p.nbytes for p in batch)
        if os.preadv(fd, batch, at) != want:
            raise ValueError("block cut short")
        at += want
    if sums(*parts) != expected:
        raise ValueError("block checksum mismatch")
    return arrays


def thread_counted(call, cpu, faults):
    """``call`` adding its thread CPU time and minor page faults to the lists."""
    def counted():
        f0, c0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt, time.thread_time()
        result = call()
        cpu.append(time.thread_time() - c0)
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0)
        return result
    return counted


def rss_after_trim():
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def held_memory(load, one):
    """MB of RSS the load's result holds, and holds with only ``one(result)`` kept."""
    base = rss_after_trim()
    result = load()
    whole = rss_after_trim() - base
    kept = one(result)  # noqa: F841 (held while measured)
    del result
    return whole / 1e6, (rss_after_trim() - base) / 1e6


def dataset(name):
    if name == "forest":
        return next(d for d in package_datasets() if d.name == "random_forest").make(
            SIZE_PRESETS["medium"], False)
    rng = np.random.default_rng(0)
    size = {"d70k": 70_000, "d8k": 8_000}[name] // 8
    return {f"a{i}": rng.standard_normal(size) for i in range(400)}


def fingerprint(obj):
    """The arrays' bytes, dtypes and shapes (of each tree's nodes and values, for the forest)."""
    arrays = obj.values() if isinstance(obj, dict) else [
        a for e in obj.estimators_ for a in (e.tree_.__getstate__()["nodes"], e.tree_.value)]
    return [(a.dtype, a.shape, a.tobytes()) for a in arrays]


def report(title, times, cpu, faults):
    ref, ref_cpu = statistics.median(times["pickle"]), statistics.median(cpu["pickle"])
    print(f"  {title}: wall median (min) ms, / pickle's; thread CPU median (max) ms,"
          " / pickle's; minor faults")
    for name, t in times.items():
        med, med_cpu = statistics.median(t), statistics.median(cpu[name])
        print(f"    {name:10s} {med * 1e3:7.2f} ({min(t) * 1e3:6.2f}) {med / ref:6.3f};"
              f" {med_cpu * 1e3:7.2f} ({max(cpu[name]) * 1e3:6.1f}) {med_cpu / ref_cpu:6.3f};"
              f" {statistics.median(faults[name]):5.0f}")


def run(name, obj, args, work):
    paths = {k: os.path.join(work, f"{name}.{k}") for k in ("pkl", "cp", "oob")}

    def pickle_dump():
        with open(paths["pkl"], "wb") as f:
            pickle.dump(obj, f, protocol=5)

    def pickle_load():
        with open(paths["pkl"], "rb") as f:
            return pickle.load(f)

    dumps = {"pickle": pickle_dump,
             "cpersist": lambda: cpersist.dump(obj, paths["cp"], compress=0),
             "oob": lambda: oob_dump(obj, paths["oob"], args.oob_from)}
    loads = {"pickle": pickle_load, "cpersist": lambda: cpersist.load(paths["cp"]),
             **{label: partial(oob_load, paths["oob"], kind) for label, kind in BLOCKS.items()}}
    for call in dumps.values():
        call()
    for k, load in loads.items():  # each load gives back what was dumped
        if fingerprint(load()) != fingerprint(obj):
            raise AssertionError(f"{k} loads another object")
    print(f"{name}: files", ", ".join(f"{k} {os.path.getsize(p) / 1e6:.2f} MB"
                                      for k, p in paths.items()))
    for run_no in range(args.runs):
        print(f" run {run_no + 1}, load average {os.getloadavg()[0]:.2f}")
        for title, calls in (("load", loads), ("dump", dumps)):
            cpu, faults = {k: [] for k in calls}, {k: [] for k in calls}
            counted = {k: thread_counted(c, cpu[k], faults[k]) for k, c in calls.items()}
            times = timed_in_turn(counted, args.rounds)
            for k in calls:  # the untimed first round's counts dropped
                del cpu[k][0], faults[k][0]
            report(title, times, cpu, faults)
    print("  memory held by a load's result, MB (whole; one array kept):")
    for k, load in loads.items():
        # trees copy their arrays; the classes_ arrays of the forest stay views
        whole, part = held_memory(load, lambda r: r.classes_ if hasattr(r, "classes_")
                                  else next(iter(r.values())))
        print(f"    {k:10s} {whole:7.1f}; {part:7.1f}")
    for p in paths.values():
        os.unlink(p)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="forest,d70k,d8k")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--oob-from", type=int, default=0,
                        help="only buffers of at least this many bytes out of band")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        for name in args.datasets.split(","):
            run(name, dataset(name), args, work)


if __name__ == "__main__":
    main()
