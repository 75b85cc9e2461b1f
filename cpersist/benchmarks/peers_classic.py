"""The established formats: ``np.save``, ``np.savez_compressed``, pickle,
joblib, PyTables (HDF5) and nibabel (NIfTI)."""

import contextlib
import pickle
import warnings

import numpy as np

from .method import Method, array_reason, as_dict, from_dict, is_dict_of_arrays, is_plain_array


class NpSave(Method, name="np.save", family="numpy", suffix=".npy", fixed_level=0):
    """``np.save`` / ``np.load`` (raw, arrays only)."""

    def why_not(self, obj):
        if not is_plain_array(obj):
            return "np.save stores a single non-object array" + (
                "" if not isinstance(obj, np.ndarray) else " (object dtype needs pickle)")
        return None

    def write(self, obj, path, level):
        np.save(path, obj, allow_pickle=False)

    def read(self, path):
        return np.load(path, allow_pickle=False)


class NpSaveMmap(NpSave, name="np.save-mmap", mmap=True):
    """``np.save`` then ``np.load(mmap_mode='r')`` (every byte touched)."""

    note = "np.load(mmap_mode='r'); read time includes touching every byte"

    def read(self, path):
        return np.load(path, mmap_mode="r", allow_pickle=False)


class NpSavezCompressed(Method, name="np.savez_compressed", family="numpy", codec="zlib",
                        suffix=".npz", fixed_level=6):
    """``np.savez_compressed``: arrays and dicts of arrays, one fixed level."""

    note = "level not settable: zipfile ZIP_DEFLATED at zlib's default (reported as 6)"

    def why_not(self, obj):
        if is_plain_array(obj) or is_dict_of_arrays(obj):
            return None
        return "np.savez_compressed stores arrays or a dict of str -> non-object arrays"

    def write(self, obj, path, level):
        np.savez_compressed(path, **as_dict(obj))

    def read(self, path):
        with np.load(path, allow_pickle=False) as z:
            return from_dict({k: z[k] for k in z.files})


class Pickle5(Method, name="pickle5", family="pickle", suffix=".pkl", fixed_level=0):
    """``pickle.dump(obj, f, protocol=5)`` to a file."""

    def write(self, obj, path, level):
        with open(path, "wb") as f:
            pickle.dump(obj, f, protocol=5)

    def read(self, path):
        with open(path, "rb") as f:
            return pickle.load(f)


class Joblib(Method, name="joblib", family="joblib", needs=("joblib",), codec="zlib",
             suffix=".joblib", supported=tuple(range(10)),
             note="compress=<int>: zlib; level 0 = raw"):
    """``joblib.dump(obj, path, compress=level)``: zlib, 0 = raw."""

    def _compress(self, level):
        return level

    def write(self, obj, path, level):
        import joblib
        joblib.dump(obj, path, compress=self._compress(level))

    def read(self, path):
        import joblib
        return joblib.load(path)


class JoblibLZ4(Joblib, name="joblib:lz4", codec="lz4", supported=tuple(range(1, 10)), note=""):
    """``joblib.dump(obj, path, compress=('lz4', level))``."""

    needs = ("joblib", ("lz4", "lz4 (joblib needs it for ('lz4', level))"))

    def _compress(self, level):
        return ("lz4", level)


class JoblibMmap(Joblib, name="joblib-mmap", codec="none", mmap=True, fixed_level=0):
    """Raw joblib file read with ``mmap_mode='r'`` (every byte touched)."""

    note = "compress=0, load(mmap_mode='r'); read time includes touching every byte"

    def read(self, path):
        import joblib
        return joblib.load(path, mmap_mode="r")


_TABLES_KINDS = "biufcS"  # HDF5 atoms PyTables maps from numpy (no U, O, V, M)
# PyTables has no unicode atom: str arrays go in as their UCS-4 code points
# (uint32, one more axis), which is what a PyTables user does with them.
_TABLES_STR_ATTR = "cpersist_bench_str_dtype"


