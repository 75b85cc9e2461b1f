"""``dump`` and ``load``: the arguments checked, then the object written to
its target (a path, a file object, a stream or a URL) by
:mod:`cpersist.pickling.dump`, or its source opened and the object read
back by :mod:`cpersist.pickling.read` (a local file of one raw array by
:mod:`cpersist.pickling.single`)."""

import os
import pickle

from ._args import (check_chunk_size, check_compress, check_limits, check_mmap_mode, check_n_threads,
                    check_protocol, check_storage_options, check_target, check_timeout,
                    check_trusted)
from .container.files import display_name, is_path
from .storage.fsspec.urls import is_remote
from .storage.small_files import OpenedFile, compact_file_stream, open_local
from .exceptions import CorruptFileError
from .pickling.dump import dump_to


def dump(obj, target, compress=0, *, protocol=None, chunk_size=None, n_threads=None,
         fsync=False, storage_options=None, timeout=None, background=False, growing=False):
    """Persist a Python object and the numpy arrays it holds to one file.

    Parameters
    ----------
    obj : object
        Anything picklable. Every numpy array inside it (except object-dtype
        arrays, whose items are pickled) is stored as a separate buffer, in
        its own C or Fortran order, raw or compressed. A dask array is
        stored as the numpy array it computes to, in C order, computed and
        written one band of blocks at a time by dask's scheduler in force,
        never whole in memory; so is a :class:`cpersist.RowBatches`, read
        one batch at a time (see :doc:`/larger_than_memory`).
    target : str, os.PathLike or binary file object
        A path is written atomically: to a temporary file in the same
        directory, renamed onto the path once complete. A file object
        (seekable or not: a pipe or socket works) is written sequentially
        from its current position, which must be its end: bytes after it
        are never overwritten. A file open for appending (``"ab"``,
        ``"a+b"``, :data:`os.O_APPEND`) gets the dump at its end, wherever
        its position. If the dump fails partway, a seekable file object is
        cut back to where the dump started. A URL (``s3://bucket/key.cp``,
        ``memory://...``; see :doc:`/cloud`), a ``(file system, path)``
        pair or an :class:`fsspec.core.OpenFile` is written through fsspec,
        complete or not at all.
    compress : bool, int, str or tuple, default 0
        ``0``/``False``/``"raw"``: raw (arrays can then be memory-mapped on load).
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
    background : bool, default False
        Return as soon as ``obj`` is snapshotted, and write the file on a
        thread (see :ref:`background-dumps`): the caller may change ``obj``
        and its arrays right after the call. The snapshot pickles ``obj``'s
        other objects and copies the bytes of its numpy arrays, CPU torch
        tensors (once per storage) and JAX arrays on the CPU (so that a
        jitted step donating them right after reuses their memory), but for
        those the dump has already written from their own memory, which it
        starts doing at once: the call takes about as long as one copy
        would, and copies only what the dump will not have written by then.
        The copies' memory is kept for the next background dump's snapshot.
        Compression runs on ``n_threads`` threads as in any dump, and the
        file appears at ``target`` atomically once complete; from 64 MB of
        arrays on, it is written around the page cache (``O_DIRECT``,
        where the file system allows it), sparing the caller's cores the
        copy into it. At
        most one background dump is pending per process: a call while one
        is waits for it to finish before taking its snapshot. At
        interpreter exit, pending background dumps are finished, and the
        error of any that failed, unless retrieved from its future, is
        printed to stderr. ``target`` must be a path.
    growing : bool, default False
        Write a *growing file* (format 2.4, see :doc:`/growing`): its
        arrays can then grow by rows, or be replaced, through
        ``cpersist.open(target, "a")``, each change appended and committed
        without rewriting what is stored. Every array is then a section of
        its own (none kept inside the pickle stream). ``target`` must be a
        local path; not with ``background`` or ``compress="max"``. It
        loads, maps and opens as any dump does.

    Returns
    -------
    list of str or concurrent.futures.Future
        The name of the file written (the file object's ``name`` when it has
        one; an empty list for anonymous file objects). With
        ``background=True``: a future whose ``result()`` waits for the dump
        and returns that list, or raises the dump's error (any of those
        below but the ``ValueError`` and ``TypeError`` for bad arguments,
        which the call raises).

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
        and why; no file is left (a seekable file object is cut back to
        where the dump started). A subclass of :class:`pickle.PicklingError`
        and :class:`TypeError`.
    IsADirectoryError, NotADirectoryError, FileNotFoundError
        For a path naming a directory (or ending with ``/``), or whose
        directory does not exist: checked before anything is written.
    UnwritableTargetError
        For a file object open in text mode or for reading only, or
        positioned before its end (not in append mode), where the dump
        would overwrite bytes already there: checked before anything is
        written.

    Examples
    --------
    >>> import numpy as np, cpersist
    >>> model = {"weights": np.arange(6.0).reshape(2, 3), "name": "demo"}
    >>> cpersist.dump(model, "model.cp", compress=3)
    ['model.cp']
    """
    codec = check_compress(compress)
    protocol = check_protocol(protocol)
    chunk_size = check_chunk_size(chunk_size)
    if n_threads is not None:  # None: resolved when there is work for threads
        check_n_threads(n_threads)
    timeout = check_timeout(timeout)
    target = check_target(target, storage_options, fsync, timeout, background=background,
                         growing=growing, codec=codec)
    return dump_to(obj, target, codec, protocol, chunk_size, n_threads, growing=growing,
                   background=background)


