"""What a restricted load builds for cpersist's own globals (the format's
rebuild functions) and torch's values (see :mod:`.builders`).
"""

import pickle

import numpy as np

from .array_builders import array_arg, array_class, fill_value, numpy_ma
from .builders import bind
from .checks import Refused, as_order, as_shape, brief
from ..format.named_dtypes import ITEMSIZES, resolve


def build_stored(machine, func, args, kwargs, new):
    """``stored_array(section)``: the array of a section of the container."""
    if len(args) != 1 or kwargs:
        raise Refused("stored_array takes a section number")
    return machine.stored(func(*args))


def build_inline(machine, func, args, kwargs, new):
    """``inline_array(data, dtype, shape, order)``: over its bytes, a
    bytearray of its own or an out-of-band buffer."""
    bound = bind(func, ("data", "dtype", "shape", "order"), args, kwargs)
    data = bound.get("data")
    kind = type(data)
    if kind is not bytes and kind is not bytearray and kind is not memoryview:
        raise Refused("an inline array's data is not bytes")
    dtype = bound.get("dtype")
    shape, count = as_shape(bound.get("shape"))
    if type(dtype) is str and dtype in ITEMSIZES:
        # An ml_dtypes type is named, and only a name of the table is looked
        # up; a dry run stands it in as bytes of its size, importing nothing.
        dtype = np.dtype(f"V{ITEMSIZES[dtype]}") if machine.dry else resolve(dtype)
    else:
        dtype = machine.dtype(dtype)
    # The stream's bytearray, or the file's buffer, when nothing else holds
    # it (Machine.take_buffer), else a copy; a read-only buffer is copied,
    # to be writable, as bytes are.
    sole = args and data is args[0] and not kwargs and not (
        kind is memoryview and data.readonly) and machine.take_buffer(data)
    if kind is memoryview:
        return _buffer_array(machine, data, dtype, shape, count, as_order(bound.get("order")),
                             sole)
    machine.alloc(count * dtype.itemsize)
    if not sole:
        data = bytearray(data)
    return func(data, dtype, shape, as_order(bound.get("order")))


def _buffer_array(machine, buffer, dtype, shape, count, order, sole):
    """An inline array over an out-of-band ``buffer``: a view of it when
    ``sole`` (the file's memory, which costs the load nothing), else over a
    copy, charged."""
    if dtype.hasobject:
        raise Refused("an inline array of Python objects")
    if buffer.nbytes != count * dtype.itemsize:
        raise Refused(f"an inline array of {count * dtype.itemsize} bytes over a buffer of "
                      f"{buffer.nbytes}")
    if not sole:
        machine.alloc(buffer.nbytes)
        buffer = bytearray(buffer)
    return np.ndarray(shape, dtype, buffer, 0, None, order)


def _state_dict(value, what):
    if value is not None and (type(value) is not dict
                              or not all(type(k) is str for k in value)):
        raise Refused(f"{what} is not a dict of names")
    return value


def build_view(machine, func, args, kwargs, new):
    """``rebuild_view(base, cls, state)``: an ndarray subclass viewing ``base``."""
    bound = bind(func, ("base", "cls", "state"), args, kwargs)
    array_arg(machine, func, bound.get("base"))
    array_class(bound.get("cls"), "rebuild_view")
    _state_dict(bound.get("state"), "a view's attributes")
    return func(bound["base"], bound["cls"], bound.get("state"))


def build_masked(machine, func, args, kwargs, new):
    """``rebuild_masked(cls, data, mask, fill_value, hard_mask)``."""
    bound = bind(func, ("cls", "data", "mask", "fill_value", "hard_mask"), args, kwargs)
    ma = numpy_ma()
    cls = bound.get("cls")
    if ma is None or not (isinstance(cls, type) and issubclass(cls, ma.MaskedArray)) or (
            issubclass(cls, ma.core.MaskedConstant)):
        raise Refused(f"rebuild_masked of {brief(cls)}, not a masked array class")
    data = array_arg(machine, func, bound.get("data"))
    mask = bound.get("mask")
    if mask is not ma.nomask:
        array_arg(machine, func, mask)
        if mask.shape != data.shape:
            raise Refused("a mask of another shape than its data")
    fill_value(bound.get("fill_value"))
    if type(bound.get("hard_mask")) is not bool:
        raise Refused("hard_mask is not a bool")
    return func(cls, data, mask, bound.get("fill_value"), bound["hard_mask"])


