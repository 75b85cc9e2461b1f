"""``inspect``, ``verify`` and ``reseal``: look into a cpersist file without
unpickling it.

None of them calls anything outside a restricted load's allowlist:
:func:`inspect` reads the index and walks the pickle stream's opcodes as the
C unpickler reads them (:mod:`cpersist.stream.opcodes`), tracking strings
through the stack and the memo to find the globals ``STACK_GLOBAL`` would
resolve; :func:`verify` checks every checksum and decodes every chunk;
:func:`reseal` verifies a file whose raw arrays were edited through a
writable map and stores their new checksums. :func:`inspect` and
:func:`verify` also tell whether a restricted load accepts the file, by a
dry run of its machine over stand-ins of the stored arrays.
"""

from .._args import check_limits, check_storage_options
from ..container.files import display_name, is_path
from ..storage.fsspec.urls import is_url
from ..storage.open import open_source
from ..pickling.arrays import dtype_label
from ..pickling.buffer_blocks import BLOCK_KIND, block_sections
from ..pickling.read import array_layout, check_stream_start, read_stream
from ..container.foreign import read_container
from .verdict import restricted_verdict
# The global through which a pickle stream fetches a stored array is listed
# under "arrays", not "globals".
from ..container import ContainerReader
from ..container.frames import GrowingFileFound
from ..container.reseal import reseal as _reseal_dump
from ..container.sources import LocalFileSource
from ..exceptions import CorruptFileError
from ..format.names import STORED_ARRAY
from ..stream.opcodes import walk
from ..stream.paths import arrays_of


def _root(reader):
    root = reader.sections[reader.root]
    if root.meta.get("kind") != "pickle":
        raise reader.error("damaged index: the root section is not a pickle stream")
    return root


def _codec_fields(section):
    if section.codec is None:
        return None, None
    config = section.codec.get_config()
    return config.get("id"), config.get("level")


def scan_pickle(data, name="<pickle>", limits=None):
    """Globals and protocol of a pickle stream, found without executing it.

    Parameters
    ----------
    data : bytes-like
        A pickle stream.
    name : str
        Named in error messages.

    Returns
    -------
    dict
        ``"globals"``: sorted ``"module.name"`` strings of every ``GLOBAL``,
        ``INST`` and ``STACK_GLOBAL`` (whose two strings are tracked through
        the stack and the memo); ``"unresolved_globals"``: how many
        ``STACK_GLOBAL`` took values computed at load time (a stream cpersist
        writes has none; a restricted load still checks them when resolving);
        ``"extension_codes"``: copyreg codes of ``EXT*`` opcodes;
        ``"protocol"``: the stream's ``PROTO`` (0 when absent).

    Raises
    ------
    CorruptFileError
        If the stream is not a well-formed pickle.
    """
    return _globals_of(walk(data, limits, name), name)


def _globals_of(walked, name):
    """:func:`scan_pickle`'s result from a :class:`cpersist.stream.opcodes.Walk`."""
    if walked.error is not None:
        raise CorruptFileError(f"{name}: damaged pickle stream ({walked.error})")
    return {
        "globals": sorted(walked.globals - {STORED_ARRAY}),
        "unresolved_globals": walked.unresolved,
        "extension_codes": sorted(set(walked.extension_codes)),
        "protocol": walked.protocol,
    }


