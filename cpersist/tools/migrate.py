"""Recognising joblib files and plain pickles, and loading them to convert.

:func:`detect` tells from a source's first bytes (and, for an uncompressed
pickle stream, a scan for joblib's array marker) what kind of file
:func:`cpersist.convert` was given, without loading anything. For a joblib
file or a pickle, :func:`load_pickled` then loads the object, which runs
whatever code the file names: the caller asks first whether the file is
trusted.
"""

import bz2
import io
import lzma
import pickle
import zlib

from ..container import MAGIC
from ..container.tiny import TINY_MAGIC
from ..exceptions import CorruptFileError

#: Bytes read to recognise a file: enough for every magic number, and for
#: the first bytes a compressed stream decompresses to.
HEAD_BYTES = 1 << 16
#: Compressed bytes read at most to see the first decompressed ones: more
#: than bz2's largest block.
MAX_COMPRESSED_HEAD = 4 << 20

#: joblib's compressors, by the magic number their files start with (see
#: ``joblib/compressor.py``), longest first so that no prefix shadows another.
JOBLIB_MAGICS = (
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"\x5d\x00\x00", "lzma"),
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\x78", "zlib"),
)

#: How joblib names the wrapper it writes before each array's bytes: as a
#: ``STACK_GLOBAL`` string (protocol 4 and 5) or a ``GLOBAL`` argument (2, 3).
JOBLIB_ARRAY_MARKERS = (
    b"\x8c\x11NumpyArrayWrapper",
    b"cjoblib.numpy_pickle\nNumpyArrayWrapper\n",
)
_SCAN_BLOCK = 1 << 20

PROTO = 0x80


class Kind:
    """What a source holds.

    Attributes
    ----------
    label : str
        For messages: ``"joblib file (zlib-compressed)"``, ``"pickle
        protocol 5"``; None for a cpersist file (the container reader labels
        it with the version it reads).
    compressor : str or None
        joblib's compressor name, ``"none"`` for an uncompressed joblib
        file, None for anything that is not a joblib file.
    """

    __slots__ = ("label", "compressor")

    def __init__(self, label, compressor=None):
        self.label = label
        self.compressor = compressor

    @property
    def is_cpersist(self):
        return self.label is None

    @property
    def is_joblib(self):
        return self.compressor is not None

    def __repr__(self):
        return f"<Kind {self.label or 'cpersist'}>"


CPERSIST = Kind(None)


def detect(source):
    """The :class:`Kind` of what ``source`` (a byte source) holds.

    Raises
    ------
    CorruptFileError
        If it is none of a cpersist file, a joblib file and a pickle of
        protocol 2 or later; the message names the file.
    """
    head = bytes(source.read(0, min(HEAD_BYTES, source.size)))
    if head[:1] == MAGIC[:1] and (head[: len(MAGIC)] == MAGIC[: len(head)]
                                  or head.startswith(TINY_MAGIC)):
        return CPERSIST  # the container reader reports a truncated header
    protocol = _pickle_protocol(head)
    if protocol is not None:
        if _holds_joblib_arrays(source):
            return Kind("joblib file (uncompressed)", "none")
        return Kind(f"pickle protocol {protocol}")
    for magic, name in JOBLIB_MAGICS:
        if head.startswith(magic):
            inner = _decompressed_head(name, source, head)
            if _pickle_protocol(inner) is not None:
                return Kind(f"joblib file ({name}-compressed)", name)
            raise CorruptFileError(
                f"{source.name}: starts like a {name}-compressed file, but does not "
                f"decompress to a pickle stream: not a cpersist file, a joblib file or "
                f"a pickle")
    if not head:
        raise CorruptFileError(f"{source.name}: empty file, not a cpersist file, a joblib "
                               f"file or a pickle")
    hint = ""
    if head[:1] in b"(}]cdlI":
        # Protocols 0 and 1 have no PROTO opcode, so a text file could pass
        # for one; Python 3 writes protocol 3 or later unless asked.
        hint = ("; a pickle of protocol 0 or 1 is not recognised: load it and dump it "
                "again with protocol 2 or later")
    raise CorruptFileError(
        f"{source.name}: not a cpersist file, a joblib file or a pickle of protocol 2 "
        f"or later (it starts with {head[:8]!r}){hint}")


def _pickle_protocol(head):
    """The protocol of a pickle stream starting ``head``, or None."""
    if len(head) >= 2 and head[0] == PROTO and 2 <= head[1] <= pickle.HIGHEST_PROTOCOL:
        return head[1]
    return None


def _decompressed_head(name, source, head):
    """The first bytes ``source`` decompresses to with joblib's ``name``
    compressor; empty when they do not decompress.

    Compressed input is fed a block at a time until two bytes come out: a
    bz2 stream yields nothing before its first block (up to 900 kB of
    data) is complete.
    """
    decompressor = _decompressor(name)
    if decompressor is None:  # lz4 is not installed: joblib.load names it
        return bytes((PROTO, 2))
    out, block, offset = b"", head, len(head)
    limit = min(source.size, MAX_COMPRESSED_HEAD)
    try:
        while True:
            out += decompressor.decompress(block, 16)
            if len(out) >= 2 or offset >= limit or getattr(decompressor, "eof", False):
                break
            block = bytes(source.read(offset, min(HEAD_BYTES, limit - offset)))
            offset += len(block)
    except (OSError, EOFError, ValueError, RuntimeError, zlib.error, lzma.LZMAError):
        return b""
    return out


def _decompressor(name):
    if name == "zlib":
        return zlib.decompressobj()
    if name == "gzip":
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if name == "bz2":
        return bz2.BZ2Decompressor()
    if name == "lzma":
        return lzma.LZMADecompressor(lzma.FORMAT_ALONE)
    if name == "xz":
        return lzma.LZMADecompressor(lzma.FORMAT_XZ)
    try:
        import lz4.frame
    except ImportError:
        return None
    return lz4.frame.LZ4FrameDecompressor()


def _holds_joblib_arrays(source):
    """Whether an uncompressed pickle stream holds arrays the way joblib
    writes them (a marker, then the array's bytes outside the stream).

    A scan of the bytes, not of the opcodes: the bytes that follow the
    marker are not opcodes. A stream without the marker is a plain pickle
    (joblib writes one when the object holds no array).
    """
    overlap = max(len(m) for m in JOBLIB_ARRAY_MARKERS) - 1
    offset, tail = 0, b""
    while offset < source.size:
        block = tail + bytes(source.read(offset, min(_SCAN_BLOCK, source.size - offset)))
        if any(marker in block for marker in JOBLIB_ARRAY_MARKERS):
            return True
        offset += len(block) - len(tail)
        tail = block[-overlap:]
    return False


def load_pickled(kind, src, source):
    """Load the object of a joblib file or a pickle: this runs its code.

    Parameters
    ----------
    kind : Kind
        What :func:`detect` found.
    src : str, os.PathLike or file object
        What the caller passed: an uncompressed joblib file given by its
        path is memory-mapped (read-only) rather than read into memory.
    source : ByteSource
        The same bytes, read through when ``src`` is not a path.
    """
    from .._runtime.files import is_path
    from .._runtime.remote import is_url

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
    from ..container.sources.open import open_source
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
