"""Thread pools shared by dump and load, and an ordered bounded pipeline.

zlib, LZ4, Zstandard and Blosc release the GIL on large buffers, so chunks
of arrays are compressed on a thread pool while the calling thread writes
them in order (:func:`ordered_map`); loads of compressed sections and the
pickle stream of a dump have every thread, the calling one included, claim
chunks and do all the work on them (:func:`run_claimed`); a thread of a
slice that is done with its chunks helps decode the blocks of another's
(:func:`spread`). A checksum on the pool overlaps the calling thread's
reads and writes; xxhash 4 and later release the GIL only on inputs over
64 KiB (xxhash 3 holds it), and checksums of data that is not in the CPU's
caches are bound by memory bandwidth, so spreading checksums alone over
more threads gains little.
"""

import itertools
import os
import threading
from collections import deque

from .fork import renew_after_fork

_END = object()
#: Chunks in flight per worker. With one, a worker that has finished idles
#: until the calling thread has consumed the previous chunk, so the workers
#: take turns instead of running together; two keep each worker busy while
#: the calling thread catches up.
IN_FLIGHT_PER_THREAD = 2
#: Work that is only copying bytes (raw chunks, or chunks kept verbatim,
#: with their checksums) is done by the calling thread alone below this
#: many bytes: waking a pool thread and passing the GIL back and forth with
#: it take longer than copying them.
COPY_ALONE_BELOW = 4 << 20
_pools = {}
_pools_lock = threading.Lock()


def default_n_threads():
    """Number of CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_n_threads(n_threads):
    """Validate a user's ``n_threads`` argument and resolve ``None``."""
    if n_threads is None:
        return default_n_threads()
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
        raise ValueError(f"n_threads must be None or an int >= 1, got {n_threads!r}")
    return n_threads


_local = threading.local()


def thread_share():
    """Threads the caller may use for its item of :func:`run_claimed`: the
    threads asked for that have no item of their own (1 outside it). A
    codec that can spread one chunk over threads uses that many."""
    return getattr(_local, "share", 1)


def get_pool(n_threads):
    """A process-wide pool of ``n_threads`` workers, made on first use."""
    with _pools_lock:
        pool = _pools.get(n_threads)
        if pool is None:
            pool = _pools[n_threads] = _Pool(n_threads)
        return pool


class _Pool:
    """Worker threads started as work comes, up to ``n_threads``, that run
    what :meth:`submit` hands them in order.

    What cpersist needs of :class:`concurrent.futures.ThreadPoolExecutor`,
    without its import (logging, queue...: a first compressed dump would pay
    for them). The threads are daemons that wait for work between calls:
    every call waits for the work it handed out before returning, so none
    is left running at exit.
    """

    def __init__(self, n_threads):
        from _queue import SimpleQueue  # C; the queue module would import heapq and more

        self._queue = SimpleQueue()
        self._n_threads = n_threads
        self._threads = []
        self._lock = threading.Lock()

    def submit(self, func, *args):
        """Run ``func(*args)`` on a worker; returns its :class:`_Future`."""
        future = _Future(func, args)
        self._queue.put(future)
        if len(self._threads) < self._n_threads:
            with self._lock:
                if len(self._threads) < self._n_threads:
                    thread = threading.Thread(target=self._work, daemon=True,
                                              name=f"cpersist_{len(self._threads)}")
                    thread.start()
                    self._threads.append(thread)
        return future

    def _work(self):
        get = self._queue.get
        while True:
            get()._run()


_PENDING, _RUNNING, _CANCELLED, _FINISHED = range(4)
#: Guards the state changes of every future (held for an instant each).
_future_lock = threading.Lock()


