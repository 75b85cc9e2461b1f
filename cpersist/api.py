"""``dump``, ``load``, ``verify`` and ``inspect``: the glue between the
pickler, the array chunking and the container."""

import io
import os
import pickle
import warnings

import numpy as np

from . import __version__
from .pickling import names
from ._args import check_chunk_size, check_mmap_mode, check_protocol, check_target, check_timeout
from ._runtime.files import display_name, is_path, write_atomically
from ._runtime.remote import is_remote, write_remote
from ._runtime.threads import check_n_threads
from .codecs import parse_compress
from .container.sources.open import check_storage_options, open_source
from .pickling.arrays import allocate, describe, iter_chunks, parse_description, rows_per_chunk
from .pickling.small import NOT_COMPACT, load_compact_file, write_small
from .pickling.unpicklable import PICKLING_ERRORS, unpicklable_error
from .stream.object_paths import object_paths
from .tools.foreign import foreign_file_error
from .container import (CHECKED_CLAIM, EDITED, ENCODED, FLAGS_AT, TRAILER, ContainerReader,
                        ContainerWriter, EncodedStream, checksum)
from .container.layout import INDEX_EDITED, INDEX_UNEDITED
from .container.reader import claimed_buffer
from .exceptions import CorruptFileError, CpersistError
from .pickling.limits import as_limits
from .pickling.pickler import ArrayPickler
from .pickling.unpickler import ArrayUnpickler, normalize_trusted

#: Chunk size of the pickle stream: smaller than array chunks so that its
#: compression, which overlaps pickling, spreads evenly over the threads.
PICKLE_CHUNK_SIZE = 1 << 20
#: In compressed files, arrays smaller than this (and than one chunk) are
#: kept in the pickle stream.
INLINE_BELOW = 64 << 10
#: Files of at least this many array sections record each array's path in
#: the index (when the object is plain containers around its arrays), so
#: that listing them reads no more than the index: reading and walking the
#: pickle stream would cost about as much again as opening the file, a
#: large share of a small slice of a file opened for it.
RECORD_PATHS_FROM = 1


