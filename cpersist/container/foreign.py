"""Saying what a file that is not a cpersist file is, and what to run on it.

Used when reading a file fails at its header: instead of only "not a
cpersist file", the error names the kind of file (a joblib file, a pickle,
a ``.npy`` or ``.npz`` file, HDF5) and the command that reads it.
"""

from ..exceptions import CorruptFileError

#: File kinds told by their first bytes: magic, what it is, how to read it.
_MAGICS = (
    (b"\x93NUMPY", "a numpy .npy file",
     "load it with numpy.load({name!r}) (mmap_mode='r' maps it), or convert it once: "
     "cpersist.dump(numpy.load({name!r}), 'out.cp')"),
    (b"PK\x03\x04", "a zip archive (a numpy .npz file?)",
     "load it with numpy.load({name!r})"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file",
     "read it with h5py.File({name!r}) or tables.open_file({name!r})"),
)


def foreign_file_error(source, exc):
    """A :class:`CorruptFileError` saying what ``source`` holds instead of a
    cpersist file, or None when it is none of the kinds known here (or is
    a cpersist file: ``exc`` is then about damage).

    Parameters
    ----------
    source : ByteSource
        The opened source whose header did not parse.
    exc : CorruptFileError
        The error its reading raised.
    """
    if "not a cpersist file" not in str(exc):
        return None
    name = source.name
    try:
        head = bytes(source.read(0, min(16, source.size)))
    except Exception:  # the original error is the one to report
        return None
    for magic, kind, how in _MAGICS:
        if head.startswith(magic):
            return CorruptFileError(f"{name}: {kind}, not a cpersist file: {how.format(name=name)}")
    from .kinds import detect

    try:
        found = detect(source)
    except Exception:
        return None
    if found.is_cpersist:
        return None
    reader = "joblib.load" if found.is_joblib else "pickle.load (or joblib.load)"
    label = found.label
    if label.startswith("pickle protocol "):
        label = f"pickle (protocol {label.split()[-1]})"
    return CorruptFileError(
        f"{name}: a {label}, not a cpersist file: load it with {reader} if you trust it "
        f"(loading it runs the code it names), or convert it once: "
        f"cpersist convert {name} out.cp --trust-pickles")


def read_container(source, whole):
    """:class:`~cpersist.container.ContainerReader` of ``source``; a file of
    another kind raises the error of :func:`foreign_file_error`."""
    from .reader import ContainerReader

    try:
        return ContainerReader(source, whole=whole)
    except CorruptFileError as exc:
        foreign = foreign_file_error(source, exc)
        if foreign is None:
            raise
        raise foreign from None
