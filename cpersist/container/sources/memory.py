"""Bytes already in memory (``bytes``, ``bytearray``, ``memoryview``): reads
are slices, without a copy."""

from .abc import ByteSource


class MemorySource(ByteSource):
    """A bytes-like object as a byte source.

    Parameters
    ----------
    data : bytes-like
    name : str, default ``"<memory>"``
    """

    concurrent = True

    def __init__(self, data, name="<memory>"):
        self._view = memoryview(data).cast("B")
        self.name = name

    @property
    def size(self):
        return len(self._view)

    def read(self, offset, length):
        data = self._view[offset:offset + length]
        if len(data) != length:
            raise self.short_read(offset, length, len(data))
        return data

    def read_into(self, offset, buffer):
        view = memoryview(buffer).cast("B")
        view[:] = self.read(offset, len(view))
