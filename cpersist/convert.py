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
see :mod:`cpersist._migrate`.
"""

from . import __version__, _migrate
from ._args import check_chunk_size, open_source
from ._files import display_name, is_path, write_atomically
from ._threads import check_n_threads
from .codecs import parse_compress
from .container import FORMAT_MAJOR, FORMAT_MINOR, ContainerReader, ContainerWriter
from .exceptions import UnsupportedVersionError


def convert(src, dst, compress, *, chunk_size=None, n_threads=None, fsync=False,
            trust_pickles=False):
    """Write a copy of a cpersist file with its sections re-encoded, or
    migrate a joblib file or a pickle to a cpersist file.

    Parameters
    ----------
    src : str, os.PathLike or binary file object
        A cpersist file, a joblib file (uncompressed or with any of joblib's
        compressors) or a pickle of protocol 2 or later; a file object is
        read from its current position to the end of the dump there (from a
        non-seekable one, such as a pipe, the bytes are first copied to a
        temporary file).
    dst : str or os.PathLike
        Where to write the copy, atomically (a temporary file in the same
        directory renamed onto ``dst``). ``dst`` may be ``src`` itself.
    compress : bool, int, str or tuple
        The new encoding, as for :func:`cpersist.dump`: ``0`` for raw (the
        arrays can then be memory-mapped), an int 1–9, a codec name or a
        ``(name, level)`` tuple.
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
    codec = parse_compress(compress)
    n_threads = check_n_threads(n_threads)
    step = None if chunk_size is None else check_chunk_size(chunk_size)
    if not is_path(dst):
        raise TypeError(f"dst must be a path, got {type(dst).__name__}")
    with open_source(src, what="src") as source:
        kind = _migrate.detect(source)
        if not kind.is_cpersist:
            return _migrate.convert_pickled(
                kind, src, source, dst, trust_pickles=trust_pickles, compress=compress,
                chunk_size=chunk_size, n_threads=n_threads, fsync=fsync)
        return _convert(source, dst, codec, step, n_threads, fsync, is_path(src))


def _convert(source, dst, codec, step, n_threads, fsync, whole):
    reader = ContainerReader(source, whole=whole)
    name = reader.name
    if (reader.major, reader.minor) > (FORMAT_MAJOR, FORMAT_MINOR):
        raise UnsupportedVersionError(
            f"{name}: written in cpersist format {reader.major}.{reader.minor}; this "
            f"version writes {FORMAT_MAJOR}.{FORMAT_MINOR} and could drop what the newer "
            f"minor version added: convert it with an up-to-date cpersist"
        )
    stats = {
        "source_kind": f"cpersist format {reader.major}.{reader.minor}",
        "sections": len(reader.sections),
        "raw_bytes": sum(s.raw_size for s in reader.sections),
        "stored_bytes_before": sum(s.stored_size for s in reader.sections),
    }

    def write(out):
        writer = ContainerWriter(out, n_threads, display_name(dst))
        # Sections are written in their original order, so their numbers
        # (which the pickle stream and the root refer to) do not change.
        for section in reader.sections:
            reader.check_claimed_sizes(section)  # a forged size, before allocating
            chunks = reader.iter_section_chunks(section)
            typesize = max(section.typesize, 1)
            if step is not None:
                chunks = _rechunk(chunks, max(1, step // typesize) * typesize)
            number = writer.add_section(
                (memoryview(c) for c in chunks), codec=codec,
                typesize=section.typesize, meta=section.meta, size=section.raw_size,
            )
            assert number == section.index
        info = dict(reader.info)
        info["converted_by"] = f"cpersist {__version__}"
        writer.finish(reader.root, info=info)

    write_atomically(dst, write, fsync)
    with open_source(dst) as out:
        stats["stored_bytes_after"] = sum(s.stored_size for s in ContainerReader(out).sections)
    return stats


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