def dump(obj, target, compress=0, *, protocol=None, chunk_size=None, n_threads=None,
         fsync=False, storage_options=None, timeout=None):
    """Persist a Python object and the numpy arrays it holds to one file.

    Parameters
    ----------
    obj : object
        Anything picklable. Every numpy array inside it (except object-dtype
        arrays, whose items are pickled) is stored as a separate buffer, in
        its own C or Fortran order, raw or compressed.
    target : str, os.PathLike or binary file object
        A path is written atomically: to a temporary file in the same
        directory, renamed onto the path once complete. A file object
        (seekable or not: a pipe or socket works) is written sequentially
        from its current position. A URL (``s3://bucket/key.cp``,
        ``memory://...``; see :doc:`/cloud`), a ``(file system, path)``
        pair or an :class:`fsspec.core.OpenFile` is written through fsspec,
        complete or not at all.
    compress : bool, int, str or tuple, default 0
        ``0``/``False``: raw (arrays can then be memory-mapped on load).
        ``True``: the default codec (``"zstd-auto"``: Zstandard, with a
        byte shuffle + byte delta filter on the chunks of numeric arrays
        where it compresses better) at level 3. An int 1–9: the default
        codec at that level. A codec name (``"zlib"``, ``"lz4"``,
        ``"zstd"``, ``"zstd-auto"``, ``"blosc"``, ``"blosc:lz4"``, ``"blosc:zstd"``,
        ``"blosc:zlib"``, ``"blosc:blosclz"``, and joblib's ``"gzip"``,
        ``"bz2"``, ``"lzma"``, ``"xz"``): that codec at level 3.
        ``"max"``: the smallest file cpersist can make, at any cost in time
        (each chunk tried under several filters with Zstandard 22, LZMA2
        and bzip2; an object whose pickle stream, arrays inside, is at most
        16 MiB is written in several layouts in memory, the smallest kept:
        see :ref:`choosing-codec`). ``"NAME:LEVEL"`` (``"zstd:9"``) or a
        ``(name, level)`` tuple: that codec at that level 1-9; level 0
        means raw. The command line's ``--compress`` takes the same
        spellings.
    protocol : int, optional
        Pickle protocol, 2 to 5; default :data:`pickle.HIGHEST_PROTOCOL`.
    chunk_size : int, optional
        Bytes of array data per compressed chunk (default 4 MiB). Chunks are
        compressed independently on ``n_threads`` threads.
    n_threads : int, optional
        Threads for compression and checksums; default: all available CPUs.
    fsync : bool, default False
        Flush the data to disk before renaming it onto ``target`` (only for
        paths). Protects the new file against power loss, at a cost.
    storage_options : dict, optional
        For a URL: passed to fsspec (credentials, endpoint, ...).
    timeout : float, optional
        For an ``s3://`` URL: seconds each request of the upload may take
        (each part of 16 MiB, s3fs's retries included; default 120). A
        server that stops reading or resets the connection ends the dump
        with :class:`~cpersist.RemoteStorageError` naming the URL; the
        upload is aborted and the object left as it was.

    Returns
    -------
    list of str
        The name of the file written (the file object's ``name`` when it has
        one; an empty list for anonymous file objects).

    Raises
    ------
    ValueError
        For a bad ``compress``, ``protocol``, ``chunk_size``, ``n_threads``
        or ``timeout``.
    RemoteStorageError
        If a request to remote storage fails or takes longer than ``timeout``.
    UnpicklableError
        If ``obj`` holds something that cannot be pickled (a lambda, an open
        file...): the message names where it sits (``obj['callbacks'][2]``)
        and why; no file is left. A subclass of :class:`pickle.PicklingError`
        and :class:`TypeError`.
    IsADirectoryError, NotADirectoryError, FileNotFoundError
        For a path naming a directory (or ending with ``/``), or whose
        directory does not exist: checked before anything is written.
    UnwritableTargetError
        For a file object open in text mode or for reading only: checked
        before anything is written.

    Examples
    --------
    >>> import numpy as np, cpersist
    >>> model = {"weights": np.arange(6.0).reshape(2, 3), "name": "demo"}
    >>> cpersist.dump(model, "model.cp", compress=3)
    ['model.cp']
    """
    codec = parse_compress(compress)
    protocol = check_protocol(protocol)
    chunk_size = check_chunk_size(chunk_size)
    n_threads = check_n_threads(n_threads)
    check_target(target)
    check_storage_options(storage_options, target)
    timeout = check_timeout(timeout)
    name = display_name(target)

    def write(file):
        _write(obj, file, name, codec, protocol, chunk_size, n_threads)

    try:
        if is_remote(target):
            return [write_remote(target, storage_options, write, timeout)]
        if is_path(target):
            write_atomically(target, write, fsync)
            return [name]
        write(target)
    except PICKLING_ERRORS as exc:
        error = unpicklable_error(obj, protocol, exc)
        if error is None:
            raise
        raise error from exc
    name = getattr(target, "name", None)
    return [name] if isinstance(name, str) else []


def _write(obj, file, name, codec, protocol, chunk_size, n_threads):
    if codec is not None and codec.codec_id == "max":
        from .pickling.smallest import write_smallest

        write_smallest(obj, file, name, codec, protocol, chunk_size, n_threads)
        return
    if write_small(obj, file, name, codec, protocol, _inline_below(codec, chunk_size), _finish):
        return
    write_sections(obj, file, name, codec, protocol, chunk_size, n_threads)


def write_sections(obj, file, name, codec, protocol, chunk_size, n_threads,
                   pickle_chunk_size=PICKLE_CHUNK_SIZE, fortran_as_c=False,
                   inline_below=INLINE_BELOW):
    """Write ``obj`` with each array a section (in a compressed file, those
    under ``inline_below`` bytes in the pickle stream); return the
    :class:`ArrayPickler` (see it for ``fortran_as_c``)."""
    writer = ContainerWriter(file, n_threads, name)
    store = _array_store(writer, codec, chunk_size)

    # The pickle stream is encoded chunk by chunk on the pool while pickling
    # goes on. In a compressed file, small arrays go into it too: they
    # compress better together, and there is no memmap to lose.
    stream = EncodedStream(codec, min(chunk_size, pickle_chunk_size), n_threads)
    inline_below = _inline_below(codec, chunk_size, inline_below)
    pickler = ArrayPickler(stream, protocol, store, inline_below, fortran_as_c)
    pickler.dump(obj)
    n_sections = writer.n_sections
    if n_sections >= RECORD_PATHS_FROM and not fortran_as_c:
        paths = object_paths(obj, pickler.placed, n_sections)
        if paths is not None:
            for section, path in paths.items():
                writer.section_meta(section)["path"] = path
    _finish(writer, stream.encoded_chunks(), codec, protocol)
    return pickler


