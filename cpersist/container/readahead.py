"""Asking the source for a section's stored chunks a bounded window ahead of
the threads that read and decode them (:class:`ReadAhead`, where the system
does not read far enough ahead by itself: :func:`read_ahead`), and for
their headers before they are checked one by one (:func:`ask_for_heads`).

A thread reading a chunk that is not in the page cache waits for the disk,
and while it waits it decodes nothing. The kernel's own read-ahead follows
reads in order, as the chunks are read, up to its device's read-ahead size:
on a device that reads far ahead it keeps the disk ahead of the decoders
at no cost to them, filling the page cache in large pages. A hint fills it
4 KiB page by page, in the CPU time of the thread that asks, and the reads
of those pages then cost more than of large ones: it pays only where the
device reads ahead little (128 KiB on many), or for reads the kernel cannot
foresee, such as the chunk headers checked before a large section is read,
small reads far apart, each a wait.
"""

import threading

#: Stored bytes asked for past the chunk just read: enough to cover
#: the disk's latency at the rate decoders consume stored bytes (a few GB/s
#: for poorly compressible data), small against memory. They go to the
#: page cache, which gives them back under pressure; nothing is allocated
#: in the process.
WINDOW = 16 << 20

#: Most bytes asked for after one chunk's read: the first chunks, which wait
#: for the disk anyway, are not held up by the calls asking for the whole
#: window.
STEP = 4 << 20

#: A source whose system reads at least this far ahead of reads in order
#: (:attr:`~.sources.ByteSource.reads_ahead`) is asked for no window: as
#: far as :class:`ReadAhead` asks after each chunk, it covers the disk's
#: latency at the decoders' rate.
KERNEL_ENOUGH = STEP

#: Bytes asked for by one call. Linux reads at most the device's read-ahead
#: size or largest request (whichever is larger; often 128 KiB to a few
#: MiB) of a larger range and drops the rest; each call costs tens of
#: microseconds.
PIECE = 1 << 20


def read_ahead(source, chunks):
    """A :class:`ReadAhead` of ``chunks``, read from ``source`` in file
    order, or None where its system reads ahead far enough by itself
    (:data:`KERNEL_ENOUGH`)."""
    if _reads_ahead_itself(source):
        return None
    return ReadAhead(source, chunks)


def _reads_ahead_itself(source):
    return (source.reads_ahead or 0) >= KERNEL_ENOUGH


class ReadAhead:
    """Asks ``source`` (:meth:`~.sources.ByteSource.will_need`) for
    ``chunks`` in file order, up to :data:`WINDOW` bytes past the last
    chunk read (:meth:`read`).

    A chunk is asked for once another has been read, not before the first
    read: a section of one chunk (each of a checkpoint's small tensors) is
    asked for nothing, and the first chunk's read goes to the disk ahead of
    the requests for those after it.

    Parameters
    ----------
    source : ByteSource
    chunks : sequence of chunks
        Each with ``offset`` and ``length`` (its stored bytes), in the order
        they are read.
    """

    def __init__(self, source, chunks):
        self._source = source
        self._chunks = chunks
        #: How many of the chunks, from the first, are asked for (or read).
        self.asked = 1
        self._lock = threading.Lock()

    def read(self, i):
        """Note that chunk ``i`` has been read: ask for those after it that
        start less than :data:`WINDOW` bytes past its start, at most
        :data:`STEP` bytes of them. Called by any thread."""
        chunks = self._chunks
        with self._lock:
            first = max(self.asked, i + 1)
            end = _step_end(chunks, first, chunks[i].offset + WINDOW)
            self.asked = max(self.asked, end)
        if end > first:
            # Outside the lock: another thread's read need not wait for
            # these calls.
            ask_for(self._source, chunks[first:end])


def ask_for(source, chunks):
    """Ask ``source`` for the stored bytes of ``chunks`` (in file order):
    adjacent chunks, as a dump writes them, together, in calls of at most
    :data:`PIECE` bytes."""
    start = stop = chunks[0].offset
    for chunk in chunks:
        if chunk.offset != stop:
            _ask(source, start, stop)
            start = chunk.offset
        stop = chunk.offset + chunk.length
    _ask(source, start, stop)


def _ask(source, start, stop):
    for at in range(start, stop, PIECE):
        source.will_need(at, min(PIECE, stop - at))


def ask_for_heads(source, chunks, header_size):
    """Ask ``source`` for the first ``header_size`` bytes of each of
    ``chunks`` before they are read one after another (checked against the
    index before a large section is allocated): from a file not in the
    page cache, they then cost the disk's latency about once rather than
    once per chunk. Then, unless the system reads ahead far enough by
    itself (:func:`read_ahead`), for the first :data:`STEP` bytes of chunks
    whole, read next; asked for first, a header would wait for the whole of
    its chunk."""
    if not chunks:
        return
    for chunk in chunks:
        source.will_need(chunk.offset, min(chunk.length, header_size))
    if not _reads_ahead_itself(source):
        ask_for(source, chunks[:_step_end(chunks, 0, float("inf"))])


def _step_end(chunks, first, until):
    """Where the chunks asked for next, from ``first`` on, end: those that
    start before ``until``, until :data:`STEP` bytes are reached."""
    end, budget = first, STEP
    while end < len(chunks) and chunks[end].offset < until and budget > 0:
        budget -= chunks[end].length
        end += 1
    return end