class Tables(Method, family="tables", needs=(("tables", "PyTables (tables)"),), suffix=".h5"):
    """PyTables (HDF5): ``create_array`` raw or ``create_carray`` with a filter.

    Stores an array, or a dict of arrays as one node per key.
    """

    def __init__(self, complib=None):
        self.complib = complib
        if complib is None:
            self.name, self.codec, self.fixed_level = "tables", "none", 0
            self.supported = (0,)
            self.note = "create_array, contiguous HDF5 layout, no filter"
        else:
            self.name, self.codec = f"tables:{complib}", complib
            self.supported = tuple(range(1, 10))
            self.note = "create_carray, default chunkshape, shuffle on"

    def available(self):
        why = super().available()
        if why:
            return why
        import tables
        if self.complib and not tables.which_lib_version(self.complib):
            return f"{self.complib} is not built into this PyTables"
        return None

    def why_not(self, obj):
        return array_reason(obj, "PyTables", kinds=_TABLES_KINDS + "U")

    def _put(self, f, where, name, arr, level):
        import tables
        if arr.dtype.kind == "U":
            code_type = np.dtype("u4").newbyteorder(arr.dtype.byteorder)
            codes = np.ascontiguousarray(arr).reshape(arr.shape + (1,)).view(code_type)
            node = f.create_array(where, name, obj=codes, createparents=True)
            node.attrs[_TABLES_STR_ATTR] = arr.dtype.str
            return
        if self.complib is None or arr.size == 0 or arr.ndim == 0:
            f.create_array(where, name, obj=arr, createparents=True)
        else:
            filters = tables.Filters(complevel=level, complib=self.complib, shuffle=True)
            f.create_carray(where, name, obj=arr, filters=filters, createparents=True)

    def write(self, obj, path, level):
        import tables
        with warnings.catch_warnings(), tables.open_file(path, "w") as f:
            # Keys that are not Python identifiers only lose natural naming.
            warnings.simplefilter("ignore", tables.NaturalNameWarning)
            if isinstance(obj, np.ndarray):
                self._put(f, "/", "data", obj, level)
                f.root._v_attrs.cpersist_bench_single = True
            else:
                for k, arr in obj.items():
                    where, _, name = ("/" + k.strip("/")).rpartition("/")
                    self._put(f, where or "/", name, arr, level)

    def read(self, path):
        import tables
        with tables.open_file(path, "r") as f:
            if "cpersist_bench_single" in f.root._v_attrs:
                return self._get(f.root.data)
            return {n._v_pathname.lstrip("/"): self._get(n) for n in f.walk_nodes("/", "Array")}

    @staticmethod
    def _get(node):
        data = node.read()
        if _TABLES_STR_ATTR in node.attrs:
            return data.view(np.dtype(node.attrs[_TABLES_STR_ATTR])).reshape(data.shape[:-1])
        return data


@contextlib.contextmanager
def _gzip_level(level):
    from nibabel.openers import ImageOpener, Opener
    saved = Opener.__dict__.get("default_compresslevel"), ImageOpener.__dict__.get("default_compresslevel")
    Opener.default_compresslevel = level
    if saved[1] is not None:
        ImageOpener.default_compresslevel = level
    try:
        yield
    finally:
        Opener.default_compresslevel = saved[0]
        if saved[1] is not None:
            ImageOpener.default_compresslevel = saved[1]


class Nibabel(Method, family="nibabel", needs=("nibabel",)):
    """NIfTI-1 via nibabel: ``.nii`` (raw) or ``.nii.gz`` (gzip levels 1-9)."""

    def __init__(self, gz=False):
        self.gz = gz
        if gz:
            self.name, self.codec, self.suffix = "nibabel.nii.gz", "gzip", ".nii.gz"
            self.supported = tuple(range(1, 10))
            self.note = "gzip level via nibabel.openers.Opener.default_compresslevel"
        else:
            self.name, self.codec, self.suffix, self.fixed_level = "nibabel.nii", "none", ".nii", 0
            self.supported = (0,)
            # nibabel memory-maps an uncompressed .nii by default: time the
            # touch of every byte, as for the other memmapped reads.
            self.mmap = True
            self.note = ("np.asanyarray(img.dataobj), memory-mapped by nibabel; read time "
                         "includes touching every byte")

    def why_not(self, obj):
        if not isinstance(obj, np.ndarray):
            return "NIfTI stores one array, not arbitrary objects"
        if not 3 <= obj.ndim <= 7:
            return f"NIfTI is for images of 3 to 7 dimensions, got {obj.ndim}-D"
        if max(obj.shape) > 32767:
            return "NIfTI-1 dimensions are int16 (max 32767)"
        import nibabel as nib
        try:
            nib.Nifti1Header().set_data_dtype(obj.dtype)
        except Exception:
            return f"NIfTI-1 has no data type for {obj.dtype}"
        return None

    def write(self, obj, path, level):
        import nibabel as nib
        with _gzip_level(level) if self.gz else contextlib.nullcontext():
            nib.save(nib.Nifti1Image(obj, np.eye(4), dtype=obj.dtype), path)

    def read(self, path):
        import nibabel as nib
        return np.asanyarray(nib.load(path).dataobj)


_TABLES_COMPLIBS = ("zlib", "blosc:lz4", "blosc:zstd", "blosc2", "lzo")


def classic_methods():
    """Every method of this module, in display order (including ones not installed here)."""
    return ([NpSave(), NpSaveMmap(), NpSavezCompressed(), Pickle5(), Joblib(), JoblibLZ4(),
             JoblibMmap(), Tables(None)] + [Tables(c) for c in _TABLES_COMPLIBS]
            + [Nibabel(False), Nibabel(True)])
