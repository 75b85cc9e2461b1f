"""Reading a cpersist dump back into an object: the pickle stream of the root
section unpickled, each stored array read whole (or mapped) as the stream
asks for it, and what a walk of the stream says when something is wrong.
"""

import os
import pickle
import warnings

import numpy as np

from ..container import CHECKED_CLAIM, ENCODED, ContainerReader
from ..container.marking import mark_edited
from ..container.sections import claimed_buffer
from ..exceptions import CorruptFileError, DtypeLibraryError
from ..format import names
from .._runtime.parallel import run_claimed
from .array_blocks import allocate_block, blockable, plan_blocks, read_block
from .array_memory import allocate
from .arrays import parse_description
from .brief import brief
from .buffer_blocks import read_buffers
from .jax_arrays import ALIGNMENT as JAX_ALIGNMENT, jax_installed, stores_jax
from .unpickler import ArrayUnpickler, unpickle

def load_source(source, *, mmap_mode, restricted, allowed, prefixes, verify, n_threads, whole,
          views=False, limits=None, jax_as_numpy=False, own=False):
    """``views``: return raw arrays as views of ``source.read``'s bytes (a
    :class:`~cpersist.container.sources.MemorySource`, whose reads are views).
    ``own``: every array read into memory owns it (none views a block read
    for several, :mod:`.array_blocks`)."""
    can_map = _can_map(source, mmap_mode)
    source.will_read_all()
    # Where small arrays may be read in blocks, their record headers are
    # walked in the blocks' bytes once read, rather than now by a system call
    # per array: before any array is given out.
    reader = ContainerReader(source, whole=whole,
                             records_later=not (can_map or views or own or source.remote))
    name = reader.name
    if mmap_mode == "r+" and reader.growing:
        raise ValueError(f"{name}: mmap_mode='r+' is not available for a growing file: its "
                         f"committed bytes never change; replace an array with "
                         f"cpersist.open(path, 'a') instead")
    root = reader.sections[reader.root]
    if root.meta.get("kind") != "pickle":
        raise reader.error("damaged index: the root section is not a pickle stream")
    check_stream_start(reader, root, verify)
    loaded = {}
    mapped = []

    def load_array(index):
        nonlocal ahead
        if type(index) is not int or not 0 <= index < len(reader.sections) or index == reader.root:
            raise bad_array_reference(name, index)
        if index in loaded:
            return loaded[index]
        if index in ahead_of:
            if ahead is None:
                ahead = _read_ahead(reader, read_ahead, verify, n_threads, align, not own)
            arr = ahead.pop(index, None)  # None: a zero-size array, made below
            if isinstance(arr, BaseException):
                if isinstance(arr, CorruptFileError):
                    raise _naming_path(arr, pickled, index) from None
                raise arr
            if arr is not None:
                loaded[index] = arr
                return arr
        section = reader.sections[index]
        dtype, shape, order, nbytes = array_layout(reader, section)
        if nbytes == 0:
            # Nothing to read or map (zero-size array, or zero-size items:
            # a 0-byte memmap slice cannot be viewed as 'V0' items).
            arr, _ = _allocate(reader, index, dtype, shape, order, align)
        elif can_map and section.is_raw and section.contiguous:
            if not mapped:
                # torch has no read-only tensors, and a write to a read-only
                # map kills the process: a file storing tensors is mapped
                # privately for 'r' (as torch.load(mmap=True) does), its
                # numpy arrays still handed out read-only.
                private = mmap_mode == "r" and _stores_tensors(pickled)
                mapped.append(_memmap(source, reader.size, "c" if private else mmap_mode))
                mapped.append(private)
                if mmap_mode == "r+":
                    # Writes through the map change raw arrays behind their
                    # checksums: marked, readers do not report those
                    # sections as damaged, and cpersist.reseal computes
                    # their checksums again.
                    mark_edited(source, reader)
            arr = _mapped_array(mapped[0], section.offset, dtype, shape, order)
            if mapped[1]:
                arr.mode = "r"
                arr.flags.writeable = False
        elif views and section.is_raw and section.contiguous:
            arr = _view(reader, section, verify).view(dtype).reshape(shape, order=order)
        else:
            arr, view = _new_array(reader, section, dtype, shape, order, align)
            try:
                reader.read_into(section, view, verify=verify, n_threads=n_threads)
            except CorruptFileError as exc:
                raise _naming_path(exc, pickled, index) from None
        loaded[index] = arr
        return arr

    # The array sections read into new memory (compressed ones, and raw
    # ones neither mapped nor viewed), read and decoded side by side on the
    # pool when the first is asked for: a checkpoint's tensors are each a
    # section of one or a few chunks, which one after another would leave
    # threads idle.
    in_place, root_index = can_map or views, reader.root
    read_ahead = [i for i, section in enumerate(reader.sections)
                  if section.meta.get("kind") == "array" and i != root_index
                  and (section.codec is not None or not (in_place and section.contiguous))]
    if len(read_ahead) < 2 or not source.concurrent:
        read_ahead = []
        reader.check_records()  # no block to walk them in
    ahead_of, ahead = frozenset(read_ahead), None

    buffers = read_buffers(reader, verify, n_threads)  # the blocks, never mapped
    # Read right before the try that closes it: its buffer may be one kept
    # for the next load.
    pickled = reader.open_section(root, verify=verify, n_threads=n_threads,
                                  exact=restricted)
    try:
        # jax uses a CPU buffer in place only when it is aligned: the arrays
        # of a file of JAX arrays are, else each would be copied once more.
        # A file of no array section (its arrays, if any, inside the stream)
        # has nothing to align, nor has one loaded where jax is not
        # installed (its JAX arrays cannot be made): its stream, which may
        # hold a model's small arrays, is not scanned.
        align = (JAX_ALIGNMENT if not jax_as_numpy and len(reader.sections) > 1
                 and jax_installed() and stores_jax(pickled) else 0)
        unpickler = ArrayUnpickler(pickled, load_array, restricted, allowed, prefixes,
                                   source=name, limits=limits, jax_as_numpy=jax_as_numpy,
                                   buffers=buffers)
    except BaseException:
        pickled.close()
        raise
    obj = unpickle(unpickler, pickled, name)
    reader.check_records()  # if no array read ahead was asked for
    if can_map and (reader.tiny or any(section.codec is not None
                                       for section in reader.sections)):
        # Whether or not any array had a section of its own (small ones are
        # kept in a compressed pickle stream), nothing of such a file is
        # mapped. Warned once, here rather than in load_array: the
        # unpickler's call depth varies, this frame's is fixed (load -> load_source).
        warnings.warn(
            f"cpersist: {name} holds compressed arrays, which cannot be "
            f"memory-mapped; they are loaded into memory",
            UserWarning, stacklevel=3,
        )
    return obj