def _inline_below(codec, chunk_size, inline_below=INLINE_BELOW):
    """Bytes under which an array is kept in the pickle stream."""
    return 0 if codec is None else min(inline_below, chunk_size)


def _array_store(writer, codec, chunk_size):
    """The ``store`` function of :class:`ArrayPickler`: each array a section."""
    def store(arr):
        chunks = iter_chunks(arr, chunk_size)
        if arr.nbytes <= chunk_size:
            chunks = tuple(chunks)  # one chunk (or none): the writer's fast path
        meta = describe(arr)
        rows = rows_per_chunk(arr, chunk_size)
        if rows is not None:
            meta["rows_per_chunk"] = rows
        return writer.add_section(
            chunks,
            codec=codec,
            typesize=arr.dtype.itemsize,
            meta=meta,
            size=arr.nbytes,
        )

    return store


def _finish(writer, encoded, codec, protocol):
    """Write the pickle stream's encoded chunks as the root section, and the index."""
    root = writer.add_encoded_section(encoded, codec=codec, meta={"kind": "pickle"})
    writer.finish(root, info={"writer": f"cpersist {__version__}", "protocol": protocol})


def load(source, mmap_mode=None, *, trusted=True, verify=True, n_threads=None,
         storage_options=None, limits=None):
    """Load an object written by :func:`dump`.

    Parameters
    ----------
    source : str, os.PathLike or binary file object
        A path must hold one dump, and nothing after it. A file object is
        read from its current position to the end of the dump there, and
        left positioned right after it: several dumps written one after
        another to a file, pipe or socket load back one by one. From a
        non-seekable one (pipe, socket), exactly the dump's bytes are read,
        into a temporary file. A URL, a ``(file system, path)`` pair or an
        :class:`fsspec.core.OpenFile` is read by range requests, many chunks
        per request (see :doc:`/cloud`); like a path, the object must hold
        one dump, and nothing after it.
    mmap_mode : {None, 'r', 'r+', 'c'}
        Return raw (uncompressed) arrays as :class:`numpy.memmap` views of the
        file instead of reading them: ``'r'`` read-only, ``'r+'`` writes reach
        the file, ``'c'`` copy-on-write. Compressed arrays cannot be mapped:
        they are loaded into memory with one ``UserWarning``. A file object
        can be mapped when :func:`open` made it (a binary file, seekable),
        also behind :func:`tempfile.NamedTemporaryFile`'s wrapper; from any
        other (``io.BytesIO``, ``gzip.GzipFile``, whose
        ``fileno()`` is the compressed file's) a ``UserWarning`` is issued
        and the arrays are read, as from remote storage. Zero-size
        arrays come back as plain ndarrays (there is nothing to map).
        Mapping with ``'r+'`` marks the file as edited: its raw arrays may
        change behind their checksums, so later loads and :func:`verify`
        do not report them as damaged (everything else is still checked);
        :func:`reseal` computes their checksums again.
    trusted : bool or iterable, default True
        ``True`` unpickles like :func:`pickle.load`, which can run any code
        the file names: only load files you trust. ``False`` resolves only
        a safe allowlist of globals (builtin containers and scalars, numpy
        arrays, dtypes and scalars) and raises
        :class:`~cpersist.UntrustedObjectError` for anything else before it
        is called. An iterable adds to that allowlist: ``(module, name)``
        pairs and module names trusted with their submodules (``"sklearn"``).
    verify : bool, default True
        Check the checksum of every chunk read. Memory-mapped arrays are not
        read, so not checked: use :func:`verify` for them.
    n_threads : int, optional
        Threads for decompression and checksums; default: all available CPUs.
    storage_options : dict, optional
        For a URL: passed to fsspec (credentials, endpoint, ...).
    limits : cpersist.Limits or dict, optional
        What a restricted load (``trusted`` not ``True``) may cost: opcodes,
        objects, digits of numbers, memory one call allocates (see
        :class:`~cpersist.Limits`); beyond them
        :class:`~cpersist.LimitExceededError` is raised. Raise them for a
        file you trust more. Trusted loads are not limited.

    Returns
    -------
    object

    Raises
    ------
    CorruptFileError
        If the source is not a cpersist file, or is truncated or damaged, or
        a path holds bytes after its dump (the message says how many, and
        whether another dump follows).
    UnsupportedVersionError
        If a newer, incompatible version of the format wrote the file.
    UntrustedObjectError
        In a restricted load, for a global outside the allowlist.
    LimitExceededError
        In a restricted load, if the pickle stream would exceed ``limits``.
    ValueError
        For a bad ``mmap_mode`` or ``n_threads``, or ``mmap_mode='r+'`` on a
        file object open read-only.
    FileNotFoundError, PermissionError, RemoteStorageError
        For a URL naming no object, a denied request, or one that failed
        (timeout, broken connection, truncated transfer).

    Examples
    --------
    >>> model = cpersist.load("model.cp")
    >>> model["weights"]
    array([[0., 1., 2.],
           [3., 4., 5.]])
    """
    check_mmap_mode(mmap_mode)
    restricted, allowed, prefixes = normalize_trusted(trusted)
    n_threads = check_n_threads(n_threads)
    limits = as_limits(limits)
    if (not restricted and mmap_mode != "r+" and storage_options is None and is_path(source)
            and not is_remote(source)):
        # An object without arrays (a compact dump): read in one call and
        # unpickled, without the container reader; anything else, damage
        # included, goes the general way, which says what is wrong.
        obj = load_compact_file(source)
        if obj is not NOT_COMPACT:
            return obj
    with open_source(source, mmap_mode, storage_options=storage_options) as opened:
        try:
            return _load(opened, mmap_mode=mmap_mode, restricted=restricted, allowed=allowed,
                         prefixes=prefixes, verify=verify, n_threads=n_threads,
                         whole=is_path(source), limits=limits)
        except CorruptFileError as exc:
            foreign = foreign_file_error(opened, exc)
            if foreign is None:
                raise
            raise foreign from None