def inspect(source, *, storage_options=None, limits=None):
    """Describe a cpersist file without unpickling anything.

    Reads the index and the pickle stream (checking their checksums) and
    lists what loading the file would need, so that you can decide what to
    pass as ``trusted`` to :func:`cpersist.load`. Nothing the file names is
    imported or called, and array data is not read.

    Parameters
    ----------
    source : str, os.PathLike or binary file object
        A path, a file object or a URL (see :doc:`/cloud`).
    storage_options : dict, optional
        For a URL: passed to fsspec (credentials, endpoint, ...).
    limits : cpersist.Limits or dict, optional
        What walking the pickle stream may cost (opcodes and objects, see
        :class:`~cpersist.Limits`); beyond them
        :class:`~cpersist.LimitExceededError` is raised.

    Returns
    -------
    dict
        ``"format"``: the format version, e.g. ``"1.0"``;
        ``"info"``: what the writer recorded (``writer``, ``protocol``);
        ``"file_bytes"``: size of the cpersist data;
        ``"arrays"``: one dict per stored array, in file order, with
        ``section``, ``dtype`` (``dtype.str``, the descr for structured
        dtypes, the name of an ml_dtypes type such as ``"bfloat16"``),
        ``shape`` (tuple), ``order`` (``"C"``/``"F"``), ``codec`` (None for
        raw), ``level``, ``stored_bytes``, ``raw_bytes``;
        ``"pickle"``: ``{"stored_bytes", "raw_bytes", "protocol"}`` of the
        pickle stream;
        ``"globals"``: sorted ``"module.name"`` strings the pickle stream
        resolves (array references excluded);
        ``"unresolved_globals"`` and ``"extension_codes"``: see
        :func:`scan_pickle`;
        ``"inline_arrays"``: one dict per small array a compressed file
        keeps inside its pickle stream, with ``path``, ``dtype``, ``shape``
        (list, or None if unknown), ``order`` and ``raw_bytes`` (None if
        unknown);
        ``"tensors"``: one dict per torch tensor stored through its storage,
        with ``path``, ``section`` (its storage's), ``dtype`` (torch's
        name), ``offset``, ``shape``, ``stride``, ``requires_grad``,
        ``kind`` (``"tensor"`` or ``"parameter"``) and ``device`` (where it
        was when dumped; None for the CPU);
        ``"torch_pickled"``: ``path`` and ``global`` of each object torch
        pickled itself (sparse, quantized, nested tensors, tensor
        subclasses), which only a trusted load rebuilds;
        ``"restricted_load"``: ``{"accepted", "refusal"}``, whether
        ``cpersist.load(source, trusted=False)`` accepts the file (see
        :func:`restricted_verdict`), and if not the error it would raise.

        Each entry of ``"arrays"`` and ``"inline_arrays"`` has a ``"path"``:
        where the array sits in the object, as Python would reach it from
        the object named ``obj``, e.g. ``"obj['w']"``,
        ``"obj['layers'][1]['b']"`` or ``"obj.coef_"`` (``"?"`` when the
        stream reaches it through something the walk does not model, such
        as a custom ``__reduce__`` with non-dict state). An array or tensor
        the object holds at several places (tied weights) is listed once, at
        the first; its entry has an ``"also"`` list of the other paths.

        For a record log (:doc:`/growing`), read through its path:
        ``"layout"`` is ``"record log"`` (``"dumps"`` for a path holding
        several dumps one after another, each a record; ``"format"`` is the
        first's), with ``"records"``,
        ``"records_with_arrays"``, ``"committed_bytes"`` and ``"torn_bytes"``
        (after the last complete record); ``"globals"`` and
        ``"restricted_load"`` are those of all records together (a refusal
        names the record), and each of ``"arrays"`` has its ``"record"``.

    Raises
    ------
    CorruptFileError
        If the file is not a cpersist file or its index or pickle stream is
        damaged.

    Examples
    --------
    >>> info = cpersist.inspect("model.cp")              # doctest: +SKIP
    >>> info["globals"]                                   # doctest: +SKIP
    ['sklearn.ensemble._forest.RandomForestClassifier', ...]
    """
    limits = check_limits(limits)
    check_storage_options(storage_options, source)
    try:
        return _inspect(source, storage_options, limits)
    except GrowingFileFound as exc:
        return _log_tool("inspect_log", inspect, source, exc, limits)