def bad_array_reference(name, index):
    """The error for a stream that asks for an array by anything but the
    index of an array section of the file ``name``."""
    return CorruptFileError(f"{name}: the pickle stream refers to a bad array section "
                            f"{brief(index)}")


def _can_map(source, mmap_mode):
    """Whether the raw arrays of ``source`` are mapped for ``mmap_mode``
    (None: not asked). A source that cannot be mapped says why, in a
    ``UserWarning`` (one the caller made says nothing).

    Raises
    ------
    ValueError
        For ``'r+'`` on a file object open read-only.
    """
    if mmap_mode is None:
        return False
    if not source.can_map:
        if source.not_mapped is not None:
            # For the user's call: _can_map, load_source, cpersist.load.
            warnings.warn(f"cpersist: cannot memory-map arrays from {source.name}: "
                          f"{source.not_mapped}; loading them into memory", UserWarning,
                          stacklevel=4)
        return False
    if mmap_mode == "r+" and not source.writable:
        raise ValueError(f"mmap_mode='r+' maps {source.name} for writing, but the file object "
                         f"is open read-only; open it with 'r+b', or use mmap_mode='r' or 'c'")
    return True


def _read_ahead(reader, indices, verify, n_threads, align=0, in_blocks=True):
    """``{index: array}`` of the array sections ``indices`` (compressed, or
    raw and copied into memory), each read, checked and decoded by one of
    ``n_threads`` threads, the sections side by side (a checkpoint's
    tensors are each a section of one or a few chunks, which read one after
    another would leave threads idle); small raw ones many at a time, in
    blocks (:mod:`.array_blocks`) unless ``in_blocks`` is false, the
    dump's record headers then walked in the blocks' bytes
    (:meth:`~cpersist.container.ContainerReader.check_records`). A
    section that fails maps to its exception, raised only if the pickle
    stream asks for it, as it would be read one by one. Zero-size arrays
    are left out: the caller makes them without reading.

    Every array is allocated here, on the calling thread, before any is
    read. Allocated on a worker, it would come from that thread's malloc
    arena, which holds little else: once the arrays are freed, that arena
    gives their memory back to the kernel, and the next load of the same
    checkpoint faults all its pages in again (each zeroed by the kernel);
    memory freed in the calling thread's arena is reused instead.
    """
    done = {}
    arrays, reads, small = [], [], []
    in_blocks = in_blocks and not align and not reader.source.remote
    for index in indices:
        section = reader.sections[index]
        try:
            dtype, shape, order, nbytes = array_layout(reader, section)
            if not nbytes:
                continue
            if in_blocks and blockable(section, nbytes):
                small.append((index, section, dtype, shape, order))
                continue
            arr, view = _new_array(reader, section, dtype, shape, order, align)
            arrays.append((index, arr))
            reads.append((section, view))
        except Exception as exc:  # noqa: BLE001 - raised where the stream asks for it
            done[index] = exc
    blocks = []
    for start, stop, run in plan_blocks(small):
        block, views = allocate_block(start, stop, run)
        done.update(views)
        blocks.append((start, block, run))
    failed, whole = {}, [False] * len(blocks)

    def task(claims):
        for k in claims:
            if k < len(blocks):
                failures, whole[k] = read_block(reader, *blocks[k], verify)
                done.update(failures)
                continue
            section, out = reads[k - len(blocks)]
            try:
                reader.read_into(section, out, verify=verify, n_threads=1)
            except Exception as exc:  # noqa: BLE001 - raised where the stream asks for it
                failed[k - len(blocks)] = exc

    run_claimed(task, len(blocks) + len(reads), n_threads)
    reader.check_records([block[:2] for block, read in zip(blocks, whole) if read])
    for k, (index, arr) in enumerate(arrays):
        done[index] = failed.get(k, arr)
    return done


