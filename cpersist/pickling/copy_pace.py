"""How much of a deferred snapshot (:mod:`.snapshot`) the call copies, and
how much it leaves to its dump, which reads the originals meanwhile.

The call does not copy as fast as it can: it gives itself about
:data:`CALL_BUDGET` times as long as copying all the deferred bytes would
take, and copies a block only when what is left could not be copied by then
otherwise. Where the dump writes about as fast as memory is copied (into the
page cache), the call copies next to nothing, and the dump ends about when a
plain dump would: a copy costs as much memory bandwidth as a write, and a
core that the dump and the caller's other threads need. Where the dump is
slower (compressing, a slow disk), the call copies what the dump will not
have written by then.
"""

import time

import numpy as np

#: The call takes up to about this many times as long as copying its
#: deferred bytes would (at the speed :func:`measure_copy` found).
CALL_BUDGET = 1.05
#: What the call allows for copying what is left while the dump also
#: writes: a copy then shares memory bandwidth and cores with it, and
#: the dump still takes blocks from the front.
COPY_MARGIN = 1.0
#: Bytes copied to know the speed: more than CPU caches hold (a copy that
#: fits in them is several times faster).
MEASURED_COPY = 64 << 20

#: Bytes per second of a copy of MEASURED_COPY bytes, once measured; raised
#: by any faster run of copies (:meth:`CopyPace.copies`).
_copy_speed = None
#: Whether it was measured for the next call (which then need not).
_just_measured = False


def speed_unknown():
    """Whether :func:`measure_copy` is yet to be called in this process."""
    return _copy_speed is None


def measure_copy(copy, original):
    """Copy ``original`` into ``copy`` (:data:`MEASURED_COPY` bytes each),
    timing it: the copy speed the calls of this process pace themselves by."""
    global _copy_speed, _just_measured
    np.copyto(copy, original)  # the memory may never have been touched
    start = time.perf_counter()
    np.copyto(copy, original)
    _copy_speed = copy.nbytes / max(time.perf_counter() - start, 1e-6)
    _just_measured = True


class CopyPace:
    """The pace of one call copying ``size`` deferred bytes.

    The call first copies a run of :data:`MEASURED_COPY` bytes, timed, unless
    the speed was just measured (:func:`measure_copy`); the fastest run of
    the process is the speed its calls pace themselves by (if anything a
    low one: the dump writes meanwhile), so that a speed measured while the
    machine was busy does not hold the calls back for good.
    """

    __slots__ = ("_size", "_started", "_deadline", "_run_start", "_run_bytes")

    def __init__(self, size):
        self._size = size
        self._started = self._deadline = None
        self._run_start = None  # of the copies made one after another
        self._run_bytes = 0

    def start(self):
        """The call starts copying."""
        global _just_measured
        self._started = time.perf_counter()
        if _just_measured:
            _just_measured = False
            self._set_deadline()

    def _set_deadline(self):
        self._deadline = self._started + CALL_BUDGET * self._size / _copy_speed

    def may_wait(self, left):
        """Seconds the call may still wait for the dump before it copies
        ``left`` bytes (those neither taken by the dump nor copied yet),
        0 if it copies the next block now."""
        if self._deadline is None:
            return 0
        wait = max(0, self._deadline - left * COPY_MARGIN / _copy_speed - time.perf_counter())
        if wait:
            self._run_start = None
        return wait

    def copies(self, nbytes):
        """The call copies ``nbytes`` next, right after its last copy if it
        has not waited since."""
        global _copy_speed
        now = time.perf_counter()
        if self._run_start is None:
            self._run_start, self._run_bytes = now, 0
        elif self._run_bytes >= MEASURED_COPY:
            speed = self._run_bytes / max(now - self._run_start, 1e-6)
            _copy_speed = max(_copy_speed or 0, speed)
            if self._deadline is None:
                self._set_deadline()
            self._run_start, self._run_bytes = now, 0
        self._run_bytes += nbytes
