"""JAX arrays stored through their host buffers (rebuilt by
:func:`cpersist.pickling.rebuild.rebuild_jax`).

The pickler hands each ``jax.Array`` to :class:`JaxReducer`, which pickles it
as a call ``rebuild_jax(data, placement)``:

* an array on one device: ``data`` is ``numpy.asarray`` of it, which on the
  CPU views the device buffer itself (no copy), stored as any numpy array
  (a section, or inside the stream when small); ``placement`` is None;
* an array sharded over several devices: ``data`` is a tuple holding each
  distinct shard's data (one per shard index, replicas left out), each its
  own numpy array viewing its device buffer; ``placement`` a dict of plain
  data (:func:`check_placement`): the global ``"shape"``, each shard's
  ``"index"`` as ``(start, stop)`` pairs, and for a ``NamedSharding`` its
  mesh's ``"mesh"`` shape, ``"axes"`` names and ``"axis_types"``, and its
  partition ``"spec"``.

The dtype is the numpy array's, so bfloat16 and the other ml_dtypes types
keep their names (:mod:`.named_dtypes`). The stream names no jax global: a
restricted load rebuilds JAX arrays with nothing allowlisted.

jax is imported neither by a dump that meets no JAX array (the pickler checks
:data:`sys.modules` first) nor by a load that rebuilds none.
"""

import functools
import importlib.util
import sys

from ..format import names
from .brief import brief

#: jax uses a CPU buffer in place (``jax.device_put`` without a copy) only
#: when its first byte is at a multiple of this many bytes: a load of a file
#: holding JAX arrays reads its arrays into memory so aligned.
ALIGNMENT = 64
#: The axis types a mesh may record (``jax.sharding.AxisType`` members).
AXIS_TYPES = frozenset({"Auto", "Explicit", "Manual"})
#: At most this many dimensions, as numpy.
_MAX_NDIM = 64
#: At most this many shards per array.
_MAX_SHARDS = 1 << 16
#: What a pickle stream that rebuilds JAX arrays holds: the rebuilder's name.
_REBUILDER = names.REBUILD_JAX.rpartition(".")[2].encode()


class JaxReducer:
    """The JAX half of :class:`cpersist.pickling.array_pickler.ArrayPickler`.

    Parameters
    ----------
    rebuild : callable
        :func:`cpersist.pickling.rebuild.rebuild_jax`, which the stream calls.
    """

    def __init__(self, rebuild):
        import numpy as np

        self._rebuild = rebuild
        self._asarray = np.asarray
        self._numpy_dtype = np.dtype
        # The concrete array class (jax.Array is abstract: tracers and PRNG
        # key arrays are instances too, and have no numpy data).
        jaxlib = sys.modules.get("jaxlib._jax")
        impl = getattr(jaxlib, "ArrayImpl", None)
        if impl is None:
            from jax._src.array import ArrayImpl as impl
        self.array_type = impl

    def is_jax_array(self, obj, cls):
        """Whether ``obj`` (of type ``cls``) is a JAX array of a numpy dtype."""
        return cls is self.array_type and isinstance(obj.dtype, self._numpy_dtype)

    @staticmethod
    def on_cpu(array):
        """Whether ``array``'s data is in CPU buffers, which the numpy data
        of :meth:`reduce` views (elsewhere, it is a copy on the host)."""
        return all(device.platform == "cpu" for device in array.sharding.device_set)

    def reduce(self, array):
        """``(rebuild_jax, args)`` for a JAX array, else NotImplemented (an
        array other processes hold part of keeps jax's own pickling)."""
        rebuild_jax = self._rebuild
        if not array.is_fully_addressable:
            return NotImplemented
        sharding = array.sharding
        if len(sharding.device_set) == 1:
            return rebuild_jax, (self._asarray(array), None)
        asarray = self._asarray
        shards, indices = [], []
        for shard in array.addressable_shards:
            if shard.replica_id != 0:
                continue  # the same data as replica 0 of its index
            index = tuple((s.start or 0, array.shape[d] if s.stop is None else s.stop)
                          for d, s in enumerate(_full_index(shard.index, array.ndim)))
            indices.append(index)
            shards.append(asarray(shard.data))
        placement = {"shape": tuple(array.shape), "index": tuple(indices)}
        placement.update(_named(sharding))
        return rebuild_jax, (tuple(shards), placement)


