"""numpy arrays as byte chunks and back, with the description kept in files.

An array is written in its own memory order: the bytes of a C- or
F-contiguous array are cut into chunks without any copy; a non-contiguous
array is copied piece by piece (each piece at most one chunk) in C order, so
no full-size temporary is ever made. On load the final array is allocated in
the recorded order and the container decodes chunks straight into it.
"""

import ast
import functools
import pickle

import numpy as np
from numpy.lib import format as npy_format

from ..container import DEFAULT_CHUNK_SIZE
from ..format import named_dtypes


def is_plain_data(arr):
    """True if ``arr``'s bytes and its dtype's description hold all its data.

    The description is the ``.npy`` dtype descriptor, or the name of an
    ml_dtypes type (:mod:`cpersist.format.named_dtypes`). False for object arrays (their
    items are Python objects), and for dtypes neither can record:
    ``metadata``, overlapping or out-of-order fields, another library's
    types. All are left to plain pickling, which keeps them.
    """
    return _by_identity(_PLAIN_BY_ID, arr.dtype, _plain_dtype)


def _plain_dtype(dtype):
    return not dtype.hasobject and not _has_metadata(dtype) and _describable(dtype)


def _by_identity(cache, dtype, compute):
    """``compute(dtype)``, kept in ``cache`` by identity (a dtype with
    metadata, or an aligned struct, equals the plain one; holding the dtype
    keeps its id from being reused): a model holds hundreds of small arrays
    of a few dtypes, and walking a struct's fields per array costs more
    than pickling it."""
    hit = cache.get(id(dtype))
    if hit is not None and hit[0] is dtype:
        return hit[1]
    value = compute(dtype)
    if len(cache) >= 1024:
        cache.clear()
    cache[id(dtype)] = (dtype, value)
    return value


_PLAIN_BY_ID, _ALIGNED_BY_ID = {}, {}  # id(dtype) -> (dtype, value): _by_identity


@functools.lru_cache(maxsize=1024)
def _describable(dtype):
    try:
        return _parse_dtype_text(_dtype_text(dtype)) == dtype
    # ValueError: "dtype.descr is not defined for ... overlapping fields";
    # TypeError: a descriptor numpy cannot read back (another library's
    # type, e.g. '<f1').
    except (TypeError, ValueError):
        return False


def _has_metadata(dtype):
    if dtype.metadata or dtype.subdtype is not None and _has_metadata(dtype.subdtype[0]):
        return True
    return bool(dtype.names) and any(_has_metadata(dtype.fields[n][0]) for n in dtype.names)


def array_order(arr):
    """'F' for an F-contiguous array that is not also C-contiguous, else 'C'."""
    return "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"


@functools.lru_cache(maxsize=1024)
def _dtype_text(dtype):
    # Cached: a fitted model holds thousands of small arrays of a few dtypes.
    name = named_dtypes.name_of(dtype)
    if name is not None:
        return repr(name)
    return repr(npy_format.dtype_to_descr(dtype))


@functools.lru_cache(maxsize=1024)
def _parse_dtype_text(text):
    name = named_dtypes.BY_TEXT.get(text)
    if name is not None:
        return named_dtypes.resolve(name)
    return npy_format.descr_to_dtype(ast.literal_eval(text))


def inline_dtype(dtype):
    """How an inline array's dtype is pickled: the name of an ml_dtypes type
    (resolved from :mod:`cpersist.format.named_dtypes` alone), else the dtype."""
    return named_dtypes.name_of(dtype) or dtype


def describe(arr):
    """JSON-serialisable description of an array's dtype, shape and order.

    The dtype is kept as the ``repr`` of its ``.npy`` descriptor (the same
    form ``np.save`` writes), read back with ``ast.literal_eval``, which
    evaluates literals only; an ml_dtypes type as the ``repr`` of its name
    (``"'bfloat16'"``, see :mod:`cpersist.format.named_dtypes`). The descriptor keeps a
    structured dtype's layout but not whether it was made with
    ``align=True`` (``dtype.isalignedstruct``, which pickle keeps): the
    field paths of such structs are listed under ``"aligned"``.
    """
    return describe_layout(arr.dtype, arr.shape, array_order(arr))


def describe_layout(dtype, shape, order):
    """:func:`describe` of an array of ``dtype``, ``shape`` and ``order``
    ('C' or 'F'), which need not exist yet."""
    meta = {
        "kind": "array",
        "dtype": _dtype_text(dtype),
        "shape": list(shape),
        "order": order,
    }
    if dtype.names is not None:
        aligned = _by_identity(_ALIGNED_BY_ID, dtype, _aligned_paths)
        if aligned:
            meta["aligned"] = [list(path) for path in aligned]
    return meta


