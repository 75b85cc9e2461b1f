"""The format's rebuild functions in a lazy load (``cpersist.open(...).load(lazy=True)``).

A lazy load hands the stream's functions :class:`~cpersist.LazyArray` objects
where a load hands arrays. :func:`in_lazy_load` gives what the unpickler
calls instead of each function: a tensor over a lazy storage is a
:class:`~cpersist.LazyTensor`, a JAX array's lazy data stays lazy (a sharded
one's shards are read), and the functions that call ndarray methods on their
arrays get them read.
"""

import numpy as np

from ..format import names
from ..pickling.rebuild import (BY_NAME, check_tensor, rebuild_jax, rebuild_jax_numpy,
                                rebuild_tensor)
from .array import LazyArray
from .tensor import LazyTensor


def lazy_tensor(data, dtype, offset, shape, stride, requires_grad, kind, state, device):
    """:func:`~cpersist.pickling.rebuild.rebuild_tensor` of a lazy load: a
    :class:`~cpersist.LazyTensor` over a lazy storage (its ``state`` left out)."""
    if not isinstance(data, LazyArray):
        return rebuild_tensor(data, dtype, offset, shape, stride, requires_grad, kind, state,
                              device)
    tdtype = check_tensor(True, data, dtype, offset, shape, stride, requires_grad, kind, state,
                          device)
    return LazyTensor(data, tdtype, dtype, offset, shape, stride, requires_grad, kind, device)


def lazy_jax(data, placement):
    """:func:`~cpersist.pickling.rebuild.rebuild_jax` of a lazy load: the lazy
    array itself; a sharded array's shards read and assembled into a numpy
    array."""
    if placement is None and isinstance(data, LazyArray):
        return data
    if type(data) is tuple and any(isinstance(shard, LazyArray) for shard in data):
        return rebuild_jax_numpy(tuple(np.asarray(shard) for shard in data), placement)
    return rebuild_jax(data, placement)


def _reading(func):
    def call(*args):
        return func(*(np.asarray(a) if isinstance(a, LazyArray) else a for a in args))

    return call


#: id of the format's function -> what a lazy load calls instead (by
#: identity: a global a file names is never hashed or compared). The
#: functions that call ndarray methods on their arrays (views, masked
#: arrays) get them read.
_IN_LAZY_LOAD = {id(rebuild_tensor): lazy_tensor, id(rebuild_jax): lazy_jax,
                 **{id(BY_NAME[names.split(n)]): _reading(BY_NAME[names.split(n)])
                    for n in (names.REBUILD_VIEW, names.REBUILD_MASKED)}}


def in_lazy_load(found):
    """What a lazy load calls for the global ``found`` an unpickler resolved:
    the lazy form of a rebuild function of the format, else ``found``."""
    return _IN_LAZY_LOAD.get(id(found), found)