def _inspect(source, storage_options, limits):
    with open_source(source, storage_options=storage_options) as opened:
        reader = read_container(opened, whole=is_path(source))
        name = reader.name
        root = _root(reader)
        arrays = []
        blocks = block_sections(reader)
        for section in reader.sections:
            if section.index == reader.root or section.meta.get("kind") == BLOCK_KIND:
                continue
            dtype, shape, order, _ = array_layout(reader, section, resolve=False)
            codec, level = _codec_fields(section)
            arrays.append({
                "section": section.index,
                "dtype": dtype_label(dtype),
                "shape": shape,
                "order": order,
                "codec": codec,
                "level": level,
                "stored_bytes": section.stored_size,
                "raw_bytes": section.raw_size,
            })
        # One walk of the stream gives both the globals and the arrays' paths.
        stream = read_stream(reader, root)
        walked = walk(stream, limits, name)
        scan = _globals_of(walked, name)
        found = arrays_of(walked)
        for entry in arrays:
            entry["path"] = found["paths"].get(entry["section"], "?")
            if entry["section"] in found["also"]:
                entry["also"] = found["also"][entry["section"]]
        report = {
            "format": f"{reader.major}.{reader.minor}",
            "layout": "tiny" if reader.tiny else "compact" if reader.compact else "indexed",
            "info": dict(reader.info) if isinstance(reader.info, dict) else {},
            "file_bytes": reader.size,
            "arrays": arrays,
            "pickle": {
                # A tiny dump stores its stream compressed in the whole file.
                "stored_bytes": reader.size if reader.tiny else root.stored_size,
                "raw_bytes": root.raw_size,
                "protocol": scan["protocol"],
            },
            "globals": scan["globals"],
            "unresolved_globals": scan["unresolved_globals"],
            "extension_codes": scan["extension_codes"],
            "inline_arrays": found["inline"],
            # The small arrays' bytes out of the stream (format 2.5).
            "buffer_blocks": {"count": len(blocks),
                              "buffers": sum(len(sizes) for _, sizes, _ in blocks),
                              "stored_bytes": sum(b[0].stored_size for b in blocks),
                              "raw_bytes": sum(b[0].raw_size for b in blocks)},
            "tensors": found["tensors"],
            "torch_pickled": found["torch_pickled"],
            "restricted_load": restricted_verdict(reader, stream, limits),
        }
        if reader.growing:
            from ..growfile.compact import reclaimable_bytes

            report.update({"layout": "growing", "file_bytes": reader.available,
                           "committed_bytes": reader.commit_end, "torn_bytes": reader.torn,
                           "reclaimable_bytes": reclaimable_bytes(reader)})
        return report


def verify(source, *, storage_options=None, limits=None):
    """Check every checksum of a cpersist file and that every chunk decodes.

    :func:`cpersist.load` checks what it reads, but memory-mapped arrays are
    not read at load time; this reads everything, one chunk at a time (memory
    stays at about one chunk), without unpickling anything.

    Parameters
    ----------
    source : str, os.PathLike or binary file object
        A path, a file object or a URL (see :doc:`/cloud`).
    storage_options : dict, optional
        For a URL: passed to fsspec (credentials, endpoint, ...).
    limits : cpersist.Limits or dict, optional
        What walking the pickle stream may cost (opcodes and objects, see
        :class:`~cpersist.Limits`); beyond them
        :class:`~cpersist.LimitExceededError` is raised.

    A file mapped with ``mmap_mode='r+'`` carries an edited flag: its raw
    arrays may have changed behind their checksums. Those whose checksums
    no longer match are not reported as damaged but listed under
    ``"unchecked"``; everything else is checked as usual, and
    :func:`reseal` stores their new checksums.

    Returns
    -------
    dict
        ``{"sections", "chunks", "stored_bytes", "raw_bytes"}`` totals of
        what was read; ``"unchecked"``: the numbers of the raw array
        sections changed through a writable map, which cannot be checked
        (an empty list for a file never mapped for writing);
        ``"restricted_load"``: whether a restricted load accepts the file,
        as :func:`inspect` gives it. For a record log, or a path holding
        several dumps, every record is checked, the totals are of all,
        ``"unchecked"`` holds ``(record, section)`` pairs, and ``"layout"``
        (``"record log"`` or ``"dumps"``), ``"records"`` and
        ``"torn_bytes"`` are added: a torn tail is reported, not an error.

    Raises
    ------
    CorruptFileError
        Naming the file and the damage, at the first problem found.

    Examples
    --------
    >>> cpersist.verify("model.cp")                      # doctest: +SKIP
    {'sections': 3, 'chunks': 5, 'stored_bytes': 1234, 'raw_bytes': 5678, 'unchecked': []}
    """
    limits = check_limits(limits)
    check_storage_options(storage_options, source)
    try:
        with open_source(source, storage_options=storage_options) as opened:
            opened.will_read_all()
            return _verify(read_container(opened, whole=is_path(source)), limits)
    except GrowingFileFound as exc:
        return _log_tool("verify_log", verify, source, exc, limits)


