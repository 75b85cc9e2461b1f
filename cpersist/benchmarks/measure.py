"""Measuring one write or read in a fresh process: time, peak RSS,
page-cache state ("How it measures" in docs/benchmarks.rst); the files a
method wrote: their size on disk, their removal, and their state in the
page cache (evicted before a cold read, read once before a warm one, the
share still resident afterwards)."""

import contextlib
import functools
import gc
import mmap
import os
import shutil
import signal
import statistics
import sys
import threading
import time
import traceback
import types

from .datasets import load_cached


#: Bytes of a memory page.
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def files_of(path):
    """``[path]`` for a file, every file under ``path`` for a directory."""
    if os.path.isdir(path):
        return sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
    return [path]


def disk_size(path):
    """Bytes of the file, or of every file under the directory, at ``path``."""
    return sum(os.path.getsize(f) for f in files_of(path))


def remove_output(path):
    """Delete what a method wrote at ``path`` (file or directory), if anything."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


def evict_from_cache(path):
    """Flush ``path`` to disk and drop it from the page cache; False when
    ``posix_fadvise`` is not available (then reads are warm whatever was
    asked, and the row says so)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages cannot be dropped
        if not hasattr(os, "posix_fadvise"):
            return False
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    finally:
        os.close(fd)


def prime_memory(nbytes):
    """Collect garbage, touch ``nbytes`` of new memory (as numpy allocates it; at most half
    the free memory) and free it, right before a timed call allocates as much: on a virtual
    machine whose host takes back what its guest frees, new memory otherwise costs seconds at
    random (a 100 MB load: 50 ms)."""
    import numpy as np
    gc.collect()
    free = os.sysconf("SC_AVPHYS_PAGES") if "SC_AVPHYS_PAGES" in getattr(os, "sysconf_names", ()) else 0
    np.ones(int(min(nbytes, free * PAGE // 2)), np.uint8)


def warm_cache(path):
    """Read ``path`` once so it sits in the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 22):
            pass


def resident_fraction(path):
    """Fraction of ``path``'s pages in the page cache (``mincore``), or None."""
    try:
        import ctypes
        size = os.path.getsize(path)
        if size == 0:
            return 0.0
        libc = ctypes.CDLL(None, use_errno=True)
        with open(path, "rb") as f:
            # ACCESS_COPY gives a writable (private) view, which ctypes needs
            # for an address; nothing is read or written through it.
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        try:
            buf = ctypes.c_char.from_buffer(mm)
            n = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * n)()
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(size), vec)
            del buf
            return None if rc else sum(v & 1 for v in vec) / n
        finally:
            mm.close()
    except Exception:
        return None


def rss_bytes():
    """Current (resident, resident file-backed/shared) bytes of this process."""
    try:
        with open("/proc/self/statm", "rb") as f:
            parts = f.read().split()
        return int(parts[1]) * PAGE, int(parts[2]) * PAGE
    except OSError:  # not Linux: ru_maxrss is the best we have
        import resource
        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return (r if sys.platform == "darwin" else r * 1024), 0


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # "5" resets the peak RSS (VmHWM) on Linux >= 4.0
        return True
    except OSError:
        return False


def _read_hwm():
    try:
        with open("/proc/self/status", "rb") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(b"VmHWM:"))
    except (OSError, StopIteration):
        return None


class PeakMemory:
    """Context manager measuring the peak RSS above the level at entry:
    ``peak``, in bytes (the kernel high-water mark when resettable, else the
    sampler's maximum); ``peak_anon``, the anonymous (non file-backed) part
    seen by the sampler; ``exact``, whether the high-water mark was used."""

    def __init__(self, interval=0.001):
        self.interval = interval
        self.peak = self.peak_anon = 0
        self.exact = False
        self._stop = threading.Event()
        self._max = (0, 0)

    def _run(self):
        while not self._stop.is_set():
            rss, shared = rss_bytes()
            self._max = (max(self._max[0], rss), max(self._max[1], rss - shared))
            time.sleep(self.interval)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()  # before the baseline: its stack is not the op's
        time.sleep(0.002)
        self.exact = _reset_hwm()
        rss, shared = rss_bytes()
        self._max = self.base, self.base_anon = rss, rss - shared
        return self

    def __exit__(self, *exc):
        rss, shared = rss_bytes()
        self._stop.set()
        self._thread.join()
        hwm = (_read_hwm() if self.exact else None) or 0
        self.peak = max(0, self._max[0] - self.base, rss - self.base, hwm - self.base)
        self.peak_anon = max(0, self._max[1] - self.base_anon, rss - shared - self.base_anon)
        return False


def _repeats(task, times):
    """The numbers of the repeats to run: ``task["repeats"]``, fewer once
    ``times`` add up to the task's ``budget`` of seconds."""
    for r in range(task["repeats"]):
        if sum(times) > (task.get("budget") or float("inf")):
            return
        yield r


def _measured(pm, r):
    """``pm`` around the first repeat only: the :class:`PeakMemory` sampler
    takes the GIL a thousand times a second, slowing the operation a few percent."""
    return pm if r == 0 else contextlib.nullcontext()


