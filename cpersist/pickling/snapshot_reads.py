"""What a background dump's writing thread reads of its snapshot
(:mod:`.snapshot`): each array's chunks, from the original while the call
has not claimed them, else from the copy once it is made there; with
:attr:`~.snapshot.Snapshot.fill_taken`, what it takes of an original is put
in the copy first and written from there."""

import bisect
import collections

import numpy as np

from .arrays import iter_chunks


class IncompleteSnapshot(RuntimeError):
    """The copies of a deferred snapshot stopped before the end (the call
    taking it was interrupted), or a dump needed bytes of an original after
    the call had returned: its dump must not be written."""


class DumpReads:
    """The side of :class:`~.snapshot.Snapshot` that the dump's thread calls
    (its state, under ``_state``, is the snapshot's)."""

    def chunks(self, arr, chunk_size):
        """:func:`.snapshot.chunks_to_write` for the dump of this snapshot.

        The whole of a copy (the array the restored object holds, or a
        storage) is cut into chunks lazily: each comes from the original
        while the call has not claimed it, else from the copy once it is
        made. Any other array in a copy's memory (a view some object's
        pickling makes of it) is read from the copy once the call has
        copied all of it.
        """
        item = self._holding(arr)
        if item is None:
            return iter_chunks(arr, chunk_size), None
        whole = ((arr.flags.c_contiguous or arr.flags.f_contiguous)
                 and arr.__array_interface__["data"][0] == item.start and arr.nbytes == item.size)
        if not whole:
            self._all_copied(item)
            return iter_chunks(arr, chunk_size), None
        sources = collections.deque()  # per chunk handed out: whether from the original
        return self._whole(item, arr, chunk_size, sources), lambda: self._release(sources)

    def _holding(self, arr):
        """The Deferred whose copy holds ``arr``'s memory, or None."""
        if not self._starts or arr.nbytes == 0:
            return None
        address = arr.__array_interface__["data"][0]
        place = bisect.bisect_right(self._starts, address) - 1
        if place < 0:
            return None
        item = self._by_address[place]
        return item if address < item.start + item.size else None

    def _whole(self, item, arr, chunk_size, sources):
        state = self._state
        low = 0
        for chunk in iter_chunks(arr, chunk_size):
            high = low + len(chunk)
            with state:
                original = self._source(item, low, high)
                if original is not None:
                    self._reading += 1
                    copy = item.copy
            if original is not None:
                self.from_originals += high - low
                if self.fill_taken:
                    self._fill(item, copy[low:high], original[low:high], high)
                    original = None  # the chunk is written from the copy
                else:
                    chunk = memoryview(original[low:high])
            sources.append(original is not None)
            yield chunk
            low = high

    def _fill(self, item, copy, original, high):
        """Copy ``original``, which the dump took of ``item`` up to ``high``,
        into the copy: it is then in the snapshot's memory, as if the call
        had copied it."""
        try:
            np.copyto(copy, original)
        finally:
            with self._state:
                self._reading -= 1
                item.filled = high
                self._state.notify_all()
                if self._broken:  # the caller may have changed the original already
                    raise _incomplete()

    def _source(self, item, low, high):
        """The original's bytes if the dump reads ``[low, high)`` of
        ``item`` from them, or None if from the copy (once it is made
        there); under ``_state``."""
        if self._broken:
            raise _incomplete()
        if not self._finished and item.original is not None:
            if low <= item.taken and high <= item.low:
                if high > item.taken:  # not the call's to copy any more
                    self._left -= high - item.taken
                    item.taken = high
                return item.original
            if low < item.taken and high > item.filled:
                return item.original  # again: it is not in the copy
        if high <= item.filled:
            return None
        if low < item.taken:  # taken by the dump, not in the copy, too late
            raise _read_twice()
        self._wait_for_copies(item, low)
        return None

    def _wait_for_copies(self, item, low):
        """Wait until the call has copied ``item`` down to ``low`` (at or
        below what it copies down to); under ``_state``."""
        self._dump_waits = True
        self._state.notify_all()  # the call copies at once
        try:
            while item.copied > low:
                if self._finished:
                    raise _incomplete()
                self._state.wait()
        finally:
            self._dump_waits = False

    def _release(self, sources):
        if sources.popleft():
            with self._state:
                self._reading -= 1
                self._state.notify_all()
                if self._broken:  # the caller may have changed the original already
                    raise _incomplete()

    def _all_copied(self, item):
        """Wait until the whole of ``item`` is in its copy: the call's part
        copied, and the part the dump read from the original put in it."""
        state = self._state
        with state:
            if self._broken:
                raise _incomplete()
            filling = item.filled < item.taken
            if filling:
                if self._finished:
                    raise _read_twice()
                self._reading += 1
                low, high = item.filled, item.taken
                copy, original = item.copy, item.original
        if filling:
            try:
                np.copyto(copy[low:high], original[low:high])
            finally:
                with state:
                    self._reading -= 1
                    item.filled = high
                    state.notify_all()
        with state:
            self._wait_for_copies(item, item.taken)


def _incomplete():
    return IncompleteSnapshot("the snapshot of the object was interrupted before all its "
                              "arrays were copied")


def _read_twice():
    # Only an object whose pickling stores one array's memory twice (a view
    # of it besides the array) gets here.
    return IncompleteSnapshot("a dump read part of an array twice, the second time after "
                              "the call that took its snapshot had returned")