def _log_tool(name, tool, source, error, limits):
    """``tool`` (inspect or verify) of a record log, record by record."""
    from ..recordlog import tools

    return getattr(tools, name)(source, tool, error, limits=limits)


def _verify(reader, limits=None):
    root = _root(reader)
    check_stream_start(reader, root)  # before decoding a bomb that is no pickle stream
    chunks = stored_bytes = raw_bytes = 0
    unchecked = []
    block_sections(reader)  # each block's sizes fit its section
    for section in reader.sections:
        if section.index != reader.root and section.meta.get("kind") != BLOCK_KIND:
            array_layout(reader, section, resolve=False)
        if reader.unchecked(section) and not reader.matches(section):
            unchecked.append(section.index)
        else:
            reader.verify_section(section)
        chunks += len(section.chunks)
        stored_bytes += section.stored_size
        raw_bytes += section.raw_size
    stream = read_stream(reader, root)
    scan_pickle(stream, reader.name, limits)  # a well-formed opcode stream
    return {"sections": len(reader.sections), "chunks": chunks,
            "stored_bytes": stored_bytes, "raw_bytes": raw_bytes, "unchecked": unchecked,
            "restricted_load": restricted_verdict(reader, stream, limits)}


def reseal(path):
    """Store new checksums for the raw arrays of a file edited through a map.

    Loading a file with ``mmap_mode='r+'`` marks it as edited, since writes
    through the map change raw arrays behind their checksums (the file still
    loads, and :func:`verify` lists those arrays as unchecked). This checks
    everything else as :func:`verify` does, then computes the checksums of
    the raw array sections again, rewrites the index in place and clears
    the mark, so that damage to those arrays is detected again from now on.
    Do not call it while the file is still mapped for writing.

    Parameters
    ----------
    path : str or os.PathLike
        A cpersist file holding one dump.

    Returns
    -------
    dict
        What :func:`verify` returns before resealing, with ``"resealed"``:
        the numbers of the sections whose checksums were computed again
        (empty, and the file untouched, if it was never mapped for writing).

    Raises
    ------
    CorruptFileError
        If anything other than the edited arrays is damaged; the file is
        left as it is.

    Examples
    --------
    >>> import numpy as np, cpersist
    >>> cpersist.dump({"w": np.zeros(100_000)}, "edited.cp")
    ['edited.cp']
    >>> w = cpersist.load("edited.cp", mmap_mode="r+")["w"]
    >>> w[:10] = 1.0
    >>> w.flush(); del w
    >>> cpersist.verify("edited.cp")["unchecked"]
    [0]
    >>> cpersist.reseal("edited.cp")["resealed"]
    [0]
    >>> cpersist.verify("edited.cp")["unchecked"]
    []
    """
    if not is_path(path):
        raise TypeError(f"path must be a path, got {type(path).__name__}")
    if is_url(path):
        raise ValueError(f"{path}: reseal rewrites a local file in place, not an object "
                         f"in remote storage")
    name = display_name(path)
    with open(path, "r+b") as file:
        # Under the file's lock: an r+ load marking it waits, and a reader
        # that catches the index half rewritten reads it again once whole.
        with LocalFileSource(file, name, file.fileno()) as source, source.locked():
            reader = ContainerReader(source, whole=True)
            result = _verify(reader)
            result["resealed"] = _reseal_dump(file, reader) if reader.edited else []
    return result
