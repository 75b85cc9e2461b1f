"""Loading joblib files and plain pickles to convert them.

:func:`cpersist.container.kinds.detect` tells what kind of file
:func:`cpersist.convert` was given, without loading anything. For a joblib
file or a pickle, :func:`load_pickled` then loads the object, which runs
whatever code the file names: the caller asks first whether the file is
trusted.
"""

import io
import lzma
import pickle
import zlib

from ..exceptions import CorruptFileError

def load_pickled(kind, src, source):
    """Load the object of a joblib file or a pickle: this runs its code.

    Parameters
    ----------
    kind : Kind
        What :func:`~cpersist.container.kinds.detect` found.
    src : str, os.PathLike or file object
        What the caller passed: an uncompressed joblib file given by its
        path is memory-mapped (read-only) rather than read into memory.
    source : ByteSource
        The same bytes, read through when ``src`` is not a path.
    """
    from ..container.files import is_path
    from ..storage.fsspec.urls import is_url

    local = is_path(src) and not is_url(src)  # a URL's object is read through ``source``
    if kind.is_joblib:
        try:
            import joblib
        except ImportError:
            raise ImportError(
                f"{source.name} is a {kind.label}: reading it needs joblib "
                f"(pip install joblib)") from None
        options = {}
        if _joblib_keeps_byte_order(joblib):
            # Otherwise joblib swaps non-native arrays to native byte order,
            # and the copy would not hold the arrays that were dumped.
            options["ensure_native_byte_order"] = False
        if local and kind.compressor == "none":
            options["mmap_mode"] = "r"
        target = src if local else _reader(source)
        return _unpickle(source, kind, joblib.load, target, **options)
    return _unpickle(source, kind, pickle.load, _reader(source))


def _joblib_keeps_byte_order(joblib):
    import inspect

    return "ensure_native_byte_order" in inspect.signature(joblib.load).parameters


def _unpickle(source, kind, load, target, **options):
    try:
        return load(target, **options)
    except (pickle.UnpicklingError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        raise CorruptFileError(
            f"{source.name}: could not load this {kind.label}: {exc}") from exc


def _reader(source):
    return io.BufferedReader(_SourceFile(source), buffer_size=1 << 20)


class _SourceFile(io.RawIOBase):
    """A read-only, seekable file object over a byte source."""

    def __init__(self, source):
        self._source = source
        self._position = 0
        self.name = source.name

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._position

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position,
                io.SEEK_END: self._source.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer):
        count = max(0, min(len(buffer), self._source.size - self._position))
        if count:
            self._source.read_into(self._position, memoryview(buffer).cast("B")[:count])
            self._position += count
        return count


def convert_pickled(kind, src, source, dst, *, trust_pickles, compress, chunk_size,
                    n_threads, fsync, storage_options=None):
    """Load a joblib file or a pickle and dump its object to ``dst``
    (a URL with ``storage_options``).

    Returns :func:`cpersist.convert`'s statistics; refuses (before loading)
    unless ``trust_pickles``.
    """
    from ..exceptions import UntrustedPickleError

    if not trust_pickles:
        raise UntrustedPickleError(
            f"{source.name} is a {kind.label}, not a cpersist file: converting it means "
            f"loading it, and loading a pickle runs code (any function the file names, "
            f"with any arguments). Convert only files you trust: pass --trust-pickles to "
            f"'cpersist convert' or trust_pickles=True to cpersist.convert(). Nothing "
            f"was written.")
    return dump_loaded([load_pickled(kind, src, source)], kind, source, dst, compress=compress,
                       chunk_size=chunk_size, n_threads=n_threads, fsync=fsync,
                       storage_options=storage_options)


def dump_loaded(held, kind, source, dst, *, compress, chunk_size, n_threads, fsync,
                storage_options):
    """Dump the object loaded from another format, ``held[0]``, to ``dst`` and
    return :func:`cpersist.convert`'s statistics. The object is dropped once
    written (held in a list so that no caller's name keeps it): that releases
    the maps of a memory-mapped source."""
    from ..storage.open import open_source
    from ..api import dump
    from ..container import ContainerReader

    dump(held[0], dst, compress, chunk_size=chunk_size, n_threads=n_threads, fsync=fsync,
         storage_options=storage_options)
    held.clear()
    with open_source(dst, storage_options=storage_options) as out:
        sections = ContainerReader(out).sections
    return {
        "source_kind": kind.label,
        "sections": len(sections),
        "raw_bytes": sum(s.raw_size for s in sections),
        "stored_bytes_before": source.size,
        "stored_bytes_after": sum(s.stored_size for s in sections),
    }
