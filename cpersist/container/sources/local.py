"""A local regular file, read with ``pread`` on its descriptor and mapped
from that same descriptor."""

import functools
import mmap
import os
from contextlib import contextmanager

from ..._runtime.locks import locked
from ..files import is_writable
from ..layout import PAGE_ALIGNED_FROM
from .abc import ByteSource

_ACCESS = {"r": mmap.ACCESS_READ, "r+": mmap.ACCESS_WRITE, "c": mmap.ACCESS_COPY}

#: None where the system takes no read-ahead advice (macOS, Windows).
_WILL_NEED = getattr(os, "POSIX_FADV_WILLNEED", None)
#: Reads of fewer bytes say nothing of where to place their memory
#: (:meth:`LocalFileSource.page_phase`): the sections that start on a page,
#: whose copy into any of glibc's large blocks is aliased. A smaller one
#: starts anywhere in a page, as the memory it is read into does.
PHASED_FROM = PAGE_ALIGNED_FROM


class LocalFileSource(ByteSource):
    """The bytes of a local regular file from its position to its end.

    Reads and maps go through the descriptor of the file object given, never
    through its path: a path may meanwhile name another file (a concurrent
    ``dump`` renames its new file onto it).

    Parameters
    ----------
    file : binary file object
        A plain file object on a regular file (see
        :func:`cpersist.container.files.local_fd`); its position marks offset 0.
    name : str
    fd : int
        ``file``'s descriptor.
    owned : bool, default False
        Close ``file`` with the source.
    file_size : int, optional
        The file's size, when the caller has just taken it from ``fd``
        (:func:`cpersist.container.files.local_file`); else taken here.
    """

    concurrent = True
    can_map = True

    def __init__(self, file, name, fd, owned=False, *, file_size=None):
        self.file = file
        self.name = name
        self.fd = fd
        self._owned = owned
        self.base = file.tell()
        if file_size is None:
            file_size = os.fstat(fd).st_size
        self._size = file_size - self.base
        path = getattr(file, "name", None)
        #: The file's path, when it has one (numpy's memmap reports it).
        self.path = path if isinstance(path, str) else None
        self._locked = False

    @contextmanager
    def locked(self, shared=False, timeout=None):
        """See :meth:`ByteSource.locked`. Taken through a descriptor of its
        own, so that a lock the caller holds through ``file`` is left
        alone; within a block that holds it, a nested request holds it
        already."""
        if self._locked:
            yield True
            return
        with locked(self.fd, self.path, shared=shared, timeout=timeout) as held:
            self._locked = held
            try:
                yield held
            finally:
                self._locked = False

    @property
    def writable(self):
        return is_writable(self.file)

    def refresh(self):
        self._size = os.fstat(self.fd).st_size - self.base

    @property
    def size(self):
        return self._size

    def read(self, offset, length):
        # One pread into new bytes; a short one (the file ends first) is
        # read again the general way, which reports it.
        data = os.pread(self.fd, length, self.base + offset)
        return data if len(data) == length else super().read(offset, length)

    def read_into(self, offset, buffer):
        # A regular file's pread comes back short only at its end: one call
        # fills the buffer, with no layers between the load of a small raw
        # array and its copy. A short one (the file ends first, or was cut
        # meanwhile) is read again the general way, which reports it.
        position = self.base + offset
        view = memoryview(buffer)
        if os.preadv(self.fd, [view], position) == view.nbytes:
            return

        def read_some(part):
            nonlocal position
            n = os.preadv(self.fd, [part], position)
            position += n
            return n

        self.fill(offset, buffer, read_some)

    def page_phase(self, offset, length):
        return page_phase(self.base + offset, length)

    def will_need(self, offset, length):
        """See :meth:`ByteSource.will_need`: the kernel is asked to read the
        range into its page cache, and returns once the reads are under
        way. Only a hint: where it is refused, the reads wait as before."""
        if _WILL_NEED is None or length <= 0:
            return
        try:
            os.posix_fadvise(self.fd, self.base + offset, length, _WILL_NEED)
        except OSError:
            pass

    @functools.cached_property
    def reads_ahead(self):
        """See :attr:`ByteSource.reads_ahead`: the read-ahead size of the
        file's device, as Linux states it."""
        return device_read_ahead(os.fstat(self.fd).st_dev)

    def map(self, offset, length, mode):
        # mmap offsets must be multiples of the allocation granularity: map
        # from the one below and say where the range starts in the map.
        position = self.base + offset
        start = position % mmap.ALLOCATIONGRANULARITY
        return mmap.mmap(self.fd, start + length, access=_ACCESS[mode],
                         offset=position - start), start

    def close(self):
        if self._owned:
            self.file.close()
        elif self.end is not None:
            # pread leaves the position alone: put it after the dump.
            self.file.seek(self.base + self.end)


def page_phase(position, length):
    """See :meth:`ByteSource.page_phase`: for the ``length`` bytes at
    ``position`` in a local file."""
    if length < PHASED_FROM:
        return None
    return position % mmap.PAGESIZE


@functools.lru_cache(maxsize=None)
def device_read_ahead(device):
    """Bytes Linux reads ahead of reads in order on ``device`` (a file's
    ``st_dev``): the ``read_ahead_kb`` of its backing device (a disk, a
    device-mapper volume, an NFS mount) or, for a partition, of its disk.
    None where the system says nothing (another system, or a filesystem
    whose device number is none of these, such as btrfs or overlayfs)."""
    name = f"{os.major(device)}:{os.minor(device)}"
    for path in (f"/sys/class/bdi/{name}/read_ahead_kb",
                 f"/sys/dev/block/{name}/../queue/read_ahead_kb"):
        try:
            with open(path, "rb") as file:
                return int(file.read()) << 10
        except (OSError, ValueError):
            pass
    return None