def _full_index(index, ndim):
    """A shard's index as one slice per dimension."""
    return tuple(index) + (slice(None),) * (ndim - len(index))


def _named(sharding):
    """A ``NamedSharding``'s mesh and partition spec as plain data, else {}."""
    mesh = getattr(sharding, "mesh", None)
    spec = getattr(sharding, "spec", None)
    if type(sharding).__name__ != "NamedSharding" or mesh is None or spec is None:
        return {}
    entries = []
    for entry in spec:
        if entry is None or isinstance(entry, str):
            entries.append(entry)
        elif isinstance(entry, tuple) and all(isinstance(name, str) for name in entry):
            entries.append(tuple(entry))
        else:  # P.UNCONSTRAINED and the like: the shards alone say where the data goes
            return {}
    types = tuple(getattr(t, "name", str(t)) for t in getattr(mesh, "axis_types", ()))
    if not set(types) <= AXIS_TYPES:  # a kind this version does not know: jax's default
        types = ()
    return {"mesh": tuple(int(n) for n in mesh.devices.shape),
            "axes": tuple(str(name) for name in mesh.axis_names),
            "axis_types": types, "spec": tuple(entries)}


def bad_jax(problem):
    import pickle

    raise pickle.UnpicklingError(f"bad JAX array: {problem}")


def _is_int(n):
    return type(n) is int and n >= 0


def check_placement(data, placement):
    """Validate a sharded array's ``(data, placement)`` (a forged stream
    gives anything): the shard indices cut the global shape into a full grid,
    each shard's array has its index's shape and all one dtype, and the mesh
    and spec agree. Returns ``(shape, indices)``."""
    if type(placement) is not dict or type(data) is not tuple:
        bad_jax("its shards are not a tuple with a placement dict")
    known = {"shape", "index", "mesh", "axes", "axis_types", "spec"}
    if not set(placement) <= known or not {"shape", "index"} <= set(placement):
        bad_jax(f"placement keys {sorted(brief(k) for k in list(placement)[:8])}")
    shape, indices = placement["shape"], placement["index"]
    if (type(shape) is not tuple or len(shape) > _MAX_NDIM
            or not all(_is_int(n) for n in shape)):
        bad_jax(f"shape {brief(shape)}")
    if (type(indices) is not tuple or not 0 < len(indices) <= _MAX_SHARDS
            or len(indices) != len(data)):
        bad_jax("the shard indices do not match its shards")
    edges = [set() for _ in shape]
    for index, shard in zip(indices, data):
        if type(index) is not tuple or len(index) != len(shape):
            bad_jax(f"shard index {brief(index)}")
        for d, bounds in enumerate(index):
            if (type(bounds) is not tuple or len(bounds) != 2
                    or not all(_is_int(n) for n in bounds)
                    or not bounds[0] <= bounds[1] <= shape[d]):
                bad_jax(f"shard index {brief(index)} for shape {shape}")
            edges[d].add(bounds)
        if getattr(shard, "shape", None) != tuple(b - a for a, b in index):
            bad_jax(f"a shard of shape {getattr(shard, 'shape', None)} at {index}")
        if getattr(shard, "dtype", None) != data[0].dtype:
            bad_jax("its shards differ in dtype")
    # The shards must tile the array exactly (no byte left uninitialised):
    # per dimension their intervals follow one another from 0 to the extent,
    # and every combination of them is one shard.
    count = 1
    for d, intervals in enumerate(edges):
        at = 0
        for start, stop in sorted(intervals):
            if start != at:
                bad_jax(f"its shards do not tile dimension {d}")
            at = stop
        if at != shape[d]:
            bad_jax(f"its shards do not tile dimension {d}")
        count *= len(intervals)
    if len(set(indices)) != len(indices) or count != len(indices):
        bad_jax("its shards do not tile the array")
    if "mesh" in placement:
        _check_mesh(placement, len(shape))
    return shape, indices


