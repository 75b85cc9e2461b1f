"""The pickler that routes numpy arrays to the container.

:class:`ArrayPickler` subclasses the C ``pickle.Pickler`` and catches arrays in
``reducer_override``, which the C pickler calls only for objects it cannot
save natively: dicts, lists, strings and numbers never reach Python code, so
object-heavy data pickles at the C pickler's speed. An array's bytes go to a
container section and the pickle stream only records a call
``cpersist.pickler.stored_array(n)``; :mod:`cpersist.pickling.unpickler` reads it back.
"""

import pickle
import sys

import numpy as np

from .arrays import inline_dtype, is_plain_data, to_inline
from ..format.named_dtypes import favours_speed
from .rebuild import inline_array, rebuild_jax, rebuild_masked, rebuild_view, stored_array

# The format names these functions "cpersist.pickler.<name>" (see cpersist.format.names), and the
# C pickler imports that module to check each name: loaded here, before any dump.
from .. import pickler as _format_module  # noqa: E402,F401  isort:skip

_plain_reduce = (np.ndarray.__reduce__, np.ndarray.__reduce_ex__)
#: Imported by whoever makes a RowBatches (cpersist.RowBatches), not here:
#: most dumps hold none, and the first dump of a process would pay for it.
_ROW_BATCHES = __package__ + ".row_batches"
#: At most this many types are remembered as pickled by pickle itself.
PASSED_TYPES = 256


def _numpy_ma():
    """``numpy.ma`` if it is imported, else None. No object is a masked
    array before it is; and ``np.ma`` would import it, a cost every load
    would pay (loading imports this module)."""
    return sys.modules.get("numpy.ma")


