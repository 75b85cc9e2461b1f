"""The raw run of a section: its chunks written as they are, each
checksummed (on a worker where the section is large), for
:class:`.writer.ContainerWriter`."""

import os
from collections import deque

from .._runtime.parallel import COPY_ALONE_BELOW
from .._runtime.threads import get_pool
from .layout import VERBATIM, verbatim_checksums
from .stream_in_file import MAX_PARTS

#: Bytes of raw chunks written by one system call where the writer has the
#: file's descriptor: fewer, larger writes into new page-cache pages cost
#: the kernel less (a 1 GB file's system time was a half to a quarter of
#: that of 4 MiB writes, under load).
RAW_WRITE_SIZE = 64 << 20


class RawRuns:
    """The part of :class:`.writer.ContainerWriter` that writes a raw run (it
    uses the writer's ``_n_threads``, ``_fd``, ``_fd_base``, ``_pos``,
    ``_file``, ``_write``, ``_write_directly`` and ``_add_table``)."""

    def _add_raw_run(self, offset, chunks, typesize, meta, size, release):
        table = []
        pieces = []
        # Below COPY_ALONE_BELOW, handing checksums to a worker and waiting
        # for it costs more than computing them here.
        if self._n_threads <= 1 or size < COPY_ALONE_BELOW:
            for chunk in chunks:
                if len(chunk):
                    # Checksummed just before it is written, the chunk is
                    # still in the CPU cache when write() copies it.
                    digest, chunk_pieces = verbatim_checksums(chunk)
                    self._write(chunk)
                    if release is not None:
                        release()
                    table.append([len(chunk), len(chunk), digest, VERBATIM])
                    pieces.append(chunk_pieces)
            return self._add_table(offset, table, None, typesize, meta, pieces=pieces)
        # A worker checksums each chunk while this thread writes it: it crosses
        # from memory once, and no write waits for a checksum.
        pool = get_pool(self._n_threads)
        pending = deque()
        most_pending = 2 * self._n_threads

        def done(chunk, future):
            # A checksum no worker has started by the time the writes are
            # done is computed here: on a busy machine, waiting for a
            # worker to be scheduled costs more than the checksum.
            if future.cancel():
                digest, chunk_pieces = verbatim_checksums(chunk)
            else:
                digest, chunk_pieces = future.result()
            if release is not None:
                release()  # written, and checksummed
            table.append([len(chunk), len(chunk), digest, VERBATIM])
            pieces.append(chunk_pieces)

        # Chunks nothing changes are gathered into writes of RAW_WRITE_SIZE
        # (one writev) where the file's descriptor is there to write to.
        gather = RAW_WRITE_SIZE if release is None and self._fd is not None else 0
        gathered, gathered_bytes = [], 0
        if gather:
            self._file.flush()
            if os.lseek(self._fd, 0, os.SEEK_CUR) != self._fd_base + self._pos:
                gather = 0  # a file object that read ahead: written through it
        for chunk in chunks:
            if len(chunk):
                future = pool.submit(verbatim_checksums, chunk)
                if gather:
                    gathered.append(chunk)
                    gathered_bytes += len(chunk)
                    if gathered_bytes >= gather or len(gathered) >= MAX_PARTS:
                        self._write_directly(self._fd, gathered, gathered_bytes)
                        gathered, gathered_bytes = [], 0
                else:
                    self._write(chunk)
                pending.append((chunk, future))
                while pending and pending[0][1].done():
                    done(*pending.popleft())
                if len(pending) > most_pending + len(gathered):  # workers lag: keep
                    done(*pending.popleft())  # few chunks alive (dask blocks: a band each)
        if gather:
            if gathered:
                self._write_directly(self._fd, gathered, gathered_bytes)
            # The file object's own position, which writes to its descriptor
            # did not move.
            self._file.seek(self._fd_base + self._pos)
        for chunk, future in pending:
            done(chunk, future)
        return self._add_table(offset, table, None, typesize, meta, pieces=pieces)

