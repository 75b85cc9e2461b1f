"""Tiny dumps: a pickle stream compressed with a built-in dictionary, behind
a 4-byte magic, for objects so small that a format-2 dump's fixed 112 bytes
would outweigh them.

Only ``compress="max"`` writes them, when one is the smallest file it can
make. The layout (``docs/format.rst``)::

    magic     4 bytes   b"\\x89CPT"
    codec     1 byte    1: Zstandard, magicless frame, dictionary 1
    length    1-4 bytes n, unsigned LEB128
    payload   n bytes   the pickle stream, compressed
    checksum  8 bytes   XXH3-64 of everything before it

A tiny dump is self-delimiting like a format-2 dump. Readers turn its pickle
stream into a compact dump in memory (:mod:`.compact`) and read that.
"""

import functools
import io

from xxhash import xxh3_64_intdigest as _xxh3_64

from .layout import corrupt
from .tiny_dictionary import DICTIONARY

TINY_MAGIC = b"\x89CPT"
#: Codec byte: a magicless Zstandard frame compressed with :data:`DICTIONARY`.
ZSTD_DICTIONARY_1 = 1
#: The largest pickle stream a tiny dump holds: readers refuse larger
#: claims before decoding (a forged frame cannot make them allocate more).
MAX_STREAM = 16 << 20
_LENGTH_BYTES = 4  # LEB128 of a length below 2**28
_CHECKSUM_SIZE = 8



@functools.lru_cache(maxsize=None)
def _zstd():
    """zstandard and the dictionary: imported on first use, as the codecs'
    libraries are, so that a raw dump imports no compression library."""
    import zstandard

    return zstandard, zstandard.ZstdCompressionDict(
        DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def tiny_dump(pickled):
    """The bytes of a tiny dump of the pickle stream ``pickled``."""
    if len(pickled) > MAX_STREAM:
        raise ValueError(f"a tiny dump holds at most {MAX_STREAM} bytes of pickle stream")
    zstandard, dictionary = _zstd()
    params = zstandard.ZstdCompressionParameters.from_level(
        22, source_size=len(pickled), format=zstandard.FORMAT_ZSTD1_MAGICLESS,
        write_checksum=0, write_content_size=1, write_dict_id=0)
    payload = zstandard.ZstdCompressor(dict_data=dictionary, compression_params=params).compress(
        bytes(pickled))
    head = TINY_MAGIC + bytes((ZSTD_DICTIONARY_1,)) + _leb128(len(payload))
    body = head + payload
    return body + _xxh3_64(body).to_bytes(_CHECKSUM_SIZE, "little")


def tiny_head_size(head, name):
    """``(bytes before the payload, payload length)`` from the first bytes
    of a tiny dump (at least :func:`head_bytes_needed` of them, or all
    there are)."""
    if bytes(head[:len(TINY_MAGIC)]) != TINY_MAGIC:
        raise corrupt(name, "not a tiny dump")
    at = len(TINY_MAGIC)
    if len(head) <= at:
        raise corrupt(name, "truncated tiny dump: no codec byte")
    if head[at] != ZSTD_DICTIONARY_1:
        raise corrupt(name, f"tiny dump with an unknown codec {head[at]} (written by a newer "
                            f"cpersist?)")
    at += 1
    length = shift = 0
    for i in range(_LENGTH_BYTES):
        if at + i >= len(head):
            raise corrupt(name, "truncated tiny dump: its length is cut short")
        byte = head[at + i]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return at + i + 1, length
    raise corrupt(name, "damaged tiny dump: bad length")


def head_bytes_needed():
    """Bytes of a tiny dump enough for :func:`tiny_head_size`."""
    return len(TINY_MAGIC) + 1 + _LENGTH_BYTES


def tiny_size(head, name):
    """The whole size of the tiny dump starting with ``head``."""
    start, length = tiny_head_size(head, name)
    return start + length + _CHECKSUM_SIZE


def tiny_stream(data, name):
    """The pickle stream of the tiny dump ``data`` (exactly its bytes),
    checked against its checksum.

    Raises
    ------
    CorruptFileError
        If it is truncated or damaged; the message names ``name``.
    """
    start, length = tiny_head_size(data, name)
    end = start + length
    if len(data) < end + _CHECKSUM_SIZE:
        raise corrupt(name, f"truncated tiny dump: {len(data)} bytes of "
                            f"{end + _CHECKSUM_SIZE}")
    body = bytes(data[:end])
    if _xxh3_64(body) != int.from_bytes(data[end:end + _CHECKSUM_SIZE], "little"):
        raise corrupt(name, "checksum mismatch in a tiny dump: the file is damaged")
    zstandard, dictionary = _zstd()
    try:
        reader = zstandard.ZstdDecompressor(
            dict_data=dictionary, format=zstandard.FORMAT_ZSTD1_MAGICLESS).stream_reader(
                io.BytesIO(body[start:]))
        stream = reader.read(MAX_STREAM + 1)
    except zstandard.ZstdError as exc:
        raise corrupt(name, f"damaged tiny dump ({exc})") from None
    if not stream or len(stream) > MAX_STREAM:
        raise corrupt(name, f"damaged tiny dump: it decodes to {len(stream)} bytes")
    return stream


def _leb128(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