class ArrayPickler(pickle.Pickler):
    """C pickler that stores each plain-data numpy array through ``store``.

    Parameters
    ----------
    file : binary file object
        Receives the pickle stream (without the arrays' bytes).
    protocol : int
    store : callable
        ``store(arr, favour_speed=False) -> int``: writes a plain
        ``np.ndarray`` (C-, F- or non-contiguous) and returns the number of
        its section; ``favour_speed`` asks for the codec's faster form
        (:meth:`cpersist.codecs.Codec.favouring_speed`).
    inline_below : int
        Arrays of fewer bytes are kept inside the pickle stream instead: a
        section costs a fixed amount of work and index space, and in a
        compressed file many small arrays compress better together.
    fortran_as_c : bool
        Store each Fortran-ordered array (of 2 or more dimensions, not also
        C-contiguous, not of a structured dtype) as a C-ordered copy, rebuilt on load by
        ``numpy.asfortranarray``: the ``max`` codec tries this layout, in
        which the values along the last axis (the frames of a volume
        series) are neighbours and often compress better.

    Attributes
    ----------
    store : callable
        As the parameter; the dump's writer replaces it when the dump turns
        sectioned (:mod:`cpersist.pickling.dump`).
    saw_fortran : bool
        Whether a Fortran-ordered array of 2 or more dimensions (not also
        C-contiguous) was pickled.
    inlined : int
        How many arrays were kept inside the pickle stream.
    placed : dict
        ``{id(array): section}`` for each plain ``np.ndarray`` stored as a
        section as it is, ``{id(array): None}`` for those kept inside the
        pickle stream (what :mod:`cpersist.pickling.object_paths` needs).

    An inline array's buffer reaches ``buffer_callback`` (the C pickler's;
    protocol 5), which may keep it out of the stream
    (:mod:`.buffer_blocks`).
    """

    def __init__(self, file, protocol, store, inline_below=0, fortran_as_c=False,
                 buffer_callback=None):
        super().__init__(file, protocol, buffer_callback=buffer_callback)
        self._protocol = protocol
        self.store = store
        self._inline_below = inline_below
        self._fortran_as_c = fortran_as_c
        self.saw_fortran = False
        self.inlined = 0
        self.placed = {}
        # A tensor exists only once torch is imported: until then nothing of
        # torch is looked at (see cpersist.pickling.tensors). A pickler kept
        # between dumps may see torch imported after it was made.
        self.tensors = None
        self.jax = None  # the same for JAX arrays (see cpersist.pickling.jax_arrays)
        self.dask_array = None  # dask.array.Array, once dask.array is imported
        # cpersist.pickling.row_batches, once something has imported it (a
        # RowBatches cannot exist before).
        self.row_batches = None
        # Types none of the checks below took (a model's dtypes and
        # estimators, met hundreds of times a dump), by class alone: each
        # check is of the class, and a class is neither a tensor nor a JAX or
        # dask array type later, once torch, jax or dask is imported.
        self._passed = set()
        # Dtypes whose C-contiguous arrays kept in the stream pickle as a
        # buffer of their memory and the dtype itself, by id (held, so that
        # no other dtype takes its id): a model's hundreds of small arrays
        # share a few, and each skips the checks below.
        self._inline_dtypes = {}

    def forget(self):
        """Forget the arrays and tensor storages met so far, as
        ``clear_memo`` forgets the objects: for a pickler kept for several
        dumps, whose sections are numbered anew in each."""
        self.placed.clear()
        if self.tensors is not None:
            self.tensors.forget()

    def _reduce_plain(self, arr):
        if arr.ndim > 1 and arr.flags.f_contiguous and not arr.flags.c_contiguous:
            self.saw_fortran = True
            if self._fortran_as_c and arr.dtype.names is None:
                # Not a structured dtype: copies lose the bytes between its
                # fields. The pickler memoizes ``arr``: an array referenced
                # twice is copied and stored once.
                return np.asfortranarray, (np.ascontiguousarray(arr),)
        if arr.nbytes < self._inline_below:
            self.inlined += 1
            data, order = to_inline(arr, self._protocol)
            return inline_array, (data, inline_dtype(arr.dtype), arr.shape, order)
        if favours_speed(arr.dtype):  # ml_dtypes' bfloat16, as torch's
            return stored_array, (self.store(arr, favour_speed=True),)
        return stored_array, (self.store(arr),)

    def _reduce_dask(self, arr):
        """A dask array of plain data: stored as the numpy array it computes
        to would be, computed block by block as its section is written
        (:mod:`cpersist.pickling.dask_arrays`); one small enough to stay in
        the pickle stream is computed whole."""
        if not is_plain_data(arr):
            return NotImplemented
        from .dask_arrays import DaskSource

        return self._reduce_streamed(arr, DaskSource(arr))

    def _reduce_streamed(self, obj, source):
        """An array whose bytes are made as its section is written (a
        :class:`.dask_arrays.StreamedSource`): one small enough to stay in
        the pickle stream is made whole, in C order as its section is."""
        if source.nbytes < self._inline_below:
            reduced = self._reduce_plain(source.materialize())
        else:
            reduced = stored_array, (self.store(source,
                                                favour_speed=favours_speed(source.dtype)),)
        self.placed[id(obj)] = reduced[1][0] if reduced[0] is stored_array else None
        return reduced

    def _note_inline_dtype(self, arr):
        """Remember ``arr``'s dtype for :meth:`reducer_override`'s quick way
        if its arrays pickle as what :func:`.arrays.to_inline` makes of a
        C-contiguous one at protocol 5, and the dtype as itself."""
        dtype = arr.dtype
        if self._protocol < 5 or inline_dtype(dtype) is not dtype:
            return
        try:
            pickle.PickleBuffer(arr)
        except (ValueError, TypeError):  # numpy exports no buffer of it
            return
        if len(self._inline_dtypes) >= 1024:
            self._inline_dtypes.clear()
        self._inline_dtypes[id(dtype)] = dtype

    def reducer_override(self, obj):
        cls = type(obj)
        if cls is np.ndarray:
            dtype = obj.dtype
            if (self._inline_dtypes.get(id(dtype)) is dtype
                    and 0 < obj.nbytes < self._inline_below and obj.flags.c_contiguous):
                # What _reduce_plain gives for it, the same bytes.
                self.inlined += 1
                self.placed[id(obj)] = None
                return inline_array, (pickle.PickleBuffer(obj), dtype, obj.shape, "C")
            if not is_plain_data(obj):
                return NotImplemented  # items are Python objects: pickle them
            reduced = self._reduce_plain(obj)
            if reduced[0] is stored_array:
                self.placed[id(obj)] = reduced[1][0]
            elif reduced[0] is inline_array:
                self.placed[id(obj)] = None
                if obj.nbytes and self._inline_dtypes.get(id(dtype)) is not dtype:
                    self._note_inline_dtype(obj)
            return reduced
        if cls is np.memmap:
            if not is_plain_data(obj):
                return NotImplemented
            return self._reduce_plain(obj.view(np.ndarray))
        if not isinstance(obj, np.ndarray):
            if cls in self._passed:
                return NotImplemented
            batches = self.row_batches
            if batches is None:
                batches = self.row_batches = sys.modules.get(_ROW_BATCHES)
            if batches is not None and cls is batches.RowBatches:
                return self._reduce_streamed(obj, batches.BatchSource(obj))
            tensors = self.tensors
            if tensors is None and "torch" in sys.modules:
                from .tensors import TensorReducer

                tensors = self.tensors = TensorReducer(self.store)
            if tensors is not None:
                if isinstance(obj, tensors.tensor_type):
                    return tensors.reduce(obj)
                if cls is tensors.ref_type:
                    return tensors.reduce_ref(obj)
            jax = self.jax
            if jax is None and "jax" in sys.modules:
                from .jax_arrays import JaxReducer

                jax = self.jax = JaxReducer(rebuild_jax)
            if jax is not None and jax.is_jax_array(obj, cls):
                return jax.reduce(obj)
            dask_array = self.dask_array
            if dask_array is None and "dask.array" in sys.modules:
                from .dask_arrays import dask_array_type

                dask_array = self.dask_array = dask_array_type()
            if dask_array is not None and isinstance(obj, dask_array):
                return self._reduce_dask(obj)
            if len(self._passed) < PASSED_TYPES and (jax is None or cls is not jax.array_type):
                self._passed.add(cls)  # (a JAX array is one by its dtype too)
            return NotImplemented
        if not is_plain_data(obj):
            return NotImplemented
        ma = _numpy_ma()
        if ma is not None and isinstance(obj, ma.MaskedArray):
            if (cls.__reduce__, cls.__reduce_ex__) != (ma.MaskedArray.__reduce__,
                                                       ma.MaskedArray.__reduce_ex__):
                # A subclass with its own pickling, e.g. the np.ma.masked
                # singleton (MaskedConstant), which must load as itself.
                return NotImplemented
            mask = obj._mask
            return rebuild_masked, (
                cls,
                obj.view(np.ndarray),
                mask if mask is ma.nomask else mask.view(np.ndarray),
                obj._fill_value,
                bool(obj._hardmask),
            )
        if (cls.__reduce__, cls.__reduce_ex__) == _plain_reduce:
            # A subclass that pickles like ndarray (np.matrix, np.recarray,
            # most user subclasses): keep the data as a section and the
            # instance attributes in the pickle.
            return rebuild_view, (obj.view(np.ndarray), cls, dict(getattr(obj, "__dict__", {})))
        return NotImplemented  # a subclass with its own pickling: respect it
