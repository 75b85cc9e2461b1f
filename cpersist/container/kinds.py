"""What kind of file a source holds, told from its first bytes without loading
anything: a cpersist file, a joblib file (and its compressor), or a plain
pickle (and its protocol); for an uncompressed pickle stream, a scan for
joblib's array marker tells joblib's from a plain one.
"""

import bz2
import lzma
import pickle
import zlib

from ..exceptions import CorruptFileError
from .layout import MAGIC
from .tiny import TINY_MAGIC

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