def _load(source, *, mmap_mode, restricted, allowed, prefixes, verify, n_threads, whole,
          views=False, limits=None):
    """``views``: return raw arrays as views of ``source.read``'s bytes (a
    :class:`~cpersist.container.sources.MemorySource`, whose reads are views)."""
    source.will_read_all()
    reader = ContainerReader(source, whole=whole)
    name = reader.name
    root = reader.sections[reader.root]
    if root.meta.get("kind") != "pickle":
        raise reader.error("damaged index: the root section is not a pickle stream")
    pickled = _pickle_stream(reader, root, verify, n_threads)
    can_map = mmap_mode is not None and source.can_map
    loaded = {}
    mapped = []

    def load_array(index):
        if type(index) is not int or not 0 <= index < len(reader.sections) or index == reader.root:
            raise reader.error(f"the pickle stream refers to a bad array section {index!r}")
        if index in loaded:
            return loaded[index]
        section = reader.sections[index]
        dtype, shape, order, nbytes = array_layout(reader, section)
        if nbytes == 0:
            # Nothing to read or map (zero-size array, or zero-size items:
            # a 0-byte memmap slice cannot be viewed as 'V0' items).
            arr, _ = _allocate(reader, index, dtype, shape, order)
        elif can_map and section.is_raw:
            if not mapped:
                # torch has no read-only tensors, and a write to a read-only
                # map kills the process: a file storing tensors is mapped
                # privately for 'r' (as torch.load(mmap=True) does), its
                # numpy arrays still handed out read-only.
                private = mmap_mode == "r" and _stores_tensors(pickled)
                mapped.append(_memmap(source, reader.size, "c" if private else mmap_mode))
                mapped.append(private)
                if mmap_mode == "r+":
                    _mark_edited(mapped[0], reader)
            start = section.offset
            arr = mapped[0][start:start + nbytes].view(dtype).reshape(shape, order=order)
            if mapped[1]:
                arr.mode = "r"
                arr.flags.writeable = False
        elif views and section.is_raw:
            arr = _view(reader, section, verify).view(dtype).reshape(shape, order=order)
        else:
            reader.check_claimed_sizes(section)  # before allocating a forged size
            arr, view = _allocate(reader, index, dtype, shape, order)
            try:
                reader.read_into(section, view, verify=verify, n_threads=n_threads)
            except CorruptFileError as exc:
                raise _naming_path(exc, pickled, index) from None
        loaded[index] = arr
        return arr

    unpickler = ArrayUnpickler(pickled, load_array, restricted, allowed,
                               prefixes, source=name, limits=limits)
    try:
        obj = unpickler.load()
    except CpersistError:
        raise
    except (pickle.UnpicklingError, EOFError) as exc:
        raise reader.error(f"damaged pickle stream ({exc})") from None
    if can_map and (reader.tiny or any(section.codec is not None
                                       for section in reader.sections)):
        # Whether or not any array had a section of its own (small ones are
        # kept in a compressed pickle stream), nothing of such a file is
        # mapped. Warned once, here rather than in load_array: the
        # unpickler's call depth varies, this frame's is fixed (load -> _load).
        warnings.warn(
            f"cpersist: {name} holds compressed arrays, which cannot be "
            f"memory-mapped; they are loaded into memory",
            UserWarning, stacklevel=3,
        )
    return obj


