"""The newer array formats: blosc2's ``NDArray`` files, zarr v3, h5py with
hdf5plugin's filters, and safetensors. The interface is :class:`.method.Method`."""

import numpy as np

from .method import Method, as_dict, from_dict, array_reason as _numeric_reason


class Blosc2NDArray(Method, family="blosc2", needs=("blosc2",), codec="zstd", suffix=".b2nd"):
    """``blosc2.asarray(arr, urlpath=path, mode="w", cparams=...)``: one ``.b2nd`` file.

    ``filters=None`` keeps blosc2's defaults (zstd level 5, byte shuffle) and
    runs at that one level; otherwise zstd at the grid's levels after the
    given filter."""

    def __init__(self, filters=None):
        self.filters = filters
        if filters is None:
            self.name, self.fixed_level = "blosc2", 5
            self.supported = (5,)
            self.note = "blosc2.asarray(urlpath=...) with blosc2's default cparams (zstd 5, shuffle)"
        else:
            self.name = f"blosc2:zstd+{filters}"
            self.supported = tuple(range(1, 10))
            self.note = f"blosc2.asarray(urlpath=...), codec zstd, filters {filters}"

    def why_not(self, obj):
        if isinstance(obj, np.ndarray) and obj.ndim == 0:
            return "blosc2 NDArray files hold arrays of at least one dimension"
        return _numeric_reason(obj, "a blosc2 NDArray file", allow_dict=False)

    def write(self, obj, path, level):
        import blosc2
        kw = {}
        if self.filters is not None:
            names = {"shuffle": [blosc2.Filter.SHUFFLE],
                     "bitshuffle": [blosc2.Filter.BITSHUFFLE],
                     "bytedelta": [blosc2.Filter.SHUFFLE, blosc2.Filter.BYTEDELTA]}[self.filters]
            kw["cparams"] = blosc2.CParams(codec=blosc2.Codec.ZSTD, clevel=level, filters=names,
                                           filters_meta=[0] * len(names))
        # The file is complete once the array returned is released: here, at once.
        blosc2.asarray(np.require(obj, requirements="C"), urlpath=path, mode="w", **kw)

    def read(self, path):
        import blosc2
        return blosc2.open(path, mode="r")[...]


class Zarr(Method, family="zarr", needs=("zarr",), suffix=".zarr", supported=tuple(range(1, 10))):
    """zarr v3 directory store: one array, or a group with one array per key."""

    def __init__(self, codec="zstd"):
        self.codec = codec
        self.name = f"zarr:{codec}"
        self.note = ("zarr v3 directory, default chunks, ZstdCodec(level)" if codec == "zstd" else
                     "zarr v3 directory, default chunks, BloscCodec(cname='zstd', clevel, shuffle)")

    def available(self):
        why = super().available()
        if why:
            return why
        import zarr
        if int(zarr.__version__.split(".")[0]) < 3:
            return f"zarr {zarr.__version__} is not zarr v3"
        return None

    def why_not(self, obj):
        return _numeric_reason(obj, "zarr", kinds="biuf")

    def write(self, obj, path, level):
        import zarr
        from zarr.codecs import BloscCodec, ZstdCodec
        codec = (ZstdCodec(level=level) if self.codec == "zstd" else
                 BloscCodec(cname="zstd", clevel=level, shuffle="shuffle"))
        group = zarr.open_group(path, mode="w", zarr_format=3)
        for k, arr in as_dict(obj).items():
            z = zarr.create_array(group.store, name=k, shape=arr.shape, dtype=arr.dtype,
                                  compressors=codec, zarr_format=3)
            z[...] = arr

    def read(self, path):
        import zarr
        group = zarr.open_group(path, mode="r")
        # np.asarray: zarr returns a 0-d array's value as a numpy scalar.
        return from_dict({k: np.asarray(node[...]) for k, node in group.members(max_depth=None)
                          if isinstance(node, zarr.Array)})


class H5py(Method, family="h5py", needs=("h5py", "hdf5plugin"), suffix=".h5",
           supported=tuple(range(1, 10))):
    """HDF5 through h5py, chunked, with an hdf5plugin filter (Blosc2 or Zstd)."""

    def __init__(self, codec="blosc2"):
        self.codec = codec
        self.name = f"h5py:{codec}"
        self.note = ("h5py chunks=True, hdf5plugin.Blosc2(cname='zstd', clevel, SHUFFLE)"
                     if codec == "blosc2" else "h5py chunks=True, hdf5plugin.Zstd(clevel)")

    def why_not(self, obj):
        return _numeric_reason(obj, "h5py", allow_records=True)

    def write(self, obj, path, level):
        import h5py
        import hdf5plugin
        compression = (hdf5plugin.Zstd(clevel=level) if self.codec == "zstd" else hdf5plugin.Blosc2(
            cname="zstd", clevel=level, filters=hdf5plugin.Blosc2.SHUFFLE))
        with h5py.File(path, "w") as f:
            for k, arr in as_dict(obj).items():
                if arr.ndim == 0 or arr.size == 0:  # chunked layouts need data
                    f.create_dataset(k, data=arr)
                else:
                    f.create_dataset(k, data=arr, chunks=True, **compression)

    def read(self, path):
        import h5py
        import hdf5plugin  # noqa: F401 - registers the filters the file needs
        out = {}
        with h5py.File(path, "r") as f:
            # np.asarray: h5py returns a 0-d dataset's value as a numpy scalar.
            f.visititems(lambda k, node: out.__setitem__(k, np.asarray(node[()]))
                         if isinstance(node, h5py.Dataset) else None)
        return from_dict(out)


class Safetensors(Method, name="safetensors", family="safetensors", needs=("safetensors",),
                  suffix=".safetensors", fixed_level=0):
    """``safetensors.numpy.save_file``: a dict of arrays, raw (no compression)."""

    note = "safetensors.numpy.save_file / load_file (no compression)"

    def why_not(self, obj):
        return _numeric_reason(obj, "safetensors", kinds="biuf")

    def write(self, obj, path, level):
        from safetensors.numpy import save_file
        # np.require, not np.ascontiguousarray, which makes a 0-d array 1-d.
        save_file({k: np.require(v, requirements="C") for k, v in as_dict(obj).items()}, path)

    def read(self, path):
        from safetensors.numpy import load_file
        return from_dict(load_file(path))


def peer_methods():
    """The methods of this module, in display order."""
    return ([Blosc2NDArray(None)] + [Blosc2NDArray(f) for f in ("shuffle", "bitshuffle", "bytedelta")]
            + [Zarr("zstd"), Zarr("blosc"), H5py("blosc2"), H5py("zstd"), Safetensors()])

