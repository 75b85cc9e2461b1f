"""Re-encode the sections of a cpersist file without unpickling it, or
migrate a joblib file or a pickle to cpersist.

:func:`convert` reads a file's sections chunk by chunk, checks their
checksums, decodes them and writes them again with another codec or level
(or raw, so that the arrays can be memory-mapped). The pickle stream is
copied byte for byte: no object is rebuilt and no code in the file runs, so
converting an untrusted file is safe. Section numbers, array descriptions
and the order of the sections are kept, so the result loads to the same
object.

A joblib file or a plain pickle, in contrast, is loaded (which runs the code
it names, so only when the caller says it trusts the file) and dumped again:
see :mod:`cpersist.tools.migrate`.
"""

import os

from .. import __version__
from .._args import check_chunk_size, check_compress, check_n_threads, check_storage_options
from ..storage.open import open_source
from ..container.atomic import write_atomically
from ..container.files import display_name, is_path
from ..container import FORMAT_MAJOR, FORMAT_MINOR, ContainerReader, ContainerWriter
from ..container.layout import BLOCK_KIND, BLOCKS_MINOR
from ..storage.fsspec.urls import is_remote, is_url
from ..storage.fsspec.write import write_remote
from ..exceptions import LimitExceededError, UnsupportedVersionError
from . import migrate as _migrate
from ..container.kinds import detect


def convert(src, dst, compress=None, *, chunk_size=None, n_threads=None, fsync=False,
            trust_pickles=False, storage_options=None):
    """Write a copy of a cpersist file with its sections re-encoded, or
    migrate a joblib file or a pickle to a cpersist file.

    Parameters
    ----------
    src : str, os.PathLike or binary file object
        A cpersist file, a joblib file (uncompressed or with any of joblib's
        compressors) or a pickle of protocol 2 or later; a file object is
        read from its current position to the end of the dump there (from a
        non-seekable one, such as a pipe, the bytes are first copied to a
        temporary file). A URL is read by range requests (see :doc:`/cloud`).
        Also a checkpoint of torch or safetensors (see
        :doc:`/checkpoints`): a safetensors file, a ``torch.save`` zip
        file (read with ``torch.load(weights_only=True)``, which runs
        nothing the file names; before torch 2.10, which has published
        ways around it, only with ``trust_pickles``) or, with
        ``trust_pickles``, a legacy ``torch.save`` file.
    dst : str, os.PathLike or URL
        Where to write the copy, atomically (a temporary file in the same
        directory renamed onto ``dst``). ``dst`` may be ``src`` itself. A
        path ending in ``.safetensors`` gets a safetensors file, from a
        cpersist file whose object is a flat dict of tensors (loaded with
        ``trusted=False``). A
        URL is written complete or not at all, as by :func:`cpersist.dump`.
    compress : bool, int, str or tuple
        The new encoding, as for :func:`cpersist.dump`: ``0`` for raw (the
        arrays can then be memory-mapped), an int 1–9, a codec name or a
        ``(name, level)`` tuple. Required for a cpersist ``src``; raw by
        default for a torch or safetensors file, ignored for a
        ``.safetensors`` ``dst``.
    chunk_size : int, optional
        Bytes per chunk in the copy; by default every section keeps the
        chunk boundaries it has in ``src``.
    n_threads : int, optional
        Threads used to compress and checksum; default: all available CPUs.
    fsync : bool, default False
        Flush the copy to disk before renaming it onto ``dst``.
    trust_pickles : bool, default False
        Convert a joblib file or a pickle: this loads it (with
        :func:`joblib.load` or :func:`pickle.load`), which runs any code the
        file names, so pass True only for a file you trust. A cpersist file
        is never unpickled, whatever this says.
    storage_options : dict, optional
        Passed to fsspec for whichever of ``src`` and ``dst`` is a URL.

    Returns
    -------
    dict
        ``{"source_kind": ..., "sections": n, "raw_bytes": ...,
        "stored_bytes_before": ..., "stored_bytes_after": ...}``: what
        ``src`` is (``"cpersist format 1.1"``, ``"joblib file
        (zlib-compressed)"``, ``"pickle protocol 5"``) and sizes of the
        sections' data (for a joblib file or a pickle, "before" is the size
        of the whole file).

    Raises
    ------
    CorruptFileError
        If ``src`` is none of the files above, or a checksum does not match;
        no file is written then.
    UntrustedPickleError
        If ``src`` is a joblib file or a pickle and ``trust_pickles`` is
        False; nothing is loaded or written.
    ImportError
        For a joblib file when joblib is not installed.
    UnsupportedVersionError
        If ``src`` uses a format version newer than this cpersist writes
        (a newer minor version may hold fields a rewrite would drop).
    ValueError
        For a bad ``compress``, ``chunk_size`` or ``n_threads``.

    Examples
    --------
    >>> import numpy as np, cpersist
    >>> cpersist.dump({"x": np.zeros(100_000)}, "small.cp", compress=("zstd", 9))
    ['small.cp']
    >>> sizes = cpersist.convert("small.cp", "mappable.cp", compress=0)
    >>> sizes["stored_bytes_before"] < sizes["stored_bytes_after"] == sizes["raw_bytes"]
    True
    >>> type(cpersist.load("mappable.cp", mmap_mode="r")["x"]).__name__
    'memmap'
    """
    to_safetensors = is_path(dst) and os.fspath(dst).endswith(".safetensors")
    if compress is None and not to_safetensors:
        compress = 0  # a torch or safetensors file: raw, mappable as it was
        cpersist_needs_compress = True
    else:
        cpersist_needs_compress = False
    codec = check_compress(compress)
    n_threads = check_n_threads(n_threads)
    step = None if chunk_size is None else check_chunk_size(chunk_size)
    if not is_path(dst) and not is_remote(dst):
        raise TypeError(f"dst must be a path or a URL, got {type(dst).__name__}")
    src_options = storage_options if is_url(src) else None
    dst_options = storage_options if is_url(dst) else None
    if storage_options and src_options is None and dst_options is None:
        raise ValueError("storage_options apply to URLs; neither src nor dst is one")
    check_storage_options(src_options, src)
    check_storage_options(dst_options, dst)
    with open_source(src, storage_options=src_options, what="src") as source:
        from . import torch_files as _torch_files

        torch_kind = _torch_files.detect(source)
        if to_safetensors:
            if torch_kind is not None or not detect(source).is_cpersist:
                raise ValueError(f"{display_name(src)}: only a cpersist file converts to "
                                 f"a safetensors file")
            return _torch_files.convert_to_safetensors(source, dst, fsync, is_path(src))
        if torch_kind is not None:
            return _torch_files.convert_from(
                torch_kind, src, source, dst, trust_pickles=trust_pickles, compress=compress,
                chunk_size=chunk_size, n_threads=n_threads, fsync=fsync,
                storage_options=dst_options)
        kind = detect(source)
        if kind.is_cpersist and cpersist_needs_compress:
            raise ValueError(f"{display_name(src)} is a cpersist file: say how to re-encode "
                             f"it (--compress; compress=0 for raw)")
        if not kind.is_cpersist:
            return _migrate.convert_pickled(
                kind, src, source, dst, trust_pickles=trust_pickles, compress=compress,
                chunk_size=chunk_size, n_threads=n_threads, fsync=fsync,
                storage_options=dst_options)
        return _convert(source, dst, codec, step, n_threads, fsync, dst_options,
                        whole=is_path(src))


