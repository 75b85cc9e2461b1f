"""Objects to pickle streams and back: the pickler that routes numpy arrays and
torch tensors to container sections (and dask arrays, computed one band of
blocks at a time), the unpicklers (trusted and restricted),
the functions a stream calls to rebuild arrays (under the literal names of
:mod:`cpersist.format.names`), the writers of small and ``compress="max"``
dumps, the buffer blocks holding small arrays' bytes beside the stream
(format 2.5), where each array sits in the object dumped (recorded in the index),
and background dumps (a snapshot of the object written on a thread of its
own).
"""