def _naming_path(exc, pickled, index):
    """``exc``, naming where the array of section ``index`` sits in the
    object (a tensor's path for a storage); the stream is walked only now,
    when something is wrong."""
    from ..stream.paths import scan_arrays

    path = scan_arrays(pickled.getbuffer())["paths"].get(index)
    if path is None:
        return exc
    return type(exc)(f"{exc} (the array at {path})")


def _stores_tensors(pickled):
    """Whether the pickle stream may rebuild torch tensors (it names the
    format's ``rebuild_tensor``; a string holding that name gives a false
    positive, which only maps the file privately)."""
    return pickled.find(names.REBUILD_TENSOR.rpartition(".")[2].encode()) >= 0


def _view(reader, section, verify):
    """A raw section as a uint8 array viewing the source's own bytes
    (read-only when they are), its chunks' checksums checked in place."""
    if verify:
        reader.verify_section(section)
    data = reader.source.read(section.offset, section.raw_size)
    return np.frombuffer(data, dtype=np.uint8)


def _memmap(source, size, mode):
    """The ``size`` bytes of the dump in ``source`` as a :class:`numpy.memmap`
    of bytes, mapped by the source from the descriptor it reads (as
    ``numpy.memmap`` would from a file object)."""
    mm, start = source.map(0, size, mode)
    arr = np.ndarray.__new__(np.memmap, (size,), dtype=np.uint8, buffer=mm,
                             offset=start)
    arr._mmap = mm
    arr.offset = source.base
    arr.mode = mode
    path = getattr(source, "path", None)
    arr.filename = os.path.abspath(path) if path is not None else None
    return arr


def _mapped_array(mapped, start, dtype, shape, order):
    """The array of ``mapped`` (:func:`_memmap`) from byte ``start``, with its
    map, file name, offset and mode as a slice viewed and reshaped has them,
    for half the cost (numpy makes each of those three memmaps in Python)."""
    arr = np.ndarray.__new__(np.memmap, shape, dtype=dtype, buffer=mapped, offset=start,
                             order=order)
    arr._mmap, arr.filename = mapped._mmap, mapped.filename
    arr.offset, arr.mode = mapped.offset, mapped.mode
    return arr