def write_task(task):
    """Write the dataset ``task['repeats']`` times; return times and peaks."""
    method, level, path = task["method"], task["level"], task["file_path"]
    obj = load_cached(task["data_path"])
    gc.collect()
    times, pm = [], PeakMemory()
    # The codec alone on the same threads, timed after each write (both
    # see the machine alike): what the write could reach.
    limit = method.limit(obj, level) if hasattr(method, "limit") else None
    limit_write = []
    for r in _repeats(task, times):
        remove_output(path)  # every repeat creates the file, as a user would
        prime_memory(task.get("prime", 0))
        with _measured(pm, r):
            t0 = time.perf_counter()
            method.write(obj, path, level)
            times.append(time.perf_counter() - t0)
        if limit is not None:
            limit_write.append(limit.encode_s())
    del limit
    t0 = time.perf_counter()
    for name in files_of(path):
        fd = os.open(name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return {"status": "ok", "write_times": times, "write_peak": pm.peak,
            "write_peak_anon": pm.peak_anon, "peak_exact": pm.exact, "disk_bytes": disk_size(path),
            "fsync_s": time.perf_counter() - t0, "limit_write_times": limit_write}


def read_task(task):
    """Read the file ``task['repeats']`` times; check the first result."""
    from .compare import first_difference, touch
    method, path, cold = task["method"], task["file_path"], task["cold"]
    times, resident, open_times, pm = [], [], [], PeakMemory()
    # The codec alone decoding the same chunks, timed after each read: what the read could
    # reach. Encoded and decoded once, untimed, from the checked result (a process's first).
    limit, limit_read = None, []
    cache = "cold" if cold else "warm"
    for r in _repeats(task, times):
        names = files_of(path)
        if cold:
            if not all([evict_from_cache(name) for name in names]):
                cache = "warm (no posix_fadvise)"
            fractions = [resident_fraction(name) for name in names]
            resident.append(None if None in fractions else max(fractions, default=0.0))
        else:
            for name in names:
                warm_cache(name)
        prime_memory(task.get("prime", 0))
        with _measured(pm, r):
            t0 = time.perf_counter()
            result = method.read(path)
            t_open = time.perf_counter()
            if method.mmap:
                touch(result)
            times.append(time.perf_counter() - t0)
        open_times.append(t_open - t0)  # for mmap: the open alone, before any access
        if r == 0:
            # The original is loaded only now, after the measured read.
            diff = first_difference(load_cached(task["data_path"]), result)
            if diff:
                return {"status": "failed", "reason": "wrong data read back: " + diff, "cache": cache}
            limit = method.limit(result, task["level"]) if hasattr(method, "limit") else None
            if limit is not None:
                limit.decode_s()
        del result
        if limit is not None:
            limit_read.append(limit.decode_s())
    res = [x for x in resident if x is not None]
    if cold and res and max(res) > 0.5:
        # e.g. a tmpfs or a filesystem ignoring the advice: say so in the row.
        cache = "warm (eviction had no effect)"
    return {"status": "ok", "read_times": times, "open_times": open_times, "read_peak": pm.peak,
            "read_peak_anon": pm.peak_anon, "peak_exact": pm.exact, "cache": cache,
            "resident_frac": max(res) if res else None, "limit_read_times": limit_read}


def _worker(conn, task):
    # Ctrl-C reaches the whole process group: the parent handles it; a
    # worker reporting it as a failure would add a false row.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # Other suites pass their own module-level function as "call".
        out = (task.get("call") or (write_task if task["op"] == "write" else read_task))(task)
    except BaseException as e:  # report, never hang the parent
        out = {"status": "failed", "reason": f"{task['op']} raised {type(e).__name__}: {e}".strip(),
               "traceback": traceback.format_exc(limit=-3)}
    try:
        conn.send(out)
    except OSError:  # the parent is gone (interrupted): nobody to report to
        pass
    finally:
        conn.close()


#: Imported once in the forkserver so each measurement starts fast.
preload_modules = ["cpersist.benchmarks._preload"]


@functools.lru_cache(maxsize=None)
def _context():
    import multiprocessing as mp
    try:
        ctx = mp.get_context("forkserver")
    except ValueError:  # no forkserver (Windows): slower but equivalent
        return mp.get_context("spawn")
    ctx.set_forkserver_preload(preload_modules)
    return ctx


@contextlib.contextmanager
def _hidden_main():
    """Start a child without it re-importing the caller's ``__main__``
    (an import per measurement, and a script without the ``__main__``
    guard breaks): a bare stand-in during ``start()``."""
    real = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if real is not None:
            sys.modules["__main__"] = real


@contextlib.contextmanager
def _interrupt_after():
    """Hold Ctrl-C until the block ends, then raise it (inside ``start()``
    it would make the forkserver's child print an ``EOFError`` traceback)."""
    held = []
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # Ctrl-C raises nothing here, or cannot be handled here
        return
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


def run_in_subprocess(task, timeout=None):
    """Run one task (``op``, and ``call`` or a write/read task's ``method``,
    ``level``, ``file_path``, ``data_path``, ``repeats``, ``cold``) in a fresh
    process; its report: ``status`` ``"ok"`` with the numbers, or ``"failed"``
    with the ``reason`` (an error, a death, or ``timeout`` seconds passed)."""
    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_worker, args=(child, task), daemon=True)
    try:
        with _interrupt_after(), _hidden_main():
            p.start()
        child.close()
        out = _wait_for(p, parent, task, timeout)
    except KeyboardInterrupt:
        # Ctrl-C: the parent stops the run; the worker must not outlive it.
        if p.pid is not None:
            p.kill()
            p.join()
        raise
    finally:
        parent.close()
    p.join(10)
    if p.is_alive():
        p.kill()
        p.join()
    return out


def _wait_for(p, conn, task, timeout):
    try:
        if conn.poll(timeout):
            return conn.recv()
        p.kill()
        return {"status": "failed", "reason": f"{task['op']} timed out after {timeout:.0f} s"}
    except EOFError:
        p.join(5)
        return {"status": "failed",
                "reason": f"{task['op']} worker died (exit code {p.exitcode}; out of memory?)"}


def median(xs):
    """Median of a non-empty sequence (None when empty)."""
    return statistics.median(xs) if xs else None
