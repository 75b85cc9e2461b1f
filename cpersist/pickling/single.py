"""A trusted load of a local file that holds one raw array and its pickle
stream, as ``np.load`` reads one: the array read into new memory and
checked, then the stream unpickled, without the byte source, reader and
layers of :func:`.read.load_source`, which would cost such a load of a
megabyte more than checking its bytes does. Any other file, and any that
fails a check, is left to :func:`.read.load_source` before anything is
unpickled: it says what is wrong, if anything is.
"""

import pickle

from ..container.section_file import SectionFile
from ..container.single import read_checked, single_raw_array
from ..container.sources.local import page_phase
from .array_memory import allocate
from .arrays import parse_description
from .jax_arrays import jax_installed, stores_jax
from .read import bad_array_reference
from .rebuild import stored_array
from .unpickler import ArrayUnpickler, unpickle

#: What :func:`load_single` gives for a file it leaves to :func:`.read.load_source`.
NOT_SINGLE = object()


class _StoredArray:
    """What the pickler makes of a dump's one bare ndarray kept in section
    ``index``: its ``stored_array(index)`` call, and nothing else."""

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return stored_array, (self.index,)


#: The stream of a dump of a bare ndarray, as the pickler writes it at the
#: default protocol, by the section of the array it names (a file of two
#: sections: 0 or 1). Such a stream unpickles to that array and nothing
#: else, so the array is returned without an unpickler, whose making and
#: lookups cost a small load more than checking the array's bytes does.
_BARE_ARRAY_STREAMS = {pickle.dumps(_StoredArray(index), pickle.HIGHEST_PROTOCOL): index
                       for index in (0, 1)}


def load_single(file, size, name):
    """The object in the local regular file ``file`` (a
    :class:`~cpersist.storage.small_files.OpenedFile` of ``size`` bytes,
    named ``name`` in messages), loaded trusted with every checksum checked,
    when it is a dump that
    :func:`~cpersist.container.single.single_raw_array` takes; else
    :data:`NOT_SINGLE`. A file of JAX arrays, which loads aligned, is left
    to :func:`.read.load_source` too.

    The array is read before the stream is unpickled (rather than when the
    stream asks for it), into memory placed as the kernel's copy runs
    fastest, and handed to the stream each time it asks for it; a dump of
    a bare ndarray, whose stream asks for it alone, returns it as read.
    """
    found = single_raw_array(file.fd, size, name)
    if found is None:
        return NOT_SINGLE
    stream, section, digest = found
    if jax_installed() and stores_jax(stream):
        return NOT_SINGLE
    try:
        dtype, shape, order, nbytes = parse_description(section.meta)
        if nbytes != section.raw_size:
            return NOT_SINGLE
        arr, view = allocate(dtype, shape, order, 0, page_phase(section.offset, nbytes))
    except Exception:  # noqa: BLE001 - load_source says what is wrong
        return NOT_SINGLE
    if not read_checked(file.fd, section, digest, view):
        return NOT_SINGLE
    index = section.index
    if _BARE_ARRAY_STREAMS.get(stream) == index:
        return arr

    def load_array(i):
        if type(i) is not int or i != index:
            raise bad_array_reference(name, i)
        return arr

    pickled = SectionFile(stream)
    return unpickle(ArrayUnpickler(pickled, load_array, source=name), pickled, name)
