"""The byte layout of a cpersist file: its constants, its checksums, and the
text of a chunk's piece checksums. Parsing and checking a file's header,
trailer and index is :mod:`.index`.

The layout is specified in ``docs/format.rst``::

    header   64 bytes   magic, format version, flags
    records             8-byte record header (kind, length), then the payload:
                        a raw section (on a 64-byte boundary, so that it can be
                        memmapped), a chunk of a compressed section, or the
                        pickle stream; the last record holds
    index               UTF-8 JSON: every section's offset, codec, chunk table
                        (the section list Zstandard-compressed when long)
    trailer  32 bytes   index offset and length, checksum of the index, end magic

:mod:`.framing` finds where a dump ends.

Nothing here reads a file: the reader hands over the bytes it read.
"""

import binascii
import json
import struct
from collections import namedtuple

from xxhash import xxh3_64 as _xxh3_64_state
from xxhash import xxh3_64_intdigest as _xxh3_64

from ..exceptions import CorruptFileError

MAGIC = b"\x89CPS\r\n\x1a\n"
END_MAGIC = b"CPSEND\r\n"
FORMAT_MAJOR = 2
FORMAT_MINOR = 2
#: magic, major, minor, flags, then zero padding up to 64 bytes.
HEADER = struct.Struct("<8sHHI48x")
#: Offset of the header's flags, which a writable map changes.
FLAGS_AT = 12
#: Offset of the header's minor version.
MINOR_AT = 10
#: Header flag: raw array sections may have been changed through a writable
#: memory map since their checksums were computed. Readers of format 2.0 go
#: by it; from format 2.1 the index's ``"edited"`` field decides
#: (:data:`INDEX_EDITED`), covered by the index's checksum, so that one
#: damaged header bit cannot turn checking off. Writers still set it, for
#: readers of format 2.0.
EDITED = 1
#: How a format-2.1 index starts: its ``"edited"`` field comes first, so
#: that a writable map marks the dump as edited by rewriting these bytes
#: (with the same length) and the index's checksum in the trailer.
INDEX_UNEDITED = b'{"edited":false,'
INDEX_EDITED = b'{"edited":true ,'


def index_checks_out(index, digest):
    """Whether the index bytes ``index`` have the checksum ``digest`` from
    their trailer, as they are or with their edited mark flipped
    (:func:`flipped_mark`)."""
    if checksum(index) == digest:
        return True
    flipped = flipped_mark(index)
    return flipped is not None and checksum(flipped) == digest


def flipped_mark(index):
    """The bytes of ``index`` with its edited mark the other way round, or
    None for an index without one (format 2.0, a compact dump).

    Marking a dump takes two writes, the mark and then the index's checksum
    in the trailer: an index whose checksum is that of its flipped bytes is
    one caught (or left, by a killed process) between them, and whole.
    """
    head = bytes(index[:len(INDEX_UNEDITED)])
    if head == INDEX_UNEDITED:
        return INDEX_EDITED + bytes(index[len(INDEX_EDITED):])
    if head == INDEX_EDITED:
        return INDEX_UNEDITED + bytes(index[len(INDEX_UNEDITED):])
    return None
