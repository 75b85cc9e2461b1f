"""The module every cpersist pickle stream names: ``cpersist.pickler.stored_array`` and the
other globals of :mod:`cpersist.format.names`.

Files name these globals by this literal module path, so the path stays while
the code behind it lives in :mod:`cpersist.pickling`: the C pickler checks
that each name resolves back to the function it pickles, and plain
:func:`pickle.load` of a cpersist stream imports them from here (and gets
:func:`stored_array`'s message saying to use :func:`cpersist.load`). The
unpicklers of :mod:`cpersist.pickling` map the names without importing this
module. It holds no code: the pickler is
:class:`cpersist.pickling.array_pickler.ArrayPickler`.
"""

from .pickling.rebuild import (inline_array, rebuild_jax, rebuild_masked,  # noqa: F401
                               rebuild_tensor, rebuild_view, stored_array)
