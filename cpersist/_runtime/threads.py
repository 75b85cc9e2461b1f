"""Thread pools shared by dump and load: one process-wide pool per number of
threads, made on first use and renewed in a forked child. What runs on them
is :mod:`.parallel`.
"""

import _thread
import os
import threading

from .fork import renew_after_fork

_pools = {}
_pools_lock = threading.Lock()


def default_n_threads():
    """Number of CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def get_pool(n_threads):
    """A process-wide pool of ``n_threads`` workers, made on first use."""
    with _pools_lock:
        pool = _pools.get(n_threads)
        if pool is None:
            pool = _pools[n_threads] = _Pool(n_threads)
        return pool


def run_later(func, *args):
    """Run ``func(*args)`` on a thread of its own, not waited for, after
    the work handed to it before: work never queued behind a pool's, whose
    end and errors the caller learns of only through what ``func`` records
    (closing a descriptor that keeps a replaced file from being deleted,
    writing a buffer of a file written around the page cache).

    The thread is started without waiting for it to run, as
    ``threading.Thread.start`` does: that wait hands the GIL to the new
    thread and back, which would cost the first dump that replaces a file
    more than the dump itself.
    """
    global _later
    with _pools_lock:
        if _later is None:
            from _queue import SimpleQueue

            _later = SimpleQueue()
            _thread.start_new_thread(_run_later, (_later,))
        _later.put((func, args))


def wait_for_later():
    """Wait until the work handed to :func:`run_later` so far is done (a
    benchmark's contender then does not pay for the deletions the one
    before it left there)."""
    if _later is not None:
        done = _thread.allocate_lock()
        done.acquire()
        run_later(done.release)
        done.acquire()


def _run_later(queue):
    while True:
        func, args = queue.get()
        try:
            func(*args)
        except BaseException:  # noqa: BLE001, S110 - nothing waits for it to say
            pass


_later = None


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
renew_after_fork(globals(), _pools=dict, _pools_lock=threading.Lock, _future_lock=threading.Lock,
                 _later=lambda: None)
