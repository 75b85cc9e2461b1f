"""Background dumps: a snapshot taken on the calling thread, written on a
thread of its own, at most :data:`MAX_PENDING` at a time, and waited for at
interpreter exit."""

import atexit
import sys
import threading

from .._runtime.fork import renew_after_fork
from ..container.direct_io import direct_writes_possible
from .snapshot import take
from .snapshot_pickler import Buffers
from .unpicklable import PICKLING_ERRORS, unpicklable_error

#: Background dumps pending at once. A call beyond it waits for the oldest
#: to finish before taking its snapshot, so that at most this many
#: snapshots (a copy of the arrays each) are held in memory.
MAX_PENDING = 1

#: A dump to a path of a snapshot holding at least this many bytes of
#: arrays writes its file around the page cache
#: (:class:`cpersist.container.direct_io.DirectFile`): copying it into the page
#: cache would cost the writing thread more CPU time than all the rest of
#: the dump, and take a core and memory bandwidth from the caller's work
#: (a training loop's) meanwhile. A smaller file goes through the page
#: cache, where a load soon after finds it.
DIRECT_FROM = 64 << 20

#: Whether the dump starts writing while the call copies the large arrays,
#: from the originals the call has not copied yet (see :func:`start`); the
#: maintainers' lab (benchmarks/training_loop.py) compares both ways.
OVERLAP_COPIES = True

_slots = threading.BoundedSemaphore(MAX_PENDING)
_buffers = None  # a snapshot.Buffers, made by the first dump
_lock = threading.Lock()
#: Background dumps pending, and those that failed (until exit: whether
#: their error was retrieved is known only then).
_futures = set()
_exit_handler_set = False


def _future_type():
    from concurrent.futures import Future

    class DumpFuture(Future):
        """A :class:`concurrent.futures.Future` that knows whether its error
        was looked at, so that one nobody retrieved is reported at exit."""

        retrieved = False

        def result(self, timeout=None):
            self.retrieved = True
            return super().result(timeout)

        def exception(self, timeout=None):
            self.retrieved = True
            return super().exception(timeout)

    return DumpFuture


def start(obj, write, target, codec, protocol, chunk_size, n_threads, deferred=True):
    """Snapshot ``obj``, then write its dump to ``target`` on a new thread:
    ``write(snapshot_obj, target, codec, protocol, chunk_size, n_threads)``
    (:func:`.dump.write_to`).

    Returns a :class:`concurrent.futures.Future` of what ``write``
    returns (or raises); an error of taking the snapshot is one too, an
    object that cannot be pickled named as ``write`` names it. Waits
    while :data:`MAX_PENDING` dumps are pending. With ``deferred``, the
    dump starts once the snapshot's stream is taken, while this thread
    copies the large arrays from the last back (see
    :mod:`cpersist.pickling.snapshot`): the chunks of its sections come
    from the originals until the two meet, and this returns once the dump
    no longer reads the originals.
    """
    global _exit_handler_set, _buffers
    name = target.name
    future = _future_type()()
    future.set_running_or_notify_cancel()  # started: cannot be cancelled
    future.target = name
    _slots.acquire()
    with _lock:
        if not _exit_handler_set:
            atexit.register(_finish_at_exit)
            _exit_handler_set = True
        _futures.add(future)
        if _buffers is None:
            _buffers = Buffers()
    buffers = _buffers
    try:
        snapshot = take(obj, buffers, deferred and OVERLAP_COPIES)
        snapshot.measure_copy_speed()  # before the dump competes with the copy
        if snapshot.nbytes >= DIRECT_FROM:
            target.direct = True
            if codec is None and direct_writes_possible() and not buffers.new_bytes:
                # Raw sections go to the disk straight from the copies: what
                # the dump reads of the originals it puts in them first (a
                # compressed one's chunks are the codec's output anyway).
                # Not into memory new to the process (the first dump's): its
                # page faults would hold the call up (give_back faults in,
                # after the dump, what the call has not copied into).
                snapshot.fill_taken = True
                target.kept = snapshot.kept_memory()
    except BaseException as exc:
        _slots.release()
        future.set_exception(_snapshot_error(obj, protocol, exc))
        return future

    def run():
        try:  # the snapshot lives until the file is written
            with snapshot.written_by_this_thread():
                result = write(snapshot.restore(), target, codec, protocol, chunk_size,
                               n_threads)
        except BaseException as exc:
            target.kept = None  # its buffers are referenced by the snapshot alone
            snapshot.wait_finished()  # nothing copies into the buffers any more
            buffers.give_back(snapshot.buffers())
            _slots.release()
            future.set_exception(exc)
        else:
            # The restored object is gone: its memory serves the next snapshot.
            target.kept = None
            snapshot.wait_finished()
            buffers.give_back(snapshot.buffers())
            _slots.release()
            with _lock:
                _futures.discard(future)
            future.set_result(result)

    threading.Thread(target=run, name=f"cpersist dump of {name}", daemon=True).start()
    # Copied while the dump writes the arrays before from the originals: the
    # call returns once the two meet and the dump has let go of them.
    snapshot.copy()
    return future


def _snapshot_error(obj, protocol, exc):
    """The error a background dump's future raises for ``exc``, raised while
    taking the snapshot of ``obj``."""
    if not isinstance(exc, PICKLING_ERRORS):
        return exc
    error = unpicklable_error(obj, protocol, exc)
    if error is None:
        return exc
    error.__cause__ = exc
    return error


def _finish_at_exit():
    """Wait for the pending background dumps; report on stderr each that
    failed with nobody having asked its future for the error."""
    with _lock:
        futures = list(_futures)
        _futures.clear()
    for future in futures:
        retrieved = future.retrieved
        exc = future.exception()  # waits for a pending one
        if exc is not None and not retrieved:
            print(f"cpersist: the background dump to {future.target!r} failed: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)


# A forked child has none of the parent's dump threads: its slots are all free.
renew_after_fork(globals(), _slots=lambda: threading.BoundedSemaphore(MAX_PENDING),
                 _lock=threading.Lock, _futures=set, _buffers=lambda: None)
