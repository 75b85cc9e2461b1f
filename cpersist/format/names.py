"""The globals a cpersist pickle stream names, as the literal strings of the format.

Every file ever written calls these names, so they are spelled out here once
and never derived from ``__name__``: the writer, the restricted unpickler and
the opcode walker all read them from this module, and the functions behind
them may move between modules without changing a byte of any file. The list
is also the one in ``docs/format.rst`` (a test compares them).
"""

#: ``stored_array(section)``: the array kept in container section ``section``.
STORED_ARRAY = "cpersist.pickler.stored_array"
#: ``inline_array(data, dtype, shape, order)``: a small array kept in the stream.
INLINE_ARRAY = "cpersist.pickler.inline_array"
#: ``rebuild_view(base, cls, state)``: an ndarray subclass instance.
REBUILD_VIEW = "cpersist.pickler.rebuild_view"
#: ``rebuild_masked(cls, data, mask, fill_value, hard_mask)``: a masked array.
REBUILD_MASKED = "cpersist.pickler.rebuild_masked"

#: ``rebuild_tensor(storage, dtype, offset, shape, stride, requires_grad, kind, state,
#: device)``: a torch tensor viewing a stored storage (see :mod:`cpersist.pickling.tensors`).
REBUILD_TENSOR = "cpersist.pickler.rebuild_tensor"

#: ``rebuild_jax(data, placement)``: a JAX array from its data, or its shards' data and
#: where they sit (see :mod:`cpersist.pickling.jax_arrays`).
REBUILD_JAX = "cpersist.pickler.rebuild_jax"

#: All of them: the only globals of the ``cpersist`` package a stream names.
FORMAT_GLOBALS = frozenset((STORED_ARRAY, INLINE_ARRAY, REBUILD_VIEW, REBUILD_MASKED,
                            REBUILD_TENSOR, REBUILD_JAX))


def split(name):
    """``"cpersist.pickler.stored_array"`` as the ``(module, name)`` pair
    pickle opcodes and ``find_class`` use."""
    module, _, attr = name.rpartition(".")
    return module, attr