def _tensor_attributes(state):
    """A tensor's attributes (its ``__dict__``) as a dump holds them: names
    that shadow nothing of ``torch.Tensor`` (a method, ``__class__``)."""
    if type(state) is not dict:
        return
    from .torch_dtypes import import_torch

    tensor_type = import_torch().Tensor
    for key in state:
        if type(key) is str and (key.startswith("__") or hasattr(tensor_type, key)):
            raise Refused(f"a tensor attribute named {brief(key)}, which would hide "
                          f"torch.Tensor's own")


def build_tensor(machine, func, args, kwargs, new):
    """``rebuild_tensor(storage, ...)``: a tensor over a stored storage only,
    its attributes hiding none of the tensor's own."""
    if not args or not machine.is_stored(args[0]):
        raise Refused("a tensor whose storage is not an array of a section")
    if len(args) != 9 or kwargs:
        raise Refused("rebuild_tensor takes 9 arguments")
    if machine.dry:  # checked as rebuild_tensor would, without importing torch
        from .torch_dtypes import check_view_args, itemsize_by_name, view_extent

        dtype, offset, shape, stride, requires_grad, kind, state, device = args[1:9]
        itemsize = itemsize_by_name(dtype) if type(dtype) is str else None
        if itemsize is None:
            raise Refused(f"a tensor of dtype {brief(dtype)}")
        if type(requires_grad) is not bool:
            raise Refused(f"a tensor's requires_grad is {brief(requires_grad)}")
        try:
            check_view_args(offset, shape, stride, kind, state, device)
        except pickle.UnpicklingError as exc:
            raise Refused(str(exc)) from None
        if view_extent(offset, shape, stride) * itemsize > args[0].nbytes:
            raise Refused("a tensor view reaching past its storage")
        if state:
            _tensor_attributes(state)
        return None
    _tensor_attributes(args[7])
    return func(*args)


def build_jax(machine, func, args, kwargs, new):
    """``rebuild_jax(data, placement)``: arrays the load built, placed by
    plain data (which ``rebuild_jax`` checks before jax sees it)."""
    if kwargs or len(args) != 2:
        raise Refused("rebuild_jax takes 2 arguments")
    if machine.dry:  # checked as rebuild_jax would, without importing jax
        from .jax_arrays import check_placement

        data, placement = args
        if placement is None:
            if not isinstance(data, np.ndarray):
                raise Refused("a JAX array whose data is not a stored array")
        elif type(data) is not tuple or not all(isinstance(shard, np.ndarray)
                                                  for shard in data):
            raise Refused("a JAX array whose shards are not stored arrays")
        else:
            try:
                check_placement(data, placement)
            except pickle.UnpicklingError as exc:
                raise Refused(str(exc)) from None
        return None
    return func(*args)


# -- torch ---------------------------------------------------------------------


def build_torch_size(machine, func, args, kwargs, new):
    if kwargs or len(args) > 1 or (args and (type(args[0]) not in (tuple, list) or not all(
            type(n) is int and 0 <= n < 1 << 63 for n in args[0]))):
        raise Refused("torch.Size of other than a tuple of sizes")
    return func(*args)


def build_torch_device(machine, func, args, kwargs, new):
    # torch keeps an index in 8 bits, silently dropping higher ones.
    if kwargs or not 1 <= len(args) <= 2 or type(args[0]) is not str or len(args[0]) > 64 or (
            len(args) == 2 and args[1] is not None and not (
                type(args[1]) is int and 0 <= args[1] < 128)):
        raise Refused("torch.device of other than a name and an index")
    try:
        return func(*args)
    except (RuntimeError, ValueError) as exc:
        raise Refused(f"bad torch.device: {exc}") from None