def _aligned_paths(dtype, path=()):
    """Field-name paths of the aligned structs in ``dtype``; () is ``dtype`` itself."""
    if dtype.subdtype is not None:  # a subarray field: its items' dtype
        return _aligned_paths(dtype.subdtype[0], path)
    if dtype.names is None:
        return ()
    found = (path,) if dtype.isalignedstruct else ()
    for name in dtype.names:
        found += _aligned_paths(dtype.fields[name][0], path + (name,))
    return found


def _realigned(dtype, aligned, path=()):
    """``dtype`` with the structs at the paths in ``aligned`` marked aligned.

    The offsets and item sizes stay those recorded; numpy raises ValueError
    if they are not aligned (a damaged or forged description).
    """
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return np.dtype((_realigned(base, aligned, path), shape))
    if dtype.names is None:
        return dtype
    fields = [dtype.fields[name] for name in dtype.names]
    spec = {
        "names": list(dtype.names),
        "formats": [_realigned(field[0], aligned, path + (name,))
                    for name, field in zip(dtype.names, fields)],
        "offsets": [field[1] for field in fields],
        "itemsize": dtype.itemsize,
    }
    if any(len(field) > 2 for field in fields):
        spec["titles"] = [field[2] if len(field) > 2 else None for field in fields]
    if path in aligned:
        spec["aligned"] = True
    return np.dtype(spec)


def _listed_aligned(dtype, aligned):
    """``dtype`` with the structs of the ``"aligned"`` list marked aligned."""
    if not (isinstance(aligned, list) and len(aligned) <= 1 << 12 and all(
            isinstance(path, list) and all(isinstance(n, str) for n in path)
            for path in aligned)):
        raise ValueError("bad list of aligned structs")
    listed = {tuple(path) for path in aligned}
    dtype = _realigned(dtype, listed)
    if set(_aligned_paths(dtype)) != listed:
        raise ValueError("the aligned structs listed are not structs of the dtype")
    return dtype


#: numpy's largest array extent in bytes.
_MAX_INTP = int(np.iinfo(np.intp).max)


def parse_description(meta, resolve=True):
    """Return ``(dtype, shape, order, nbytes)`` from :func:`describe` output.

    With ``resolve=False``, the dtype of an ml_dtypes type is returned as
    its name (a str), and ml_dtypes is not imported.

    Raises
    ------
    DtypeLibraryError
        If the dtype is an ml_dtypes type and ml_dtypes cannot provide it.
    ValueError, TypeError, SyntaxError, ...
        If the description is malformed; the caller reports the file as
        corrupt.
    """
    text = meta["dtype"]
    if not isinstance(text, str) or len(text) > 1 << 16:
        raise ValueError("bad dtype description")
    name = named_dtypes.BY_TEXT.get(text)
    if name is not None:  # an ml_dtypes type
        if "aligned" in meta:
            raise ValueError(f"a list of aligned structs for {name}, which has no fields")
        dtype = _parse_dtype_text(text) if resolve else name
        itemsize = named_dtypes.ITEMSIZES[name]
    else:
        dtype = _parse_dtype_text(text)
        if dtype.hasobject:
            raise ValueError("an object dtype cannot be stored as raw bytes")
        if "aligned" in meta:
            dtype = _listed_aligned(dtype, meta["aligned"])
        itemsize = dtype.itemsize
    shape = tuple(meta["shape"])
    if len(shape) > 64:
        raise ValueError(f"bad shape {shape!r}")
    order = meta["order"]
    if order not in ("C", "F"):
        raise ValueError(f"bad order {order!r}")
    # numpy's own limit (an array's extent, zero-length axes left out, must
    # fit in a signed pointer-sized integer): a shape beyond it is refused
    # here rather than by numpy's ValueError or OverflowError at first use.
    nbytes = itemsize
    extent = max(itemsize, 1)
    for n in shape:
        if type(n) is not int or n < 0:
            raise ValueError(f"bad shape {shape!r}")
        nbytes *= n
        extent *= n or 1
    if extent > _MAX_INTP:
        raise ValueError(f"shape {shape!r} of {dtype} items needs more bytes than numpy "
                         f"can address")
    return dtype, shape, order, nbytes


def dtype_label(dtype):
    """How :func:`cpersist.inspect` names a dtype :func:`parse_description`
    returned: ``dtype.str``, the descr of a structured dtype, or the name
    of an ml_dtypes type."""
    if isinstance(dtype, str):
        return dtype
    name = named_dtypes.name_of(dtype)
    if name is not None:
        return name
    return dtype.str if dtype.fields is None else str(dtype.descr)


def byte_view(arr):
    """1-D uint8 view of a C- or F-contiguous array, in its memory order."""
    flat = arr.T if array_order(arr) == "F" else arr
    return flat.reshape(-1).view(np.uint8)


