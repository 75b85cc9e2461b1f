"""``dump``'s writer: the object pickled once, into memory while its dump may
still be small, into sections from the moment it cannot be.

Most objects a program dumps are small and hold no array that needs a
section of its own: a result cached by ``joblib.Memory``, a message, a small
model's settings. Their dump is made in memory and handed to the target
whole (one system call for a path): a compact dump
(:mod:`cpersist.container.compact`: the pickle stream behind a fixed
header, no JSON index), or, where compressing the stream saves more than an
index costs or the stream holds arrays, a dump of one compressed section.

The pickler writes its stream into memory until an array needs a section
(every array in a raw dump, those of :func:`.write.inline_below_for` bytes
or more in a compressed one) or the stream passes :data:`SMALL_STREAM`
bytes. From that moment the dump is a sectioned one
(:class:`.write.SectionWriter` on the target's file): the stream so far
goes to it, and pickling goes on where it was; nothing is pickled twice.
"""

import io
import threading

from .._runtime.threads import default_n_threads
from ..container import VERBATIM, ContainerWriter, encode_chunk
from ..container.compact import compact_dump
from ..storage.targets import open_dump_target
from .array_pickler import ArrayPickler
from .unpicklable import PICKLING_ERRORS, unpicklable_error
from .write import SectionWriter, finish_dump, inline_below_for, write_sections
from .write_max import write_smallest

#: Largest pickle stream written as a whole dump made in memory: past it,
#: the general writer's index costs little beside the stream.
SMALL_STREAM = 64 << 10
#: About what the JSON index and section records of a one-section dump add
#: to a compact dump's fixed bytes: a compressed stream is written as a
#: one-section dump only when compressing saves more than this.
INDEX_BYTES = 320
#: After a longer stream, a kept pickler's memo table is replaced by a new
#: one rather than cleared (here and in :func:`cpersist.dumps`): a table
#: keeps the size the largest object needed, and clearing walks all of it,
#: at every later call (after a dict of 100 keys, as long as pickling a small
#: object takes).
RESET_MEMO_ABOVE = 256


def dump_to(obj, target, codec, protocol, chunk_size, n_threads, *, growing=False,
            background=False):
    """Write the dump of ``obj`` to ``target`` (a
    :class:`cpersist.storage.targets.DumpTarget`) with :func:`write_to`;
    return the names of the files written. The arguments are checked.
    With ``background``, a snapshot of ``obj`` is written on a thread of
    its own (:func:`.background.start`), and this returns its future.
    """
    if background:
        # Imported here: a dump in the foreground needs no thread of its own.
        from .background import start

        # compress="max" tries its codecs on arrays before writing sections:
        # its snapshot copies every array before the dump starts.
        return start(obj, write_to, target, codec, protocol, chunk_size, n_threads,
                     deferred=codec is None or codec.codec_id != "max")
    return write_to(obj, target, codec, protocol, chunk_size, n_threads, growing)


def write_to(obj, target, codec, protocol, chunk_size, n_threads, growing=False):
    """Open ``target`` (a :class:`cpersist.storage.targets.DumpTarget`:
    :func:`cpersist.storage.targets.open_dump_target`) and write the dump
    of ``obj`` to it: with :func:`write_dump`, or as a growing object file
    (:func:`write_growing`); return the names of the files written.
    ``n_threads`` None: all available CPUs.

    Raises
    ------
    UnpicklableError
        If ``obj`` holds something that cannot be pickled: the message
        names where it sits. The target is left as it was.
    """
    out = open_dump_target(target)
    try:
        with out:
            if not growing:
                write_dump(obj, out, codec, protocol, chunk_size, n_threads)
            else:
                write_growing(obj, out, codec, protocol, chunk_size,
                              n_threads or default_n_threads())
    except PICKLING_ERRORS as exc:
        error = unpicklable_error(obj, protocol, exc)
        if error is None:
            raise
        raise error from exc
    return out.names


def write_dump(obj, target, codec, protocol, chunk_size, n_threads):
    """Write the dump of ``obj`` to ``target`` (see
    :mod:`cpersist.container.targets`), its arguments checked;
    ``n_threads`` None: all available CPUs."""
    if codec is not None and codec.codec_id == "max":
        write_smallest(obj, target, codec, protocol, chunk_size,
                       n_threads or default_n_threads())
        return
    key = protocol, inline_below_for(codec, chunk_size)
    pickling = _kept_pickling(key)
    pickling.start(target, codec, protocol, chunk_size, n_threads)
    try:
        pickling.pickler.dump(obj)
    except BaseException:
        # Not reused: a pickler stopped midway may hold state of its own.
        _drop(key, pickling)
        _let_go(pickling)
        raise
    sections = pickling.sections
    if sections is not None:
        # Not reused either: it holds the sections' numbers and, maybe, a
        # long stream's buffers (see _Pickling.reset).
        _drop(key, pickling)
        sections.finish(obj, pickling.pickler.placed)
        _let_go(pickling)
        return
    stream = pickling.memory.getvalue()
    inlined = pickling.pickler.inlined
    pickling.reset(len(stream))
    target.write_whole(whole_dump(stream, inlined, target.name, codec, protocol))