def _naming_path(exc, pickled, index):
    """``exc``, naming where the array of section ``index`` sits in the
    object (a tensor's path for a storage); the stream is walked only now,
    when something is wrong."""
    from .stream.paths import scan_arrays

    path = scan_arrays(pickled.getvalue())["paths"].get(index)
    if path is None:
        return exc
    return type(exc)(f"{exc} (the array at {path})")


def _stores_tensors(pickled):
    """Whether the pickle stream may rebuild torch tensors (it names the
    format's ``rebuild_tensor``; a string holding that name gives a false
    positive, which only maps the file privately)."""
    return names.REBUILD_TENSOR.rpartition(".")[2].encode() in pickled.getvalue()


def _view(reader, section, verify):
    """A raw section as a uint8 array viewing the source's own bytes
    (read-only when they are), its chunks' checksums checked in place."""
    if verify:
        reader.verify_section(section)
    data = reader.source.read(section.offset, section.raw_size)
    return np.frombuffer(data, dtype=np.uint8)


def _memmap(source, size, mode):
    """The ``size`` bytes of the dump in ``source`` as a :class:`numpy.memmap`
    of bytes, mapped by the source from the descriptor it reads (as
    ``numpy.memmap`` would from a file object)."""
    mm, start = source.map(0, size, mode)
    arr = np.ndarray.__new__(np.memmap, (size,), dtype=np.uint8, buffer=mm,
                             offset=start)
    arr._mmap = mm
    arr.offset = source.base
    arr.mode = mode
    path = getattr(source, "path", None)
    arr.filename = os.path.abspath(path) if path is not None else None
    return arr


def _mark_edited(mapped, reader):
    """Mark the dump as edited through a writable map of it.

    Writes through the map change raw arrays behind their checksums; with
    the mark, readers do not report those sections as damaged, and
    :func:`cpersist.reseal` computes their checksums again. From format 2.1
    the mark is the index's ``"edited"`` field, rewritten in place with the
    index's checksum in the trailer, so that only a whole index that checks
    out can turn checking off; the header's flag is set too, for readers of
    format 2.0.
    """
    if (reader.major, reader.minor) >= (2, 1) and not reader.edited:
        at, n = reader.index_at, reader.index_length
        if mapped[at:at + len(INDEX_UNEDITED)].tobytes() != INDEX_UNEDITED:
            raise reader.error("damaged index: no edited mark where format 2.1 has it")
        mapped[at:at + len(INDEX_EDITED)] = np.frombuffer(INDEX_EDITED, np.uint8)
        digest = checksum(mapped[at:at + n])
        trailer = reader.size - TRAILER.size
        mapped[trailer + 16:trailer + 24] = np.frombuffer(digest.to_bytes(8, "little"), np.uint8)
        reader.edited = True
    field = mapped[FLAGS_AT:FLAGS_AT + 4]
    flags = int.from_bytes(field.tobytes(), "little")
    if not flags & EDITED:
        field[:] = np.frombuffer((flags | EDITED).to_bytes(4, "little"), np.uint8)