#: Size of a format-2 record header (kind and payload length).
RECORD_SIZE = 8
#: index offset, index length, XXH3-64 checksum of the index, end magic.
TRAILER = struct.Struct("<QQQ8s")
ALIGN = 64
#: A raw section of at least :data:`PAGE_ALIGNED_FROM` bytes has its data
#: start at a multiple of :data:`PAGE` in the file (a padding record before
#: its own, see :func:`.framing.padding_before`): a memory map of it shares
#: no page with other data, and a background dump writes it around the page
#: cache straight from its snapshot's memory, which direct writes may do only
#: at such offsets. The padding (at most ``PAGE`` bytes) is at most 0.4% of
#: such a section; 1 MiB is also where a background dump's snapshot copies
#: an array on its own (``snapshot_pickler.DEFER_FROM``).
PAGE, PAGE_ALIGNED_FROM = 4096, 1 << 20
#: Chunk flags (the last field of a chunk table entry): the chunk is encoded
#: with its section's codec, or its bytes are kept verbatim (no codec, or
#: encoding would not have made them smaller).
ENCODED, VERBATIM = 0, 1
#: Upper bound of a chunk's size: chunk tables use it to reject forged sizes.
MAX_CHUNK_SIZE = 1 << 31
#: Bytes of data per chunk when the caller does not choose: large enough that
#: a chunk's fixed costs vanish, small enough that every thread gets chunks.
DEFAULT_CHUNK_SIZE = 4 << 20
#: A chunk of an array kept verbatim and longer than this also has the
#: checksum of each run of this many of its bytes (its pieces) in the index,
#: so that reading part of the chunk reads and checks only the pieces it
#: touches, not the whole chunk. At 1 MiB the checksums add 8 bytes per MiB
#: of data to the index, and a slice reads at most a piece more at each end.
PIECE_SIZE = 1 << 20
assert PAGE_ALIGNED_FROM <= PIECE_SIZE  # a chunk written whole has no pieces
#: The index stores its section list compressed (format 2.2) when the list's
#: JSON text is longer than this: the index of a checkpoint of hundreds of
#: tensors shrinks several times, while a file of a few arrays keeps a
#: plain index, written without importing Zstandard.
PACK_SECTIONS_ABOVE = 4096
#: ... and at most this long (about 75,000 sections): a longer list stays
#: plain, so that a reader can refuse a packed one claiming more, and a
#: small forged file cannot make it parse a list of gigabytes.
PACK_SECTIONS_UP_TO = 16 << 20
#: The codec of a packed section list (Zstandard at its default level).
SECTIONS_CODEC = {"id": "zstd", "level": 3}
#: The ``"sections"`` of an index whose list is packed: one section whose
#: codec no reader has, so that a reader of format 2.0 or 2.1 refuses the
#: file naming a codec it lacks (as the versioning rules promise for a
#: newer minor version), rather than reading a list it does not expect.
PACKED_STUB = '[{"offset":64,"codec":{"id":"format-2.2-packed-sections","level":1}}]'
#: A packed section list may claim to decode to at most this many times
#: its packed size, so that a forged claim is refused before anything is
#: decoded. A list of sections compresses 5-30 times; one that compresses
#: more (thousands of empty arrays of one long dtype) is written plain.
SECTIONS_EXPANSION = 64
#: The minor version of a dump whose small arrays may sit in buffer blocks
#: (sections of ``meta`` kind ``"buffers"``) out of its pickle stream.
BLOCKS_MINOR = 5
#: The ``meta`` kind of a buffer block section.
BLOCK_KIND = "buffers"
#: The last entry of the section list of a dump that holds buffer blocks: a
#: section whose codec no reader has, so that a reader of format 2.4 or
#: earlier refuses the file naming a codec it lacks rather than calling its
#: pickle stream damaged. Readers of this version drop it.
BLOCKS_STUB = {"offset": 64, "codec": {"id": "format-2.5-buffer-blocks", "level": 1}}


def packed_sections_accepted(size, packed_size):
    """Whether readers accept a packed section list of ``packed_size`` bytes
    that decodes to ``size``: writers pack no other, readers refuse any
    other before decoding it."""
    return size <= min(SECTIONS_EXPANSION * packed_size, PACK_SECTIONS_UP_TO)

ZEROS = bytes(ALIGN)


def checksum(data):
    """XXH3-64 of a bytes-like object.

    Chosen over zlib's CRC-32 because it runs several times faster, so that
    verifying a raw load, otherwise a plain copy from the page cache, stays
    cheap beside it. On the pool it overlaps the calling thread's file I/O
    (see :mod:`cpersist._runtime.threads` for when xxhash releases the GIL).
    """
    return _xxh3_64(data)


def checksum_state():
    """A running :func:`checksum`: ``update(data)`` with each part in turn,
    then ``intdigest()``, equal to the checksum of the parts joined."""
    return _xxh3_64_state()


def verbatim_checksums(data):
    """``(checksum of data, checksums of its pieces or None)`` for a chunk
    kept verbatim: pieces of :data:`PIECE_SIZE` bytes (the last may be
    shorter), when it is longer than one. Each piece is hashed twice, for
    its own checksum and the chunk's, while it is in the CPU's cache."""
    view = memoryview(data)
    n = view.nbytes
    if n <= PIECE_SIZE:
        return _xxh3_64(view), None
    state = _xxh3_64_state()
    pieces = []
    for start in range(0, n, PIECE_SIZE):
        piece = view[start:start + PIECE_SIZE]
        pieces.append(_xxh3_64(piece))
        state.update(piece)
    return state.intdigest(), pieces


def piece_fields(pieces):
    """The index keys of a section whose chunks have the checksums
    ``pieces`` (a list per chunk, or None): ``piece_size`` and ``pieces``,
    or none at all when no chunk has any."""
    if not any(p is not None for p in pieces):
        return {}
    return {"piece_size": PIECE_SIZE, "pieces": pieces_text(pieces)}


def pieces_text(pieces):
    """The ``"pieces"`` index entry of a section: per chunk, the checksums
    of its pieces as 8-byte big-endian integers in base64 (nothing for a
    chunk without), the chunks' fields separated by commas. A reader finds
    one chunk's field without decoding the others'."""
    return ",".join("" if p is None else binascii.b2a_base64(
        struct.pack(">%dQ" % len(p), *p), newline=False).decode("ascii") for p in pieces)


class VerbatimText(str):
    """A string that JSON encodes as itself between quotes (printable ASCII
    without ``"`` or ``\\``): :func:`index_text` writes it as it is. A
    growing file's chunk tables and piece checksums are such strings,
    longer at every commit; escaping them each time would cost each commit
    in proportion to the file's size."""
    __slots__ = ()


#: The bytes JSON writes as themselves in a string: printable ASCII but the
#: quote and the backslash.
_JSON_PLAIN = bytes(c for c in range(0x20, 0x7f) if c not in b'"\\')