def read_stream(reader, root, *, verify=True, n_threads=1):
    """The pickle stream of ``root`` as writable bytes
    (:meth:`~cpersist.container.ContainerReader.read_bytes`).

    Above :data:`~cpersist.container.CHECKED_CLAIM` bytes, the start of its
    first chunk is decoded and checked first: every stream cpersist writes
    (protocol 2 to 5) opens with a ``PROTO`` opcode, and a large section
    that does not (a bomb of zeros) is refused before the rest of it is
    decoded.
    """
    check_stream_start(reader, root, verify)
    return reader.read_bytes(root, verify=verify, n_threads=n_threads)


def check_stream_start(reader, root, verify=True):
    """Refuse a large encoded pickle stream whose first chunk does not start
    with a ``PROTO`` opcode, decoding no more of it than its start (see
    :func:`read_stream`)."""
    if root.raw_size > CHECKED_CLAIM and root.codec is not None and root.chunks[0].flag == ENCODED:
        reader.check_claimed_sizes(root)
        chunk = root.chunks[0]
        head = bytearray(min(2, chunk.raw_length))
        whole = claimed_buffer(chunk.raw_length, reader, root)
        buffer = bytearray(chunk.length)
        reader.read_chunk_into(root, 0, memoryview(head), buffer, verify=verify, skip=0,
                               whole=memoryview(whole))
        del whole, buffer
        if len(head) < 2 or head[0] != pickle.PROTO[0] or not 2 <= head[1] <= 5:
            raise reader.error(f"damaged pickle stream (it starts with {bytes(head)!r}, "
                               f"not a PROTO opcode of protocol 2 to 5)")


def array_layout(reader, section, resolve=True):
    """``(dtype, shape, order, nbytes)`` of the array in ``section``; with
    ``resolve=False`` an ml_dtypes type is given by its name and ml_dtypes
    is not imported (see :func:`~cpersist.pickling.arrays.parse_description`).

    Raises
    ------
    CorruptFileError
        If the description is malformed or does not match the bytes stored.
    DtypeLibraryError
        If the array's type is one of ml_dtypes, which cannot provide it.
    """
    try:
        dtype, shape, order, nbytes = parse_description(section.meta, resolve)
    except DtypeLibraryError as exc:
        raise DtypeLibraryError(f"{reader.name}: {exc}") from None
    except Exception as exc:
        raise reader.error(f"section {section.index}: bad array description ({exc})") from None
    if nbytes != section.raw_size:
        raise reader.error(
            f"section {section.index} holds {section.raw_size} bytes but its array "
            f"{dtype} {shape} needs {nbytes}"
        )
    return dtype, shape, order, nbytes


def _new_array(reader, section, dtype, shape, order, align=0):
    """``(array, byte view)`` to read ``section`` into, placed as its source's ``page_phase`` asks.

    Allocated before the sizes stated in its chunks' own headers are read:
    uninitialised, its pages are backed only as chunks are written into
    them, and each chunk's codec compares the size its header states with
    the index's before writing anything
    (:meth:`~cpersist.codecs.abc.Codec.decode_into`), so a forged claim
    costs no more memory than the chunks that do decode to it. Reading every
    header first would hold up the first decode by a read of each, a wait
    for the disk each from a file not in the page cache. A claim that cannot
    be allocated at all is compared with those headers then
    (:meth:`~cpersist.container.ContainerReader.check_claimed_sizes`), so
    that a forged size is reported as one."""
    phase = reader.source.page_phase(section.offset, section.raw_size) if section.is_raw else None
    try:
        return _allocate(reader, section.index, dtype, shape, order, align, phase)
    except CorruptFileError as exc:
        cannot = exc
    reader.check_claimed_sizes(section)
    raise cannot


def _allocate(reader, index, dtype, shape, order, align=0, phase=None):
    try:
        return allocate(dtype, shape, order, align, phase)
    except (MemoryError, ValueError) as exc:
        raise reader.error(
            f"section {index} claims an array {dtype} {shape} that cannot be "
            f"allocated ({type(exc).__name__})"
        ) from None
