"""Arrays read a slice at a time from a cpersist file: :class:`LazyArray` (and
:class:`cpersist.LazyTensor` in :mod:`.tensor`), what a slice reads, the file
they keep open, and the memory dask's blocks reuse.
"""

from .array import LazyArray

__all__ = ["LazyArray"]
