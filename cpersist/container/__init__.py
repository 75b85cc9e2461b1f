"""The cpersist container: numbered sections of bytes, each split into chunks
kept verbatim or encoded with a codec, and a JSON index that describes them.

It knows nothing of numpy objects or pickling: what a section holds is said
by an opaque ``meta`` dict that the caller provides. One module per layer:
:mod:`.layout` (the byte layout: constants, index parsing and checks),
:mod:`.framing` (where a dump ends: its records, walked or copied from a
stream), :mod:`.encode` (whether and how a chunk is encoded), :mod:`.writer`
(writing a file sequentially, so a pipe or socket can be the target),
:mod:`.reader` (reading sections back through a byte source),
:mod:`.sources` (the byte sources) and :mod:`.buffers` (reused read buffers).
"""

from .buffers import READ_BUFFERS, BufferPool
from .encode import (BATCH_CHUNKS, MAX_BATCH_CHUNKS, PROBE_SIZE, SAVING_NEEDED_LEVELS_1_TO_5,
                     SAVING_NEEDED_LEVELS_6_TO_9, EncodedStream, encode_chunk)
from .layout import (ALIGN, DEFAULT_CHUNK_SIZE, EDITED, END_MAGIC, ENCODED, FLAGS_AT, FORMAT_MAJOR,
                     FORMAT_MINOR, HEADER, MAGIC, MAX_CHUNK_SIZE, RECORD_SIZE, TRAILER,
                     VERBATIM, Chunk, checksum)
from .index import Section
from .reader import TAIL_READ, ContainerReader
from .sections import CHECKED_CLAIM
from .sources import ByteSource, source_for
from .writer import FALLOCATE_MIN, ContainerWriter

__all__ = [
    "ALIGN", "BATCH_CHUNKS", "CHECKED_CLAIM", "DEFAULT_CHUNK_SIZE", "EDITED", "END_MAGIC", "ENCODED",
    "FALLOCATE_MIN", "FLAGS_AT", "FORMAT_MAJOR", "FORMAT_MINOR", "HEADER", "MAGIC",
    "RECORD_SIZE", "MAX_BATCH_CHUNKS", "MAX_CHUNK_SIZE",
    "PROBE_SIZE", "READ_BUFFERS", "SAVING_NEEDED_LEVELS_1_TO_5", "SAVING_NEEDED_LEVELS_6_TO_9",
    "TAIL_READ", "TRAILER", "VERBATIM", "BufferPool", "ByteSource", "Chunk", "ContainerReader",
    "ContainerWriter", "EncodedStream", "Section", "checksum", "encode_chunk", "source_for",
]