def _plain_ascii(text):
    # Deleting the plain bytes leaves nothing: a few times faster than
    # str.isprintable, and than the escaping it saves.
    return text.isascii() and not text.encode("ascii").translate(None, _JSON_PLAIN)


def verbatim(text):
    """``text`` as a :class:`VerbatimText` if it is one (checked unless it
    is one already), else ``text`` itself (JSON escapes it as always)."""
    if type(text) is VerbatimText or type(text) is not str or not _plain_ascii(text):
        return text
    return VerbatimText(text)


def extended_text(text, tail, cut=0):
    """``text`` but for its last ``cut`` characters, then ``tail``: a
    :class:`VerbatimText` when both are plain ASCII (``text`` checked
    unless it is a VerbatimText, ``tail`` checked: keep it short)."""
    joined = text[:len(text) - cut] + tail
    if (type(text) is VerbatimText or _plain_ascii(text)) and _plain_ascii(tail):
        return VerbatimText(joined)
    return joined


#: ``json.dumps(o, separators=(",", ":"))`` without making an encoder per call.
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _sections_parts(sections):
    """The text of ``json.dumps(sections, separators=(",", ":"))``, as
    strings to join, the :class:`VerbatimText` values of the section
    entries among them as they are (not scanned or copied again)."""
    if not any(type(value) is VerbatimText
               for entry in sections if type(entry) is dict for value in entry.values()):
        return [_encode(sections)]
    parts = ["["]
    for number, entry in enumerate(sections):
        if number:
            parts.append(",")
        if type(entry) is not dict or not all(type(key) is str for key in entry):
            parts.append(_encode(entry))
            continue
        # The entry's fields in order, each run of other values encoded as
        # one dict without its braces.
        fields, run = [], {}
        for key, value in entry.items():
            if type(value) is VerbatimText:
                if run:
                    fields.append((_encode(run)[1:-1],))
                    run = {}
                fields.append((_encode(key), ':"', value, '"'))
            else:
                run[key] = value
        if run:
            fields.append((_encode(run)[1:-1],))
        parts.append("{")
        for n, field in enumerate(fields):
            if n:
                parts.append(",")
            parts.extend(field)
        parts.append("}")
    parts.append("]")
    return parts


def index_text(root, sections, info, minor=FORMAT_MINOR, pack=True):
    """The index of a dump, as UTF-8 JSON bytes.

    Its ``"edited"`` field comes first (:data:`INDEX_UNEDITED`). The
    section list is the ``"sections"`` array; or, for a text longer than
    :data:`PACK_SECTIONS_ABOVE` that packs as readers accept
    (:func:`packed_sections_accepted`), that array's text compressed with
    :data:`SECTIONS_CODEC`, in base64, as ``"packed_sections"``, its length
    as ``"sections_size"``, and :data:`PACKED_STUB` as ``"sections"``
    (format 2.2). ``pack=False`` keeps the list plain (a growing file's
    commits: packing it at every commit would cost more than writing it).
    """
    # Only a plain list (a growing file's commits) holds VerbatimText
    # values; a dump's own index is encoded whole, without looking for them.
    listed = [_encode(sections)] if pack else _sections_parts(sections)
    key = '"sections":'
    if pack and PACK_SECTIONS_ABOVE < sum(map(len, listed)) <= PACK_SECTIONS_UP_TO:
        from ..codecs import codec_from_config

        raw = "".join(listed).encode()
        packed = codec_from_config(SECTIONS_CODEC).encode(raw)
        if packed_sections_accepted(len(raw), len(packed)):
            listed = [binascii.b2a_base64(packed, newline=False).decode("ascii")
                      + f'","sections_size":{len(raw)}']
            key = f'"sections":{PACKED_STUB},"packed_sections":"'
    head = f'{INDEX_UNEDITED.decode()}"format":[{FORMAT_MAJOR},{minor}],"root":{root},{key}'
    return "".join([head, *listed, f',"info":{_encode(info)}}}']).encode()


#: One chunk of a section, as its chunk table describes it: where its bytes
#: start in the file (relative to the start of the cpersist data), how many
#: bytes it occupies there (``length``), how many it decodes to
#: (``raw_length``), their XXH3-64 ``checksum`` and its ``flag``
#: (:data:`ENCODED` or :data:`VERBATIM`).
Chunk = namedtuple("Chunk", "offset length raw_length checksum flag")


def corrupt(name, what):
    """A :class:`CorruptFileError` that names the file."""
    return CorruptFileError(f"{name}: {what}")


#: Chunk(...) without the keyword handling of a namedtuple's __new__: a
#: table lists up to thousands of chunks.
new_chunk = tuple.__new__


def chunk_table_text(table):
    """A chunk table (lists of 4 ints) as compact JSON text.

    Formatted by hand: ``json.dumps`` cost a noticeable share of the dump
    time of files of many small arrays.
    """
    return "[" + ",".join("[%d,%d,%d,%d]" % tuple(entry) for entry in table) + "]"