def write_growing(obj, target, codec, protocol, chunk_size, n_threads):
    """Write ``obj`` to the new file of ``target`` as a growing object file
    (format 2.4): its first commit, every array a section of its own (none
    kept inside the pickle stream), so that any can grow."""
    # Imported here: other dumps need none of the growing files' format.
    from ..container.commits import commit_frame, pending_frame
    from ..container.frames import OBJECT_FILE_START, OBJECT_FRAMES_AT

    file = target.file()
    head, payload = pending_frame(OBJECT_FRAMES_AT)
    file.write(OBJECT_FILE_START + head)  # the file's start, then the frame's
    if codec is not None:
        # As the changes that follow store arrays (array_codec in
        # growfile.writer): also trying the byte shuffle alone.
        codec = codec.trying_shuffle_alone()
    write_sections(obj, file, target.name, codec, protocol, chunk_size, n_threads,
                   inline_below=0, payload_at=payload)
    commit_frame(file, OBJECT_FRAMES_AT, payload, file.tell())


def whole_dump(stream, inlined, name, codec, protocol):
    """The bytes of the dump of a pickle stream with ``inlined`` arrays inside."""
    if codec is not None:
        stored, digest, flag = encode_chunk(codec, stream)
        # Arrays kept in a compressed stream are written with an index too:
        # the file says it is compressed, so a load asking to map them says
        # they cannot be.
        if inlined or (flag != VERBATIM and len(stored) + INDEX_BYTES < len(stream)):
            out = io.BytesIO()
            finish_dump(ContainerWriter(out, 1, name), [(stored, len(stream), digest, flag)],
                        codec, protocol)
            return out.getvalue()
    return compact_dump(stream)


def forget_objects(pickler, stream_length):
    """Empty ``pickler``'s memo after a stream of ``stream_length`` bytes."""
    if stream_length > RESET_MEMO_ABOVE:
        pickler.memo = {}
    else:
        pickler.clear_memo()


class _Pickling:
    """A thread's pickler, kept between dumps (making one costs more than
    pickling a small object does), and the dump it is writing.

    It is the pickler's file: the stream goes to :attr:`memory` until the
    dump turns sectioned, then to its :attr:`sections`' stream.
    """

    __slots__ = ("pickler", "memory", "sections", "blocks", "busy", "_target", "_codec", "_protocol",
                 "_chunk_size", "_n_threads")

    def __init__(self, protocol, inline_below):
        self.memory = io.BytesIO()
        self.sections = self.blocks = None
        self.busy = False
        # At protocol 5 small arrays' buffers may go to buffer blocks once
        # the dump is sectioned (a compact one keeps them in its stream).
        self.pickler = ArrayPickler(self, protocol, self._store, inline_below,
                                    buffer_callback=self._buffer if protocol >= 5 else None)

    def start(self, target, codec, protocol, chunk_size, n_threads):
        self.busy = True
        self._target = target
        self._codec = codec
        self._protocol = protocol
        self._chunk_size = chunk_size
        self._n_threads = n_threads

    def write(self, data):
        sections = self.sections
        if sections is None:
            memory = self.memory
            if memory.tell() + memoryview(data).nbytes <= SMALL_STREAM:
                return memory.write(data)
            sections = self._to_sections(stream_in_file=True)
        return sections.stream.write(data)

    def _store(self, arr, favour_speed=False):
        sections = self.sections
        if sections is None:
            sections = self._to_sections()
        return sections.store(arr, favour_speed)

    def _buffer(self, buffer):
        blocks = self.blocks
        return blocks is None or blocks.take(buffer)

    def _to_sections(self, stream_in_file=False):
        """Turn the dump into a sectioned one on the target's file; with
        ``stream_in_file``, no array section yet, a raw stream is written
        straight into the file (:class:`.write.SectionWriter`)."""
        target = self._target
        sections = self.sections = SectionWriter(
            target.file(), target.name, self._codec, self._protocol, self._chunk_size,
            self._n_threads or default_n_threads(), stream_in_file=stream_in_file,
            blocks=self._protocol >= 5)
        self.blocks = sections.blocks
        if self.memory.tell():
            sections.stream.write(self.memory.getvalue())
        self.memory = None
        self.pickler.store = sections.store  # the next arrays straight there
        return sections

    def reset(self, stream_length):
        """Ready for the next dump, after one written whole from memory."""
        self.memory.seek(0)
        self.memory.truncate()
        pickler = self.pickler
        forget_objects(pickler, stream_length)
        pickler.forget()
        pickler.inlined = 0
        pickler.saw_fortran = False
        self._target = None
        self.busy = False


_kept = threading.local()


def _kept_pickling(key):
    """This thread's kept :class:`_Pickling` for ``key`` (protocol,
    inline_below), made if there is none; a new one, not kept, while that
    one is in use (an object whose pickling dumps another)."""
    picklers = getattr(_kept, "picklers", None)
    if picklers is None:
        picklers = _kept.picklers = {}
    kept = picklers.get(key)
    if kept is None:
        kept = picklers[key] = _Pickling(*key)
    elif kept.busy:
        return _Pickling(*key)
    return kept


def _drop(key, kept):
    """Stop keeping ``kept``, if it is the one kept for ``key``."""
    if _kept.picklers.get(key) is kept:
        del _kept.picklers[key]


def _let_go(pickling):
    """Release the objects a :class:`_Pickling` no longer kept has pickled.

    Its pickler's memo and tensor storages reference them, and the pickler
    and its file (the _Pickling) reference each other: without this, the
    dumped object would live until the cycle collector runs, and a
    background dump's snapshot memory could not serve the next one."""
    pickling.pickler.clear_memo()
    pickling.pickler.forget()