def iter_chunks(arr, chunk_size=DEFAULT_CHUNK_SIZE):
    """Yield the array's bytes as memoryviews of at most ``chunk_size`` bytes.

    Chunk boundaries fall on element boundaries (so a shuffle filter sees
    whole elements). Contiguous arrays yield views of their own memory;
    non-contiguous ones yield C-order copies of at most one chunk each.
    """
    itemsize = arr.dtype.itemsize
    if arr.size == 0 or itemsize == 0:
        return
    step = max(1, chunk_size // itemsize) * itemsize
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        rows = rows_per_chunk(arr, chunk_size)
        if rows is not None:
            step = rows * (arr.nbytes // _row_count(arr))
        data = byte_view(arr)
        for start in range(0, len(data), step):
            yield memoryview(data[start:start + step])
        return
    yield from _iter_strided(arr, step)


def _row_count(arr):
    """Length of the array's slowest axis in its stored order."""
    return arr.shape[-1] if array_order(arr) == "F" else arr.shape[0]


def rows_per_chunk(arr, chunk_size=DEFAULT_CHUNK_SIZE):
    """How many whole rows of the slowest axis each chunk holds, or None.

    Chunks are cut on whole rows of the array's slowest axis (the first in C
    order, the last in F order) when a row fits in a chunk, so that a slice
    along that axis decodes only the chunks holding its rows; the last chunk
    may hold fewer. None when a row is larger than a chunk (chunks are then
    cut on element boundaries), when the whole array fits in one chunk, or
    when it has no rows.
    """
    itemsize = arr.dtype.itemsize
    if arr.ndim == 0 or arr.size == 0 or itemsize == 0:
        return None
    step = max(1, chunk_size // itemsize) * itemsize
    return rows_in_step(arr.nbytes, _row_count(arr), step)


def rows_in_step(nbytes, n_rows, step):
    """Whole rows per chunk of at most ``step`` bytes, or None (see
    :func:`rows_per_chunk`); numpy-free, for :func:`cpersist.convert`."""
    if not n_rows or not nbytes or nbytes <= step:
        return None
    row_bytes = nbytes // n_rows
    return step // row_bytes if row_bytes <= step else None


def iter_c_order(arr, step):
    """The bytes of ``arr`` in C order, in pieces of at most ``step`` bytes:
    views of a C-contiguous array, else copies of a slab of rows at a time."""
    return _iter_strided(arr, step)


def _iter_strided(arr, step):
    """C-order chunks of a non-contiguous array, copying one slab at a time."""
    if arr.ndim == 0 or arr.flags.c_contiguous:
        data = byte_view(np.ascontiguousarray(arr)) if arr.ndim == 0 else byte_view(arr)
        for start in range(0, len(data), step):
            yield memoryview(data[start:start + step])
        return
    # Not arr[0].nbytes: of a 1-d string array that is a scalar, as long as
    # its text ('' takes no bytes).
    row_bytes = arr.nbytes // len(arr) if len(arr) else 0
    if row_bytes == 0:
        return
    if row_bytes > step:
        for row in arr:
            yield from _iter_strided(row, step)
        return
    rows = step // row_bytes
    for start in range(0, len(arr), rows):
        slab = np.ascontiguousarray(arr[start:start + rows])
        yield memoryview(byte_view(slab))


def to_inline(arr, protocol):
    """``(data, order)`` holding a small array's bytes, for the pickle stream:
    at protocol 5 a :class:`pickle.PickleBuffer` of the array's own memory,
    which the pickler copies straight into its stream; below 5, a bytearray
    copy. Either way it loads as a bytearray (bytes for a read-only array)."""
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        arr = np.ascontiguousarray(arr)
    if arr.size == 0 or arr.dtype.itemsize == 0:
        return bytearray(), array_order(arr)
    if protocol >= 5:
        # C-contiguous (an F array's transpose): a large one goes to the
        # file's write() as it is, and BytesIO takes only those.
        try:  # numpy exports no buffer of some dtypes (datetime64...)
            return pickle.PickleBuffer(arr if arr.flags.c_contiguous else arr.T), array_order(arr)
        except (ValueError, TypeError):
            return pickle.PickleBuffer(byte_view(arr)), array_order(arr)
    return bytearray(byte_view(arr)), array_order(arr)


def inline_dtype_of(dtype):
    """The dtype an inline array's pickled ``dtype`` stands for: the name of
    an ml_dtypes type (see :func:`inline_dtype`) resolved, else ``np.dtype``
    of it."""
    if type(dtype) is str and dtype in named_dtypes.ITEMSIZES:
        return named_dtypes.resolve(dtype)
    return np.dtype(dtype)