class _Future:
    """The result of work handed to a :class:`_Pool`, as
    :class:`concurrent.futures.Future` gives it."""

    __slots__ = ("_func", "_args", "_state", "_value", "_error", "_finished")

    def __init__(self, func, args):
        self._func, self._args = func, args
        self._state = _PENDING
        self._value = self._error = None
        self._finished = threading.Lock()
        self._finished.acquire()  # released once finished or cancelled

    def _run(self):
        with _future_lock:
            if self._state != _PENDING:
                return
            self._state = _RUNNING
        try:
            self._value = self._func(*self._args)
        except BaseException as exc:
            self._error = exc
        self._func = self._args = None
        self._state = _FINISHED
        self._finished.release()

    def cancel(self):
        """Cancel the work if no worker has started it; returns whether it is cancelled."""
        with _future_lock:
            if self._state == _PENDING:
                self._state = _CANCELLED
                self._func = self._args = None
                self._finished.release()
            return self._state == _CANCELLED

    def cancelled(self):
        return self._state == _CANCELLED

    def done(self):
        return self._state in (_CANCELLED, _FINISHED)

    def _wait(self, timeout):
        if not self._finished.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError("the work did not finish in time")
        self._finished.release()
        if self._state == _CANCELLED:
            raise _cancelled_error()

    def result(self, timeout=None):
        """The work's return value (waiting for it); raises what it raised."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self, timeout=None):
        """What the work raised (waiting for it), or None."""
        self._wait(timeout)
        return self._error


def _cancelled_error():
    from concurrent.futures import CancelledError

    return CancelledError()


# In a forked child the parent's pools have no threads (a fork copies only the
# thread that called it), so work handed to them would never run: the child
# makes its own pools on first use.
renew_after_fork(globals(), _pools=dict, _pools_lock=threading.Lock, _future_lock=threading.Lock)


def ordered_map(func, items, n_threads, consume):
    """Apply ``func`` to ``items`` on a pool and ``consume`` results in order.

    At most ``2 * n_threads`` results are in flight, which bounds the memory
    held by finished-but-unconsumed results to a few chunks. With one thread
    or a single item everything runs inline (a pool round-trip costs more
    than compressing a small chunk).

    Parameters
    ----------
    func : callable
        Called as ``func(item)`` on a worker thread.
    items : iterable
        Produced on the calling thread (file reads happen here).
    n_threads : int
    consume : callable
        Called as ``consume(item, result)`` on the calling thread, in order.
    """
    items = iter(items)
    first = next(items, _END)
    second = next(items, _END) if first is not _END else _END
    if n_threads <= 1 or second is _END:
        # A single chunk (every small array) costs more to hand to a pool
        # than to process here.
        for item in (first, second):
            if item is not _END:
                consume(item, func(item))
        for item in items:
            consume(item, func(item))
        return
    pool = get_pool(n_threads)
    pending = deque()
    limit = n_threads * IN_FLIGHT_PER_THREAD
    try:
        for item in itertools.chain((first, second), items):
            pending.append((item, pool.submit(func, item)))
            if len(pending) >= limit:
                item, future = pending.popleft()
                consume(item, future.result())
        while pending:
            item, future = pending.popleft()
            consume(item, future.result())
    finally:
        # On error, wait for the work already submitted: it may write into
        # buffers the caller is about to free or reuse.
        for _, future in pending:
            future.cancel()
        for _, future in pending:
            if not future.cancelled():
                try:
                    future.result()
                except BaseException:
                    pass


def run_claimed(task, n_items, n_threads, helping=False):
    """Run ``task(claims)`` on this thread and up to ``n_threads - 1`` workers.

    ``claims`` is one iterator shared by every thread: each ``next()`` hands
    out the next index of ``range(n_items)`` exactly once, in order (``next``
    on a range iterator is atomic under the GIL), and stops early once any
    thread has failed. No thread waits for another until the end, when this
    one waits for every worker (tasks may write into memory the caller is
    about to use or free) and raises the first error.

    The calling thread works too, rather than handing items to a pool and
    waiting: a worker that has to take the GIL back from a thread busy in
    Python code waits a whole switch interval (``sys.getswitchinterval()``)
    for it, which can be longer than decoding a chunk.

    Parameters
    ----------
    task : callable
        ``task(claims)``; it processes the indices it draws from ``claims``.
    n_items : int
    n_threads : int
    helping : bool
        A thread that runs out of items helps the others with the work
        their items hand out through :func:`spread`, until every thread is
        done: items of uneven sizes (the parts of two chunks a slice
        covers, one of them hardly) keep every thread busy.
    """
    unclaimed = iter(range(n_items))
    errors = []

    def claims():
        for i in unclaimed:
            if errors:  # another thread failed: the work is over
                return
            yield i

    workers = max(1, min(n_threads, n_items))
    share = max(1, n_threads // workers)
    group = _Group() if helping and workers > 1 else None

    def run():
        before = getattr(_local, "share", 1), getattr(_local, "group", None)
        _local.share, _local.group = share, group
        if group is not None:
            group.enter()
        try:
            task(claims())
        except BaseException as exc:
            errors.append(exc)
        finally:
            _local.share, _local.group = before
            if group is not None:
                group.leave()
        if group is not None:
            group.help()

    helpers = []
    if workers > 1:
        pool = get_pool(n_threads)
        helpers = [pool.submit(run) for _ in range(workers - 1)]
    try:
        run()
        for helper in helpers:
            # A helper not started yet has nothing left to claim: cancelled,
            # it is not waited for (on a busy machine a pool thread can take
            # longer to be scheduled than the work took).
            if not helper.cancel():
                helper.exception()
    except BaseException as exc:  # interrupted while waiting
        errors.append(exc)  # the helpers stop at their next item
        raise
    if errors:
        raise errors[0]


def spread(func, n_items):
    """Call ``func(start, stop)`` on runs of ``range(n_items)`` that cover
    it once, in any order, on this thread and on the threads free to help
    it: those its item of :func:`run_claimed` leaves idle
    (:func:`thread_share`), and, with ``helping``, the workers of that call
    that have run out of items. Returns when every call has returned;
    raises the first error.

    Alone, this thread makes one call for everything. Otherwise it takes
    half of what is left at each call and a helper one item at a time:
    few calls (each is a return to Python, where the threads contend for
    the GIL), and small ones at the end, where they even out the finish.
    ``func`` must not itself wait for other threads.
    """
    group = getattr(_local, "group", None)
    share = getattr(_local, "share", 1)
    if n_items <= 1 or group is None and share <= 1:
        if n_items:
            func(0, n_items)
        return
    job = _Job(func, n_items)
    extra = []
    if group is not None:
        group.publish(job)
    if share > 1:
        pool = get_pool(share)
        extra = [pool.submit(job.run_items, True) for _ in range(min(share, n_items) - 1)]
    try:
        job.run_items(False)
    finally:
        if group is not None:
            group.withdraw(job)
        for helper in extra:
            helper.cancel()
        job.wait()  # for the calls helpers are still making: they write our output
    if job.errors:
        raise job.errors[0]


class _Job:
    """The calls of one :func:`spread`, claimed run by run by any thread."""

    __slots__ = ("func", "n_items", "next", "busy", "errors", "done")

    def __init__(self, func, n_items):
        self.func = func
        self.n_items = n_items
        self.next = 0  # the first item not claimed yet
        self.busy = 0  # calls made by helpers, not returned yet
        self.errors = []
        self.done = threading.Condition(threading.Lock())

    def run_items(self, helper):
        """Make calls until no item is left; returns once none is left."""
        done = self.done
        while True:
            with done:
                start, left = self.next, self.n_items - self.next
                if left <= 0 or self.errors:
                    return
                stop = self.next = start + (1 if helper else (left + 1) // 2)
                if helper:
                    self.busy += 1
            try:
                self.func(start, stop)
            except BaseException as exc:
                self.errors.append(exc)
            finally:
                if helper:
                    with done:
                        self.busy -= 1
                        if not self.busy:
                            done.notify_all()

    def wait(self):
        with self.done:
            while self.busy:
                self.done.wait()


class _Group:
    """The workers of one :func:`run_claimed` with ``helping``: those done
    with their items run the calls the others :func:`spread`."""

    __slots__ = ("changed", "jobs", "active")

    def __init__(self):
        self.changed = threading.Condition(threading.Lock())
        self.jobs = []
        self.active = 0  # workers still on their own items

    def enter(self):
        with self.changed:
            self.active += 1

    def leave(self):
        with self.changed:
            self.active -= 1
            if not self.active:
                self.changed.notify_all()

    def publish(self, job):
        with self.changed:
            self.jobs.append(job)
            self.changed.notify_all()

    def withdraw(self, job):
        with self.changed:
            if job in self.jobs:
                self.jobs.remove(job)

    def help(self):
        """Run others' calls until every worker is done with its items."""
        while True:
            with self.changed:
                while not self.jobs and self.active:
                    self.changed.wait()
                if not self.jobs:
                    return
                job = self.jobs[0]
            job.run_items(True)
            self.withdraw(job)  # none of its calls is left to claim