def load(source, mmap_mode=None, *, trusted=True, verify=True, n_threads=None,
         storage_options=None, limits=None, jax_as_numpy=False):
    """Load an object written by :func:`dump`.

    Parameters
    ----------
    source : str, os.PathLike or binary file object
        A path holds one dump; or several, dumped one after another to it
        opened ``"ab"``, or a record log (:func:`cpersist.append`), whose
        records (dumps) come back as a list, in order (:func:`cpersist.open`
        reads them one at a time; see :doc:`/growing`). A file object is
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
    jax_as_numpy : bool, default False
        Give each JAX array back as a numpy array of its dtype and shape (a
        sharded one assembled), without importing jax: to read a JAX
        checkpoint where jax is not installed, or to process it with numpy.
        By default JAX arrays come back as JAX arrays (see
        :ref:`jax-checkpoints`).

    Returns
    -------
    object
        The object dumped. For a record log, or a path holding several
        dumps, the list of its records, even if it holds one: a record
        or dump cut short at the end of the file (a torn tail) is not one.

    Raises
    ------
    CorruptFileError
        If the source is not a cpersist file, or is truncated or damaged, or
        a path holds bytes after its dump that are not another dump (the
        message says how many).
    DtypeLibraryError
        If the file holds arrays whose dtype or kind needs a library that
        is missing (ml_dtypes, or jax without ``jax_as_numpy``).
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
    restricted, allowed, prefixes = check_trusted(trusted)
    if n_threads is not None:  # None: resolved for the general way (below)
        check_n_threads(n_threads)
    limits = check_limits(limits)
    check_storage_options(storage_options, source)
    # Told once: a local path is opened here, once for the whole load; a
    # small file there takes a quick path below, and only a local path is
    # read again as a file of several records.
    local_path = is_path(source) and not is_remote(source)
    local = open_local(source, writable=mmap_mode == "r+") if local_path else None
    stream = None
    try:
        quick = local is not None and not restricted and not jax_as_numpy
        if quick and mmap_mode != "r+":
            # An object without arrays (a compact dump): read in one call
            # and unpickled, without the container reader; anything else,
            # damage included, goes the general way, which says what is wrong.
            stream = compact_file_stream(*local)
        if stream is None:
            (open_source, load_source, foreign_file_error, GrowingFileFound, load_single,
             NOT_SINGLE) = _reading_side()
            if quick and mmap_mode is None and verify and type(local[0]) is OpenedFile:
                # One raw array read into memory, as np.load reads one: the
                # same checks without the general way's layers (load_single).
                obj = load_single(local[0], local[1].st_size, display_name(source))
                if obj is not NOT_SINGLE:
                    local[0].close()
                    return obj
    except BaseException:
        if local is not None:
            local[0].close()
        raise
    if stream is not None:
        local[0].close()
        try:
            return pickle.loads(stream)
        except (pickle.UnpicklingError, EOFError) as exc:
            raise CorruptFileError(
                f"{os.fsdecode(source)}: damaged pickle stream ({exc})") from None
    n_threads = check_n_threads(n_threads)
    try:
        with open_source(source, mmap_mode, storage_options=storage_options,
                         opened=local) as opened:
            try:
                return load_source(opened, mmap_mode=mmap_mode, restricted=restricted,
                                   allowed=allowed, prefixes=prefixes, verify=verify,
                                   n_threads=n_threads, whole=is_path(source), limits=limits,
                                   jax_as_numpy=jax_as_numpy)
            except GrowingFileFound:
                raise
            except CorruptFileError as exc:
                foreign = foreign_file_error(opened, exc)
                if foreign is None:
                    raise
                raise foreign from None
    except GrowingFileFound as exc:
        if not local_path:
            raise  # the reader's message says to read it through its path
        from .recordlog.tools import load_records

        return load_records(source, load, mmap_mode=mmap_mode, trusted=trusted,
                            verify=verify, limits=limits)


_READING_SIDE = None


def _reading_side():
    """``(open_source, load_source, foreign_file_error, GrowingFileFound,
    load_single, NOT_SINGLE)``, imported by the first load that needs them,
    so that a process that only dumps never imports the reading side; kept,
    since an import statement run on every load would cost about a
    microsecond each time."""
    global _READING_SIDE
    if _READING_SIDE is None:
        from .container.foreign import foreign_file_error
        from .container.frames import GrowingFileFound
        from .pickling.read import load_source
        from .pickling.single import NOT_SINGLE, load_single
        from .storage.open import open_source

        _READING_SIDE = (open_source, load_source, foreign_file_error, GrowingFileFound,
                         load_single, NOT_SINGLE)
    return _READING_SIDE
