"""How much cpersist's thread pool speeds up dump and load, beside controls.

Run from the repository root (it is not installed with cpersist)::

    python benchmarks/threads.py --out DIR [--datasets atlas_c,timeseries] [--levels 3]
        [--threads 1,2] [--repeat 9] [FILE ...]

For every dataset and compression level, one fresh process writes the data
at each thread count in turn, round after round, and another loads the file
the same way (warm page cache). The counts alternate within one process,
in the order 1, 2, 2, 1, 1, 2, ... (for counts 1,2), because on a shared
virtual machine the speed of the whole machine drifts within seconds, and a
count measured in its own process seconds after the other would carry that
drift into the ratio. Each round gives a speed-up (time at the first count
over time at the other); ``OUT/threads.csv`` reports the median over rounds.

Beside every timing, the same process times controls at the same count:
two involve no cpersist code and say what the machine itself gives the
threads at that moment (:class:`MachineControls`); one runs the file's own
chunks through the codecs alone (:class:`CodecControl`). A speed-up is only
worth comparing with a target next to them.
"""

import argparse
import gc
import mmap
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

if __name__ == "__main__":  # run as a script: import this file as benchmarks.threads
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cpersist.benchmarks import datasets as ds  # noqa: E402
from cpersist.benchmarks.measure import median, run_in_subprocess  # noqa: E402
from cpersist.benchmarks.measure import warm_cache  # noqa: E402
from cpersist.tools.table import format_table  # noqa: E402

__all__ = ["THREADS_COLUMNS", "THREADS_DATASETS", "run_threads", "format_threads", "main"]

MB = 1e6
#: Default datasets: the compressible built-in arrays (thread counts matter
#: little where chunks are stored raw).
THREADS_DATASETS = ["atlas_c", "atlas_f", "sparse_table", "timeseries"]

THREADS_COLUMNS = [
    "dataset", "description", "level", "op", "threads", "time_s", "MBps", "speedup",
    "speedup_min", "speedup_max", "repeats", "status", "reason", "times",
    "compute_speedup", "fresh_speedup", "compute_times", "fresh_times",
    "codec_speedup", "codec_times",
]
#: Chunk size of the fresh-memory control, cpersist's default.
_CONTROL_CHUNK = 4 << 20