def _check_mesh(placement, ndim):
    mesh, axes = placement.get("mesh"), placement.get("axes")
    types, spec = placement.get("axis_types"), placement.get("spec")
    if (type(mesh) is not tuple or not 0 < len(mesh) <= _MAX_NDIM
            or not all(type(n) is int and n > 0 for n in mesh)):
        bad_jax(f"mesh shape {brief(mesh)}")
    if (type(axes) is not tuple or len(axes) != len(mesh)
            or not all(type(a) is str for a in axes) or len(set(axes)) != len(axes)):
        bad_jax(f"mesh axis names {brief(axes)}")
    if type(types) is not tuple or len(types) not in (0, len(mesh)) or not set(types) <= AXIS_TYPES:
        bad_jax(f"mesh axis types {brief(types)}")
    if type(spec) is not tuple or len(spec) > ndim:
        bad_jax(f"partition spec {brief(spec)}")
    used = []
    for entry in spec:
        names = (entry,) if type(entry) is str else entry if type(entry) is tuple else ()
        if not (entry is None or names) or not all(type(n) is str and n in axes for n in names):
            bad_jax(f"partition spec {brief(spec)} for mesh axes {axes}")
        used.extend(names)
    if len(set(used)) != len(used):
        bad_jax(f"partition spec {brief(spec)} uses a mesh axis twice")


def assemble(data, shape, indices):
    """The global numpy array of a sharded array's shards (one copy)."""
    import numpy as np

    out = np.empty(shape, dtype=data[0].dtype)
    for index, shard in zip(indices, data):
        out[tuple(slice(a, b) for a, b in index)] = shard
    return out


def to_jax(data, placement):
    """A JAX array of the checked ``(data, placement)``: with the recorded
    sharding where jax has the devices its mesh needs, else on the default
    device. ``jax.device_put`` uses a buffer in place where it can (on the
    CPU, aligned to :data:`ALIGNMENT`), else copies it."""
    jax = import_jax()
    if placement is None:
        return jax.device_put(data)
    shape, indices = check_placement(data, placement)
    try:
        sharding = _sharding(jax, placement)
        places = None if sharding is None else sharding.addressable_devices_indices_map(shape)
    except (ValueError, TypeError):  # a spec that does not fit the shape (jax says which)
        places = None
    if places is None:
        return jax.device_put(assemble(data, shape, indices))
    by_index = dict(zip(indices, data))
    arrays = []
    for device, index in places.items():
        key = tuple((s.start or 0, shape[d] if s.stop is None else s.stop)
                    for d, s in enumerate(_full_index(index, len(shape))))
        shard = by_index.get(key)
        if shard is None:  # the recorded sharding does not cut the array as stored
            return jax.device_put(assemble(data, shape, indices))
        arrays.append(jax.device_put(shard, device))
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays)


def _sharding(jax, placement):
    """The recorded ``NamedSharding`` over this process's first devices, or
    None when it records none or there are too few devices."""
    if "mesh" not in placement:
        return None
    mesh_shape = placement["mesh"]
    size = 1
    for n in mesh_shape:
        size *= n
    devices = jax.devices()
    if size > len(devices):
        return None
    import numpy as np

    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    kwargs = {}
    kinds = getattr(jax.sharding, "AxisType", None)  # jax releases before it have none
    if placement["axis_types"] and kinds is not None:
        kwargs["axis_types"] = tuple(getattr(kinds, name) for name in placement["axis_types"])
    grid = np.empty(len(devices), dtype=object)
    grid[:] = devices
    mesh = Mesh(grid[:size].reshape(mesh_shape), placement["axes"], **kwargs)
    return NamedSharding(mesh, PartitionSpec(*placement["spec"]))


def import_jax():
    """jax, or an error saying what to install."""
    try:
        import jax
    except ImportError:
        from ..exceptions import DtypeLibraryError

        raise DtypeLibraryError(
            "the file holds JAX arrays, which need jax (pip install jax), or load them "
            "as numpy arrays: cpersist.load(..., jax_as_numpy=True)") from None
    return jax


@functools.lru_cache(maxsize=None)
def jax_installed():
    """Whether jax can be imported (asked once, without importing it)."""
    return importlib.util.find_spec("jax") is not None


def stores_jax(pickled):
    """Whether the pickle stream ``pickled`` (bytes-like, or a
    :class:`~cpersist.container.section_file.SectionFile`) may rebuild JAX
    arrays: it names their rebuilder (a string holding that name gives a
    false positive, which only aligns the arrays it loads)."""
    return pickled.find(_REBUILDER) >= 0
