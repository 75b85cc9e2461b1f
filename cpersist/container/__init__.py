"""The cpersist container: numbered sections of bytes, each split into chunks
kept verbatim or encoded with a codec, and a JSON index that describes them.

It knows nothing of numpy objects or pickling: what a section holds is said
by an opaque ``meta`` dict that the caller provides. One module per layer:
:mod:`.layout` (the byte layout: constants, checksums), :mod:`.index`
(parsing and checking the header, trailer and index),
:mod:`.framing` (where a dump ends: its records, walked or copied from a
stream), :mod:`.encode` (whether and how a chunk is encoded), :mod:`.writer`
(writing a file sequentially, so a pipe or socket can be the target),
:mod:`.stream_in_file` (a raw pickle stream written into a local file as it
comes), :mod:`.direct_io` (a file written around the page cache),
:mod:`.reader` (opening a file through a byte source), :mod:`.sections` and
:mod:`.pieces` (reading whole sections and parts of them), :mod:`.compact`
and :mod:`.tiny` (dumps of a pickle stream alone), :mod:`.marking` and
:mod:`.reseal` (marking a dump edited in place, and re-sealing it),
:mod:`.sources` (the byte sources a dump is read through),
:mod:`.targets` and :mod:`.atomic` (the local targets a dump is written to:
a file object, a buffer, a path written whole or not at all), :mod:`.files`
(what may be done with a path or file object: its descriptor, whether it
seeks, appends or writes, its name), :mod:`.buffers` (reused read buffers),
:mod:`.section_file` (a section's bytes read as a file object, such as the
pickle stream an unpickler reads), and :mod:`.kinds` and :mod:`.foreign`
(what a file holds, read from its first bytes, and what to say of one that
is no cpersist file).
"""

from .buffers import READ_BUFFERS
from .encode import EncodedStream, encode_chunk
from .layout import (DEFAULT_CHUNK_SIZE, EDITED, ENCODED, FLAGS_AT, FORMAT_MAJOR, FORMAT_MINOR, MAGIC,
                     MAX_CHUNK_SIZE, TRAILER, VERBATIM, checksum)
from .writer import ContainerWriter

# What the rest of cpersist uses; tuning constants and the byte sources stay
# in their modules (.encode, .writer, .sources...).
__all__ = [
    "CHECKED_CLAIM", "DEFAULT_CHUNK_SIZE", "EDITED", "ENCODED", "FLAGS_AT", "FORMAT_MAJOR",
    "FORMAT_MINOR", "MAGIC", "MAX_CHUNK_SIZE", "READ_BUFFERS", "TRAILER", "VERBATIM",
    "ContainerReader", "ContainerWriter", "EncodedStream", "checksum", "encode_chunk",
]


def __getattr__(name):
    # The reading side is imported when first asked for: a dump uses none of
    # it, and its byte sources are a good part of a first dump's imports.
    if name == "ContainerReader":
        from .reader import ContainerReader

        return ContainerReader
    if name == "CHECKED_CLAIM":
        from .sections import CHECKED_CLAIM

        return CHECKED_CLAIM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
