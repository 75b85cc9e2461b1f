"""Work spread over the thread pools (:mod:`.threads`): an ordered bounded
pipeline, items claimed by every thread, and help between threads.

zlib, LZ4, Zstandard and Blosc release the GIL on large buffers, so chunks
of arrays are compressed on a thread pool while the calling thread writes
them in order (:func:`ordered_map`); loads of compressed sections and the
pickle stream of a dump have every thread, the calling one included, claim
chunks and do all the work on them (:func:`run_claimed`); a thread of a
slice that is done with its chunks helps decode the blocks of another's
(:func:`spread`). A checksum on the pool overlaps the calling thread's
reads and writes, not other Python code: xxhash's one-call functions hold
the GIL while they hash (a running state's ``update`` releases it), and
checksums of data that is not in the CPU's caches are bound by memory
bandwidth, so spreading checksums alone over more threads gains little.
"""

import itertools
import threading
from collections import deque

from .threads import get_pool

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
#: Items the calling thread of :func:`run_claimed` prepares for its worker
#: beyond each it claims itself. Faulting in a raw chunk's pages takes
#: somewhat less time than the worker's read into them, and the caller's
#: read of its own into new pages somewhat more: with four, the two threads
#: finish together.
PREPARE_AHEAD = 4

_local = threading.local()


def thread_share():
    """Threads the caller may use for its item of :func:`run_claimed`: the
    threads asked for that have no item of their own (1 outside it). A
    codec that can spread one chunk over threads uses that many."""
    return getattr(_local, "share", 1)


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


def run_claimed(task, n_items, n_threads, helping=False, prepare=None):
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
    prepare : callable, optional
        With two threads, this one calls ``prepare(i)`` for the items the
        worker claims, before the worker gets them (see :class:`_Prepared`);
        otherwise it is not called.
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
    prepared = (_Prepared(prepare, n_items, unclaimed, errors)
                if prepare is not None and workers == 2 else None)

    def run(caller=False):
        before = getattr(_local, "share", 1), getattr(_local, "group", None)
        _local.share, _local.group = share, group
        if group is not None:
            group.enter()
        try:
            if prepared is None:
                task(claims())
            elif caller:
                try:
                    task(prepared.caller_claims())
                finally:
                    prepared.release()
            else:
                task(prepared.worker_claims())
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
        run(caller=True)
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


class _Prepared:
    """The claims of a :func:`run_claimed` whose calling thread prepares
    items for its one worker: before each item it claims for itself, the
    items the worker has claimed and waits for, then (once the worker runs)
    the :data:`PREPARE_AHEAD` after it; an item the worker claims is handed
    to it once prepared. The caller prepares none of its own items, and
    after the first none while the worker has not started (on a busy
    machine, it may not get a core before the work is done)."""

    __slots__ = ("prepare", "errors", "unclaimed", "changed", "ready", "started", "n_items")

    def __init__(self, prepare, n_items, unclaimed, errors):
        self.prepare, self.n_items = prepare, n_items
        self.unclaimed, self.errors = unclaimed, errors
        self.changed = threading.Condition(threading.Lock())
        self.ready = 0  # items below are prepared, or the caller's own
        self.started = False

    def caller_claims(self):
        changed = self.changed
        while not self.errors:
            with changed:
                i = next(self.unclaimed, None)
                if i is None:
                    return
                # The worker is seldom running yet at the first item: the
                # ones after it are prepared for it all the same.
                ahead = PREPARE_AHEAD if self.started or i == 0 else 0
                stop = min(i + 1 + ahead, self.n_items)
            for k in range(self.ready, stop):
                if k != i:
                    self.prepare(k)
                with changed:
                    self.ready = k + 1
                    changed.notify_all()
            yield i

    def worker_claims(self):
        changed = self.changed
        with changed:
            self.started = True
        while not self.errors:
            with changed:
                i = next(self.unclaimed, None)
                if i is None:
                    return
                while self.ready <= i:
                    changed.wait()
            yield i

    def release(self):
        """Hand every item out as it is (the caller is done or failed)."""
        with self.changed:
            self.ready = self.n_items
            self.changed.notify_all()


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