def _convert(source, dst, codec, step, n_threads, fsync, storage_options, whole):
    reader = ContainerReader(source, whole=whole)
    name = reader.name
    version = reader.major, reader.minor
    if version > (FORMAT_MAJOR, FORMAT_MINOR) and version != (FORMAT_MAJOR, BLOCKS_MINOR):
        raise UnsupportedVersionError(
            f"{name}: written in cpersist format {reader.major}.{reader.minor}; this "
            f"version writes dumps of {FORMAT_MAJOR}.{FORMAT_MINOR} and "
            f"{FORMAT_MAJOR}.{BLOCKS_MINOR} and could drop what the newer "
            f"minor version added: convert it with an up-to-date cpersist"
        )
    # Buffer blocks are sections like the others, re-encoded as they are.
    blocks = any(s.meta.get("kind") == BLOCK_KIND for s in reader.sections)
    stats = {
        "source_kind": f"cpersist format {reader.major}.{reader.minor}",
        "sections": len(reader.sections),
        "raw_bytes": sum(s.raw_size for s in reader.sections),
        "stored_bytes_before": sum(s.stored_size for s in reader.sections),
    }

    fast, fast_codec = _favoured_sections(reader, codec)

    def write(out):
        writer = ContainerWriter(out, n_threads, display_name(dst),
                                 minor=BLOCKS_MINOR if blocks else FORMAT_MINOR)
        # Sections are written in their original order, so their numbers
        # (which the pickle stream and the root refer to) do not change.
        for section in reader.sections:
            reader.check_claimed_sizes(section)  # a forged size, before allocating
            chunks = reader.iter_section_chunks(section)
            typesize = max(section.typesize, 1)
            meta = section.meta
            if step is not None:
                cut, meta = _array_chunking(section, max(1, step // typesize) * typesize)
                chunks = _rechunk(chunks, cut)
            number = writer.add_section(
                (memoryview(c) for c in chunks),
                codec=fast_codec if section.index in fast else codec,
                typesize=section.typesize, meta=meta, size=section.raw_size,
            )
            assert number == section.index
        info = dict(reader.info)
        info["converted_by"] = f"cpersist {__version__}"
        writer.finish(reader.root, info=info, blocks=blocks)

    if is_remote(dst):
        write_remote(dst, storage_options, write)
    else:
        write_atomically(dst, write, fsync)
    with open_source(dst, storage_options=storage_options) as out:
        stats["stored_bytes_after"] = sum(s.stored_size for s in ContainerReader(out).sections)
    return stats


#: Largest pickle stream :func:`_favoured_sections` reads to find tensors (a
#: checkpoint's holds well under a hundred bytes per tensor).
WALKED_UP_TO = 16 << 20


def _favoured_sections(reader, codec):
    """``(sections, codec)``: the sections a dump with ``codec`` would have
    compressed with its faster form (arrays of the ml_dtypes types and
    storages of the tensors whose dtype asks for speed, see
    :mod:`cpersist.pickling.tensors`), and that form. An array's type is in
    the index; only the pickle stream knows a storage's torch dtype (its
    section holds plain integers), so it is walked, when the codec has such
    a form. A stream over :data:`WALKED_UP_TO` bytes (large objects pickled
    around the arrays), or one whose walk would exceed the default
    :class:`~cpersist.Limits`, is not walked to the end for this: its
    tensors keep the codec's usual form, and the file is converted all the
    same (converting never unpickles)."""
    fast = codec.favouring_speed() if codec is not None else None
    if fast is None or fast is codec:
        return frozenset(), codec
    from ..format.named_dtypes import BY_TEXT, FAVOUR_SPEED as NAMED_FAVOUR_SPEED

    arrays = {s.index for s in reader.sections if s.index != reader.root
              and isinstance(s.meta.get("dtype"), str)
              and BY_TEXT.get(s.meta["dtype"]) in NAMED_FAVOUR_SPEED}
    root = reader.sections[reader.root]
    if root.raw_size > WALKED_UP_TO:
        return frozenset(arrays), fast
    from ..pickling.read import read_stream
    from ..pickling.tensors import FAVOUR_SPEED
    from ..stream.paths import scan_arrays

    try:
        tensors = scan_arrays(read_stream(reader, root))["tensors"]
    except LimitExceededError:
        return frozenset(arrays), fast
    return frozenset(arrays).union(t["section"] for t in tensors
                                   if t["dtype"] in FAVOUR_SPEED), fast


def _array_chunking(section, step):
    """Bytes per new chunk of ``section`` and its new meta.

    An array's chunks are cut on whole rows of its slowest axis when a row
    fits in ``step`` (as :func:`cpersist.dump` cuts them), and the meta's
    ``rows_per_chunk`` says so, or is dropped when it no longer holds.
    """
    meta = section.meta
    if meta.get("kind") != "array":
        return step, meta
    meta = {k: v for k, v in meta.items() if k != "rows_per_chunk"}
    shape = meta.get("shape")
    if not (isinstance(shape, list) and shape and all(type(n) is int for n in shape)):
        return step, meta
    from ..pickling.arrays import rows_in_step  # numpy: only when rechunking arrays

    n_rows = shape[-1] if meta.get("order") == "F" else shape[0]
    rows = rows_in_step(section.raw_size, n_rows, step)
    if rows is None:
        return step, meta
    meta["rows_per_chunk"] = rows
    return rows * (section.raw_size // n_rows), meta


def _rechunk(chunks, step):
    """Regroup a stream of byte chunks into chunks of ``step`` bytes."""
    pending = bytearray()
    for chunk in chunks:
        if not pending and len(chunk) == step:
            yield chunk
            continue
        pending += chunk
        while len(pending) >= step:
            yield pending[:step]
            del pending[:step]
    if pending:
        yield pending
