"""The handle ``cpersist.open`` gives for a dump: its arrays listed and read
on demand, its object loaded (with lazy arrays or not)."""

import pickle

from ._runtime.gc import collector_paused
from .exceptions import CpersistError
from .format.limits import DEFAULT as _DEFAULT_LIMITS
from .lazy.array import LazyArray, BoundSection
from .lazy.array_paths import ArrayPaths, placed
from .lazy.rebuild import in_lazy_load, lazy_tensor
from .pickling.buffer_blocks import BLOCK_KIND, read_buffers
from .pickling.read import array_layout, check_stream_start, load_source
from .pickling.unpickler import ArrayUnpickler
from .stream.paths import scan_arrays


class FileHandle:
    """An open cpersist file; made by :func:`cpersist.open`.

    Attributes
    ----------
    name : str
        The file's name, as messages give it.
    """

    _limits = _DEFAULT_LIMITS

    def __init__(self, file, trusted, verify, n_threads):
        self._file = file
        self.name = file.name
        self._trusted = trusted
        self._verify = verify
        self._n_threads = n_threads
        self._closed = False
        self._lazy = {}
        self._arrays = None

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return f"<cpersist.FileHandle {self.name!r} ({state})>"

    def __reduce__(self):
        raise TypeError(
            f"cannot pickle the cpersist file handle of {self.name}: pickle its arrays "
            f"(handle.arrays[path]), which pickle as references to the file, or open the "
            f"file in the other process")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Close the file. Lazy arrays of a file opened by path stay usable:
        they reopen it when read."""
        self._closed = True
        self._file.close()

    def _reader(self):
        if self._closed:
            raise ValueError(f"{self.name}: operation on a closed cpersist file handle")
        return self._file.reader()

    def _root_stream(self, reader):
        reader.check_records()  # before any data is read (see cpersist.open)
        root = reader.sections[reader.root]
        if root.meta.get("kind") != "pickle":
            raise reader.error("damaged index: the root section is not a pickle stream")
        check_stream_start(reader, root, self._verify)
        return reader.open_section(root, verify=self._verify, n_threads=self._n_threads)

    def _lazy_array(self, reader, index, path):
        lazy = self._lazy.get(index)
        if lazy is None:
            section = reader.sections[index]
            layout = array_layout(reader, section)  # checks it matches the bytes stored
            lazy = self._lazy[index] = LazyArray(
                self._file, index, path, section.meta, bound=BoundSection(reader, section),
                verify=self._verify, n_threads=self._n_threads, layout=layout)
        return lazy

    @property
    def arrays(self):
        """Every array stored in a section of its own, by its path in the object.

        A dict from the path ``cpersist info`` prints (``"obj['w']"``,
        ``"obj['layers'][1]['b']"``, ``"obj.coef_"``) to a
        :class:`~cpersist.LazyArray`, in file order; an array the path
        finder cannot place is listed as ``"<section N>"``. Built from the
        index and the pickle stream's opcodes, without unpickling: nothing
        the file names is imported or called, so listing a file you do not
        trust is safe. (A dump of plain dicts, lists and tuples around its
        arrays records their paths in its index, which is then all that is
        read.) Small arrays a compressed file keeps inside its pickle stream
        are not listed (``cpersist info`` shows them). Each torch tensor
        is listed by its path as a :class:`~cpersist.LazyTensor`,
        whose slices are torch tensors of the stored dtype (several tensors
        may view one stored storage; it is not listed itself). A key that is
        not a path raises :class:`~cpersist.ArrayNotFoundError` (a
        :class:`KeyError`) whose message says how to read an array kept
        inside the pickle stream, or else gives the form of the keys and the
        nearest ones.
        """
        if self._arrays is None:
            reader = self._reader()
            with collector_paused():
                paths = _recorded_paths(reader)
                tensors = {}
                kept_in_stream = self._kept_in_stream
                if paths is None:
                    found = self._scan(reader)
                    paths = found["paths"]
                    for tensor in found["tensors"]:
                        tensors.setdefault(tensor["section"], []).append(tensor)
                    inline = placed(found["inline"])
                    kept_in_stream = inline.copy
                arrays = ArrayPaths(kept_in_stream)
                layouts = {}
                made = self._lazy
                root = reader.root
                for section in reader.sections:
                    index = section.index
                    if index == root or section.meta.get("kind") == BLOCK_KIND:
                        continue
                    path = paths.get(index)
                    if path is None:
                        path = f"<section {index}>"
                    lazy = made.get(index)
                    if lazy is None:
                        lazy = made[index] = LazyArray(
                            self._file, index, path, section.meta,
                            bound=BoundSection(reader, section), verify=self._verify,
                            n_threads=self._n_threads,
                            layout=_layout(reader, section, layouts))
                    if index in tensors:
                        # A torch storage: listed as the tensors viewing it.
                        for tensor in tensors[index]:
                            arrays[tensor["path"]] = _lazy_tensor(reader, lazy, tensor)
                        continue
                    arrays[path] = lazy
            self._arrays = arrays
        return self._arrays

    def _kept_in_stream(self):
        """The paths of the arrays kept inside the pickle stream (for the
        message of a missing key: a file that cannot be walked has none)."""
        try:
            found = self._scan(self._reader())
        except (CpersistError, ValueError):
            return []
        return placed(found["inline"])

    def _scan(self, reader):
        """:func:`~cpersist.stream.paths.scan_arrays` of the pickle stream,
        whose buffer then goes back for the next section read (nothing
        found holds its bytes)."""
        stream = self._root_stream(reader)
        try:
            return scan_arrays(stream.getbuffer(), limits=self._limits, source=self.name)
        finally:
            stream.close()

    def load(self, lazy=False):
        """The object, as :func:`cpersist.load` gives it, or with lazy arrays.

        Parameters
        ----------
        lazy : bool, default False
            Put a :class:`~cpersist.LazyArray` in the place of every array
            stored in a section of its own (arrays inside ``np.matrix`` and
            masked arrays, which need their data, are read). Small arrays a
            compressed file keeps in its pickle stream are ndarrays.

        Returns
        -------
        object

        Raises
        ------
        UntrustedObjectError
            If the handle was opened with ``trusted=False`` (or a list) and
            the file names a global outside the allowlist.
        CorruptFileError
        """
        restricted, allowed, prefixes = self._trusted
        reader = self._reader()
        if not lazy:
            return load_source(reader.source, mmap_mode=None, restricted=restricted,
                         allowed=allowed, prefixes=prefixes, verify=self._verify,
                         n_threads=self._n_threads, whole=False, limits=self._limits)
        reader.check_records()  # before the blocks are read (see cpersist.open)
        paths = {}
        for path, listed in self.arrays.items():
            # A storage is named by the path of the first tensor viewing it.
            paths.setdefault(listed._index if isinstance(listed, LazyArray)
                             else listed._storage._index, path)

        def load_array(index):
            if (type(index) is not int or not 0 <= index < len(reader.sections)
                    or index == reader.root):
                raise reader.error(f"the pickle stream refers to a bad array section {index!r}")
            return self._lazy_array(reader, index, paths.get(index, f"<section {index}>"))

        buffers = read_buffers(reader, self._verify, self._n_threads)
        unpickler = _LazyUnpickler(self._root_stream(reader), load_array, restricted,
                                   allowed, prefixes, source=self.name, limits=self._limits,
                                   buffers=buffers)
        try:
            return unpickler.load()
        except CpersistError:
            raise
        except (pickle.UnpicklingError, EOFError) as exc:
            raise reader.error(f"damaged pickle stream ({exc})") from None


#: Longest path read from an index (a longer one is not trusted to be ours).
_MAX_RECORDED_PATH = 4096


def _recorded_paths(reader):
    """``{section: path}`` from the index, where a dump records them
    (:mod:`cpersist.pickling.object_paths`), or None.

    Used only if every array section has a path and no two are the same;
    otherwise the pickle stream is walked. Paths are labels, nothing more:
    a forged index can only mislabel the arrays it already describes.
    """
    paths = {}
    root = reader.root
    for section in reader.sections:
        if section.index != root and section.meta.get("kind") != BLOCK_KIND:
            path = section.meta.get("path")
            if type(path) is not str or len(path) > _MAX_RECORDED_PATH:
                return None
            paths[section.index] = path
    if not paths or len(set(paths.values())) != len(paths):
        return None
    return paths


def _lazy_tensor(reader, storage, tensor):
    """The :class:`~cpersist.LazyTensor` a walk of the stream describes."""
    try:
        lazy = lazy_tensor(storage, tensor["dtype"], tensor["offset"], tensor["shape"],
                       tensor["stride"], tensor["requires_grad"], tensor["kind"], None,
                       tensor["device"])
    except pickle.UnpicklingError as exc:
        raise reader.error(f"the tensor at {tensor['path']}: {exc}") from None
    lazy.path = tensor["path"]
    return lazy


def _layout(reader, section, layouts):
    """:func:`cpersist.pickling.read.array_layout`, remembered in ``layouts`` by
    description: a model's thousands of arrays have a few of them."""
    meta = section.meta
    try:
        shape = meta["shape"]
        # The types of the dimensions are in the key: [4.0] is not [4].
        key = (meta["dtype"], meta["order"], *shape, *map(type, shape))
        layout = layouts.get(key)
    except (KeyError, TypeError):  # array_layout reports what is wrong
        return array_layout(reader, section)
    if layout is None or layout[3] != section.raw_size or "aligned" in meta:
        layout = array_layout(reader, section)
        if "aligned" not in meta:
            layouts[key] = layout
    return layout


class _LazyUnpickler(ArrayUnpickler):
    """Calls the lazy forms of the format's rebuild functions (:mod:`.lazy.rebuild`)."""

    def find_class(self, module, name):
        return in_lazy_load(super().find_class(module, name))