def _pickle_stream(reader, root, verify, n_threads):
    """The pickle stream as a file object, decoded straight into its buffer.

    A BytesIO, or above :data:`~cpersist.container.CHECKED_CLAIM` bytes the
    anonymous map :meth:`~cpersist.container.ContainerReader.read_bytes`
    decodes into (a map is a file object too): its pages are backed as
    chunks decode, so a forged claim costs what its chunks decode to, and a
    genuine one a single copy of the stream. ``io.BytesIO(data)`` would copy
    the stream: for an object-heavy file that second copy was as large as
    the file's whole pickle stream.
    """
    if root.raw_size > CHECKED_CLAIM:
        return read_stream(reader, root, verify=verify, n_threads=n_threads)
    reader.check_claimed_sizes(root)
    stream = io.BytesIO()
    if root.raw_size:
        stream.seek(root.raw_size - 1)
        stream.write(b"\0")  # sizes the buffer once
        stream.seek(0)
        with stream.getbuffer() as view:
            reader.read_into(root, view, verify=verify, n_threads=n_threads)
    return stream


def read_stream(reader, root, *, verify=True, n_threads=1):
    """The pickle stream of ``root`` as writable bytes
    (:meth:`~cpersist.container.ContainerReader.read_bytes`).

    Above :data:`~cpersist.container.CHECKED_CLAIM` bytes, the start of its
    first chunk is decoded and checked first: every stream cpersist writes
    (protocol 2 to 5) opens with a ``PROTO`` opcode, and a large section
    that does not (a bomb of zeros) is refused before the rest of it is
    decoded.
    """
    check_stream_start(reader, root, verify)
    return reader.read_bytes(root, verify=verify, n_threads=n_threads)


def check_stream_start(reader, root, verify=True):
    """Refuse a large encoded pickle stream whose first chunk does not start
    with a ``PROTO`` opcode, decoding no more of it than its start (see
    :func:`read_stream`)."""
    if root.raw_size > CHECKED_CLAIM and root.codec is not None and root.chunks[0].flag == ENCODED:
        reader.check_claimed_sizes(root)
        chunk = root.chunks[0]
        head = bytearray(min(2, chunk.raw_length))
        whole = claimed_buffer(chunk.raw_length, reader, root)
        buffer = bytearray(chunk.length)
        reader.read_chunk_into(root, 0, memoryview(head), buffer, verify=verify, skip=0,
                               whole=memoryview(whole))
        del whole, buffer
        if len(head) < 2 or head[0] != pickle.PROTO[0] or not 2 <= head[1] <= 5:
            raise reader.error(f"damaged pickle stream (it starts with {bytes(head)!r}, "
                               f"not a PROTO opcode of protocol 2 to 5)")


def array_layout(reader, section):
    """``(dtype, shape, order, nbytes)`` of the array in ``section``.

    Raises
    ------
    CorruptFileError
        If the description is malformed or does not match the bytes stored.
    """
    try:
        dtype, shape, order, nbytes = parse_description(section.meta)
    except Exception as exc:
        raise reader.error(f"section {section.index}: bad array description ({exc})") from None
    if nbytes != section.raw_size:
        raise reader.error(
            f"section {section.index} holds {section.raw_size} bytes but its array "
            f"{dtype} {shape} needs {nbytes}"
        )
    return dtype, shape, order, nbytes


def _allocate(reader, index, dtype, shape, order):
    try:
        return allocate(dtype, shape, order)
    except (MemoryError, ValueError) as exc:
        raise reader.error(
            f"section {index} claims an array {dtype} {shape} that cannot be "
            f"allocated ({type(exc).__name__})"
        ) from None