class MachineControls:
    """The machine's own speed-up from threads, timed without cpersist.

    ``compute``: Zstandard level 3 on one 64 KiB buffer, which stays in each
    core's cache, ``calls`` times in all, shared out among the threads. It
    measures the CPUs alone: on a virtual machine two vCPUs may share a
    physical core, or one may be descheduled, for seconds at a time.

    ``fresh``: decoding ``frames`` Zstandard frames of 4 MiB each into a new
    array (``np.empty``, so memory the process has not touched yet), the
    threads taking the frames in turn. This is what a load does, minus
    cpersist: every page of a new array faults in as it is first written.

    Parameters
    ----------
    calls : int
        Compressions in the ``compute`` control.
    frames : int
        4 MiB frames in the ``fresh`` control: 12 (48 MiB), above glibc's largest mmap threshold (32 MiB), so that every
        array is new memory from the kernel rather than a reused block.
    """

    def __init__(self, calls=256, frames=12):
        import zstandard

        self._zstd = zstandard
        self.calls = calls
        # One 4 MiB frame of a smooth, quantized signal (ratio 20; the
        # compressible datasets give 6 to 20), decoded into every 4 MiB slice.
        x = np.linspace(0.0, 16.0, _CONTROL_CHUNK // 4, dtype=np.float32)
        data = np.round(np.sin(x) * np.cos(x / 7) * 1e4) / np.float32(1e4)
        compressor = zstandard.ZstdCompressor(level=3)
        self._frame = compressor.compress(data)
        self._frames = frames
        self._cache_buffer = data[:16 << 10].tobytes()
        # One Zstandard context per thread, made and used once before any
        # timing (a context allocates its tables on first use).
        self._compressors, self._decompressors = [], []

    def _contexts(self, n):
        while len(self._compressors) < n:
            compressor = self._zstd.ZstdCompressor(level=3)
            compressor.compress(self._cache_buffer)
            decompressor = self._zstd.ZstdDecompressor()
            decompressor.decompress(self._frame)
            self._compressors.append(compressor)
            self._decompressors.append(decompressor)

    def _run(self, n, work):
        self._contexts(n)
        threads = [threading.Thread(target=work, args=(k, n)) for k in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    def compute(self, n):
        """Seconds for ``n`` threads to share the compressions."""
        def work(k, n):
            compressor = self._compressors[k]
            for _ in range(k, self.calls, n):
                compressor.compress(self._cache_buffer)
        return self._run(n, work)

    def fresh(self, n):
        """Seconds for ``n`` threads to decode the frames into new memory.

        Mapped anonymously, as the allocator may hand back pages a freed
        array of the same size had faulted in: each call faults its own."""
        fresh = mmap.mmap(-1, self._frames * _CONTROL_CHUNK)
        out = memoryview(fresh)
        short = []

        def work(k, n):
            decompressor = self._decompressors[k]
            for i in range(k, self._frames, n):
                target = out[i * _CONTROL_CHUNK:(i + 1) * _CONTROL_CHUNK]
                with decompressor.stream_reader(self._frame) as reader:
                    if reader.readinto(target) != len(target):
                        short.append(i)
        elapsed = self._run(n, work)
        out.release()
        fresh.close()
        if short:  # a bug in the control itself, not a measurement
            raise RuntimeError(f"control frames {short} decoded short")
        return elapsed


class CodecControl:
    """The same chunks through the codecs alone, split evenly among threads.

    Built from a file cpersist wrote: every encoded chunk of every section,
    with the codec that wrote it. ``decode`` decodes them into a new array
    per section, as a load does; ``encode`` encodes the decoded chunks
    again, as a dump does. Thread ``k`` of ``n`` takes chunks ``k``,
    ``k + n``, ... and nothing else runs: no file I/O, no checksums, no
    pickling, no pipeline. The threads' speed-up on it is what cpersist's
    could be with nothing of its own.

    Parameters
    ----------
    path : str
        A cpersist file; its bytes are read into memory once, here.
    """

    def __init__(self, path):
        from cpersist.container import VERBATIM, ContainerReader

        with open(path, "rb") as f:
            reader = ContainerReader(f, path)
            f.seek(0)
            data = memoryview(f.read())
        self._sizes = []
        #: (section position, start in its output, stored bytes, raw length,
        #: codec or None for a chunk stored as is, typesize)
        self._chunks = []
        for section in reader.sections:
            if section.is_raw:
                continue
            start = 0
            for offset, stored, raw, _, flag in section.chunks:
                at = reader.base + offset
                codec = None if flag == VERBATIM else section.codec
                self._chunks.append((len(self._sizes), start, data[at:at + stored], raw,
                                     codec, section.typesize))
                start += raw
            self._sizes.append(section.raw_size)
        self._raw = None
        self._pools = {}

    def __len__(self):
        """Chunks timed: none in a raw file, whose timings stay empty."""
        return len(self._chunks)

    def _run(self, n, work):
        # The calling thread takes share 0 and n - 1 threads kept between
        # calls the others, as in cpersist: the codecs keep a context per
        # thread, and new threads would make new contexts at every call,
        # timing their set-up rather than the codec. A new pool does the
        # work once untimed first.
        pool = self._pools.get(n)
        if pool is None and n > 1:
            pool = self._pools[n] = ThreadPoolExecutor(n - 1, thread_name_prefix="control")
            self._run(n, work)
        t0 = time.perf_counter()
        helpers = [pool.submit(work, k) for k in range(1, n)]
        work(0)
        for helper in helpers:
            helper.result()
        return time.perf_counter() - t0

    def decode(self, n):
        """Seconds for ``n`` threads to decode every chunk into new arrays."""
        outs = [memoryview(np.empty(size, np.uint8)) for size in self._sizes]
        errors = []

        def work(k):
            try:
                for at, start, stored, raw, codec, _ in self._chunks[k::n]:
                    target = outs[at][start:start + raw]
                    if codec is None:
                        target[:] = stored
                    else:
                        codec.decode_into(stored, target)
            except BaseException as exc:  # reported below, not lost in a thread
                errors.append(exc)
        elapsed = self._run(n, work)
        if errors:
            raise errors[0]
        if self._raw is None:
            # The first decode's output is what encode() compresses.
            self._raw = [outs[at][start:start + raw] for at, start, _, raw, _, _ in self._chunks]
        return elapsed

    def encode(self, n):
        """Seconds for ``n`` threads to encode every decoded chunk again."""
        if self._raw is None:
            self.decode(1)
        errors = []

        def work(k):
            try:
                for chunk, (_, _, _, _, codec, typesize) in zip(
                        self._raw[k::n], self._chunks[k::n]):
                    if codec is not None:
                        codec.encode(chunk, typesize)
            except BaseException as exc:
                errors.append(exc)
        elapsed = self._run(n, work)
        if errors:
            raise errors[0]
        return elapsed


def _order(counts, r):
    # Reversed every other round: what runs first in a round (just after a
    # free of the previous result, say) is not always the same count.
    return list(counts) if r % 2 == 0 else list(reversed(counts))


def _threads_task(task):
    """In a fresh process: dump or load at each count, alternating."""
    import cpersist

    from cpersist.benchmarks.compare import first_difference

    path, counts, level = task["file_path"], task["counts"], task["level"]
    obj = ds.load_cached(task["data_path"])
    controls = MachineControls()
    # Made from the file: on a write, after the first dump has written it.
    codec_control = CodecControl(path) if task["op"] == "read" else None
    times = {n: [] for n in counts}
    control_times = {kind: {n: [] for n in counts} for kind in ("compute", "fresh", "codec")}
    checked = set()
    for r in range(task["repeats"]):
        for n in _order(counts, r):
            if task["op"] == "write":
                if os.path.exists(path):
                    os.unlink(path)  # every dump creates the file, as a user would
                gc.collect()
                t0 = time.perf_counter()
                cpersist.dump(obj, path, compress=level, n_threads=n)
                times[n].append(time.perf_counter() - t0)
            else:
                warm_cache(path)
                gc.collect()
                t0 = time.perf_counter()
                result = cpersist.load(path, n_threads=n)
                times[n].append(time.perf_counter() - t0)
                if n not in checked:
                    diff = first_difference(obj, result)
                    if diff:
                        return {"status": "failed",
                                "reason": f"wrong data read back at {n} threads: {diff}"}
                    checked.add(n)
                del result
            # Right after, at the same count: the machine's state this moment.
            gc.collect()
            control_times["compute"][n].append(controls.compute(n))
            control_times["fresh"][n].append(controls.fresh(n))
            if codec_control is None:
                codec_control = CodecControl(path)
            if len(codec_control):
                timed = codec_control.encode if task["op"] == "write" else codec_control.decode
                control_times["codec"][n].append(timed(n))
    return {"status": "ok", "times": times, "controls": control_times}


def run_threads(out_dir, dataset_list, size_bytes, levels, counts, repeats, timeout=1800.0):
    """Measure dump and load of each dataset at each thread count.

    Parameters
    ----------
    out_dir : str
        Scratch files go to ``out_dir/_work`` (removed afterwards).
    dataset_list : sequence of Dataset
    size_bytes : int
        Size of the generated datasets.
    levels : sequence of int
        cpersist ``compress`` levels (0 = raw).
    counts : sequence of int
        Thread counts; speed-ups are relative to the first.
    repeats : int
        Rounds: each count is timed once per round.
    timeout : float
        Seconds before one process is killed and its rows reported failed.

    Returns
    -------
    list of dict
        One row per (dataset, level, op, count) with the
        :data:`THREADS_COLUMNS` keys.
    """
    work = os.path.join(out_dir, "_work")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        for d in dataset_list:
            try:
                obj = d.make(size_bytes, False)
            except Exception as e:  # e.g. an untrusted pickle: reported, not fatal
                rows += [dict(dataset=d.name, description=d.description, level=level, op=op,
                              threads=n, repeats=repeats, status="failed",
                              reason=f"dataset not loaded: {type(e).__name__}: {e}")
                         for level in levels for op in ("write", "read") for n in counts]
                continue
            info = ds.save_cached(d, obj, os.path.join(work, "dataset.pkl"))
            del obj
            for level in levels:
                task = dict(call=_threads_task, file_path=os.path.join(work, "data.cp"),
                            data_path=info["path"], counts=list(counts), level=level,
                            repeats=repeats)
                for op in ("write", "read"):
                    res = run_in_subprocess(dict(task, op=op), timeout)
                    base = dict(dataset=d.name, description=info["description"], level=level,
                                op=op, repeats=repeats)
                    if res["status"] != "ok":
                        rows += [dict(base, threads=n, status="failed",
                                      reason=res.get("reason", "?")) for n in counts]
                        if op == "write":
                            break  # nothing to read
                        continue
                    rows += _rows(base, info["size_bytes"], res["times"], counts,
                                  res["controls"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _per_round(times, counts, n):
    return [a / b for a, b in zip(times[counts[0]], times[n])]


def _joined(times):
    return ";".join(f"{x:.6g}" for x in times)


def _rows(base, size, times, counts, controls):
    rows = []
    for n in counts:
        per_round = _per_round(times, counts, n)
        t = median(times[n])
        row = dict(
            base, threads=n, time_s=t, MBps=round(size / MB / t, 2),
            speedup=round(median(per_round), 4), speedup_min=round(min(per_round), 4),
            speedup_max=round(max(per_round), 4), status="ok", reason="",
            times=_joined(times[n]),
        )
        for kind, control in controls.items():
            if not control[n]:  # the codec control of a raw file: nothing to time
                row[f"{kind}_speedup"] = row[f"{kind}_times"] = ""
                continue
            row[f"{kind}_speedup"] = round(median(_per_round(control, counts, n)), 4)
            row[f"{kind}_times"] = _joined(control[n])
        rows.append(row)
    return rows


def _fmt(value, spec):
    return "-" if value in ("", None) else format(value, spec)


def format_threads(rows):
    """The end-of-run table of :func:`run_threads`.

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`run_threads`.

    Returns
    -------
    str
    """
    table = []
    for r in rows:
        cells = [r["dataset"], r["level"], r["op"], r["threads"]]
        if r.get("status") != "ok":
            table.append(cells + [f"{r.get('status', '')}: {r.get('reason', '')}"])
            continue
        table.append(cells + [f"{r['time_s']:.4f}", f"{r['MBps']:.1f}", f"{r['speedup']:.2f}",
                              f"{r['speedup_min']:.2f}-{r['speedup_max']:.2f}",
                              f"{r['compute_speedup']:.2f}", f"{r['fresh_speedup']:.2f}",
                              _fmt(r["codec_speedup"], ".2f"), "ok"])
    lines = [format_table(["dataset", "lvl", "op", "threads", "time_s", "MB/s", "speedup", "range",
                           "compute", "fresh", "codec", "status"], table,
                          right=(1, 3, 4, 5, 6, 7, 8, 9, 10))]
    lines.append("compute, fresh: the machine's own speed-up in the same rounds, without "
                 "cpersist (Zstandard in cache; decoding into new memory); codec: the same "
                 "chunks through the codecs alone (no I/O, checksums or pipeline)")
    return "\n".join(lines)


def build_parser():
    """The argument parser of ``python benchmarks/threads.py``."""
    from cpersist.benchmarks.cli import csv_list, level_list, thread_counts

    p = argparse.ArgumentParser(
        prog="python benchmarks/threads.py",
        description="cpersist dump and load at each thread count, alternating within one "
                    "process, beside machine and codec controls (threads.csv).")
    p.add_argument("files", nargs="*", metavar="PATH",
                   help="your own files to measure (as in python -m cpersist.benchmarks); "
                        "when given, only these run unless --datasets is also given")
    p.add_argument("--out", default="cpersist-threads", metavar="DIR",
                   help="output directory (threads.csv, machine.json); default ./cpersist-threads")
    p.add_argument("--datasets", type=csv_list, default=None, metavar="NAMES",
                   help="dataset names or patterns (default: " + ",".join(THREADS_DATASETS) + ")")
    p.add_argument("--levels", type=level_list, default=[3], metavar="L,L,...",
                   help="cpersist compress levels (default 3)")
    p.add_argument("--threads", type=thread_counts, default=None, metavar="N[,N...]",
                   help="thread counts, speed-ups relative to the first (default: 1 and all CPUs)")
    p.add_argument("--size", default="medium",
                   help="size of each generated dataset (tiny, small, medium, large or e.g. 250MB)")
    p.add_argument("--repeat", type=int, default=3, metavar="N",
                   help="rounds: each count timed once per round (default 3)")
    p.add_argument("--trust-pickles", action="store_true",
                   help="allow loading pickle/joblib user files (loading a pickle runs code)")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="seconds before one process is killed and its rows reported failed")
    p.add_argument("--no-progress", action="store_true", help="accepted for symmetry; no bar")
    return p


def main(argv=None):
    """Run the threads measurement from command-line arguments.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when every row is correct, 1 when some failed, 2 on bad arguments.
    """
    from cpersist._runtime.threads import default_n_threads
    from cpersist.benchmarks.output import write_csv, write_machine_json

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        size = ds.parse_size(args.size)
    except ValueError as e:
        parser.error(str(e))
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    for f in args.files:
        if not os.path.exists(f):
            parser.error(f"no such file: {f}")
    counts = args.threads if isinstance(args.threads, list) else sorted(
        {1, args.threads or default_n_threads()})
    try:
        dataset_list = ds.datasets_for_run(args.datasets, args.files, args.trust_pickles,
                                           THREADS_DATASETS)
    except ValueError as e:  # unknown dataset name
        parser.error(str(e))
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    rows = run_threads(args.out, dataset_list, size, args.levels, counts, args.repeat,
                       args.timeout)
    write_csv(os.path.join(args.out, "threads.csv"), rows, THREADS_COLUMNS)
    extra = {"argv": list(sys.argv[1:] if argv is None else argv), "suite": "threads",
             "threads": {"levels": args.levels, "counts": counts, "size_bytes": size,
                         "rounds": args.repeat, "cache": "warm"},
             "elapsed_s": round(time.perf_counter() - t_start, 2)}
    write_machine_json(os.path.join(args.out, "machine.json"), extra)
    print(format_threads(rows))
    failed = sum(r["status"] == "failed" for r in rows)
    if failed:
        print(f"{failed} measurement(s) FAILED; see the 'reason' column", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    from benchmarks.threads import main as _main  # the importable copy: workers unpickle it

    sys.exit(_main())
