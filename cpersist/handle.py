"""``cpersist.open``: a cpersist file kept open, its arrays read on demand; or
a record log, or a growing file, open to read or change."""

from ._args import (check_compress, check_limits, check_log_path, check_n_threads,
                    check_open_mode, check_protocol, check_storage_options, check_trusted)
from .container.files import display_name, is_path
from .container import ContainerReader
from .container.frames import GrowingFileFound
from .container.sources import SpooledSource
from .container.foreign import foreign_file_error
from .storage.open import Borrowed, open_source
from .exceptions import CorruptFileError
from .filehandle import FileHandle
from .lazy.openfile import OpenFile, reference_for

__all__ = ["FileHandle", "open"]


def open(source, mode="r", *, trusted=True, verify=True, n_threads=None,  # noqa: A001
         storage_options=None, limits=None, **append_options):
    """Open a cpersist file to read its arrays, or parts of them, on demand;
    or a record log, or a file of several dumps, to read its records, or
    (``mode="a"``) append some to a record log.

    Parameters
    ----------
    source : str, os.PathLike, binary file object or ByteSource
        A path, or a file object read from its current position to its end
        (a non-seekable one is first copied to a temporary file). A URL is
        read by range requests (see :doc:`/cloud`); its lazy arrays, pickled
        to another process, reopen it there. A record log, or a file of
        several dumps one after another, is read through its path (a file
        object gives the dump at its position).
    mode : {'r', 'a'}, default 'r'
        ``'a'``: open the record log at the path ``source`` (created if
        missing) to append records, holding the writers' lock until it is
        closed; ``compress``, ``protocol``, ``fsync`` and ``timeout`` are
        then taken as by :func:`cpersist.append`, for every record. A
        growing object file (``cpersist.dump(obj, path, growing=True)``)
        opens as a :class:`GrowingFile` instead, whose arrays grow by rows
        (:meth:`GrowingFile.append`) or are replaced; ``fsync`` and
        ``timeout`` apply to its commits.
    trusted : bool or iterable, default True
        For :meth:`FileHandle.load`, as in :func:`cpersist.load`. Listing
        :attr:`FileHandle.arrays` never unpickles anything, whatever this is.
    verify : bool, default True
        Check the checksum of every chunk read.
    n_threads : int, optional
        Threads that read and decode the chunks of one slice; default: all
        available CPUs. A slice that only copies a few MiB (raw chunks, or
        chunks stored as they are) is read by the calling thread alone.
    storage_options : dict, optional
        For a URL: passed to fsspec (credentials, endpoint, ...).
    limits : cpersist.Limits or dict, optional
        What reading the pickle stream may cost, for :attr:`FileHandle.arrays`
        (whatever ``trusted`` is) and a restricted :meth:`FileHandle.load`
        (see :class:`~cpersist.Limits`).

    Returns
    -------
    FileHandle, GrowingFile or RecordLog
        A :class:`RecordLog` for a record log or a path holding several
        dumps (its records by number, in order; ``append`` in mode ``'a'``),
        even of one record; a :class:`GrowingFile` for a growing object file
        in mode ``'a'`` (in mode ``'r'``, a :class:`FileHandle` of its last
        commit). Use any as a context manager, or ``close()``.

    Raises
    ------
    CorruptFileError
        If the source is not a cpersist file, or its index is damaged. Damaged
        data, and damaged record headers, are reported by the first read of
        an array or of the pickle stream.
    UnsupportedVersionError
        If a newer, incompatible version of the format wrote the file.

    Examples
    --------
    >>> import numpy as np, cpersist
    >>> cpersist.dump({"w": np.arange(30000.0).reshape(10000, 3)}, "open.cp")
    ['open.cp']
    >>> with cpersist.open("open.cp") as f:
    ...     w = f.arrays["obj['w']"]
    ...     print(w.shape, w[1:3, 0])
    (10000, 3) [3. 6.]
    """
    normalized = check_trusted(trusted)
    n_threads = check_n_threads(n_threads)
    limits = check_limits(limits)
    check_storage_options(storage_options, source)
    if mode != "r" or append_options:
        return _open_log(source, mode, trusted, verify, limits, append_options,
                         n_threads=n_threads)
    opened = open_source(source, storage_options=storage_options, what="source")
    borrowed = isinstance(opened, Borrowed)
    byte_source = opened.source if borrowed else opened
    try:
        try:
            # Listing reads the index alone: the record headers are walked at
            # the first read of data (FileHandle, LazyArray._bind).
            reader = ContainerReader(byte_source, whole=is_path(source), records_later=True)
        except GrowingFileFound as exc:
            if not borrowed:
                byte_source.close()
            return _open_log(source, mode, trusted, verify, limits, {}, exc)
        except CorruptFileError as exc:
            foreign = foreign_file_error(byte_source, exc)
            if foreign is None:
                raise
            raise foreign from None
    except BaseException:
        if not borrowed:
            byte_source.close()
        raise
    owns = not borrowed and (is_path(source) or isinstance(byte_source, SpooledSource))
    file = OpenFile(reader, reference_for(byte_source, whole=is_path(source)), owns)
    handle = FileHandle(file, normalized, verify, n_threads)
    handle._limits = limits
    return handle


def _open_log(source, mode, trusted, verify, limits, options, error=None, n_threads=None):
    from .api import load
    from .recordlog.tools import open_log
    from .recordlog.writer import LogWriter

    if error is not None and not is_path(source):
        raise error
    check_open_mode(mode, **options)
    if mode == "a":
        check_log_path(source)
        from .growfile.handle import is_growing_object, open_growing

        if is_growing_object(source):
            if options.get("compress") or options.get("protocol") is not None:
                raise TypeError(f"{display_name(source)}: a growing object file's arrays keep "
                                f"the codec they were dumped with; compress and protocol are "
                                f"for record logs")
            return open_growing(source, check_trusted(trusted), verify, n_threads, limits,
                                fsync=options.get("fsync", False),
                                timeout=options.get("timeout"))
        options = dict(options, compress=check_compress(options.get("compress", 0)),
                       protocol=check_protocol(options.get("protocol")))
    return open_log(source, mode, load, LogWriter, trusted=trusted, verify=verify,
                    limits=limits, **options)
