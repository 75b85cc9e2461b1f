"""The peers of the append suite (:mod:`.appends`): how h5py, zarr, PyTables
and a pickle log append row batches to a file and read them back."""

import pickle

import numpy as np


class Contender:
    """How one library appends batches to a file and reads them back."""

    name = ""

    def open(self, path):
        """Start an empty file (or directory) at ``path``."""

    def append(self, batch):
        raise NotImplementedError

    def close(self):
        """Make what was appended durable as the library does on close."""

    def read_all(self, path):
        return self.read_slice(path, None, None, None)

    def read_slice(self, path, start, stop, rows_per_batch):
        raise NotImplementedError


class H5pyResizable(Contender):
    name = "h5py resize + write"

    def open(self, path):
        import h5py
        import hdf5plugin
        self._file = h5py.File(path, "w")
        self._rows = 0
        self._compression = hdf5plugin.Blosc2(cname="zstd", clevel=3,
                                              filters=hdf5plugin.Blosc2.SHUFFLE)
        self._data = None

    def append(self, batch):
        if self._data is None:
            self._data = self._file.create_dataset(
                "x", shape=(0, batch.shape[1]), maxshape=(None, batch.shape[1]),
                dtype=batch.dtype, chunks=batch.shape, **self._compression)
        n = len(batch)
        self._data.resize(self._rows + n, axis=0)
        self._data[self._rows:] = batch
        self._rows += n

    def close(self):
        self._file.close()

    def read_slice(self, path, start, stop, rows_per_batch):
        import h5py
        import hdf5plugin  # noqa: F401  (registers the filter)
        with h5py.File(path, "r") as f:
            return f["x"][start:stop]


class ZarrAppend(Contender):
    name = "zarr append"

    def open(self, path):
        self._path = path
        self._array = None

    def append(self, batch):
        import zarr
        from zarr.codecs import BloscCodec
        if self._array is None:
            self._array = zarr.create_array(
                store=self._path, shape=(0, batch.shape[1]), chunks=batch.shape,
                dtype=batch.dtype, compressors=BloscCodec(cname="zstd", clevel=3,
                                                          shuffle="shuffle"))
        self._array.append(batch, axis=0)

    def read_slice(self, path, start, stop, rows_per_batch):
        import zarr
        return zarr.open_array(path, mode="r")[start:stop]


class TablesEArray(Contender):
    name = "PyTables EArray"

    def open(self, path):
        import tables
        self._file = tables.open_file(path, "w")
        self._array = None

    def append(self, batch):
        import tables
        if self._array is None:
            self._array = self._file.create_earray(
                "/", "x", atom=tables.Atom.from_dtype(batch.dtype),
                shape=(0, batch.shape[1]), chunkshape=batch.shape,
                filters=tables.Filters(complevel=3, complib="blosc2:zstd", shuffle=True))
        self._array.append(batch)

    def close(self):
        self._file.close()

    def read_slice(self, path, start, stop, rows_per_batch):
        import tables
        with tables.open_file(path, "r") as f:
            return f.root.x[start:stop]


class PickleLog(Contender):
    name = "pickle.dump to an open file"

    def open(self, path):
        self._file = open(path, "wb")

    def append(self, batch):
        pickle.dump(batch, self._file, protocol=pickle.HIGHEST_PROTOCOL)

    def close(self):
        self._file.close()

    def _batches(self, path, count=None):
        out = []
        with open(path, "rb") as f:
            while count is None or len(out) < count:
                try:
                    out.append(pickle.load(f))
                except EOFError:
                    break
        return out

    def read_all(self, path):
        return np.concatenate(self._batches(path))

    def read_slice(self, path, start, stop, rows_per_batch):
        first, last = start // rows_per_batch, (stop - 1) // rows_per_batch
        parts = self._batches(path, last + 1)[first:]
        offset = first * rows_per_batch
        return np.concatenate(parts)[start - offset:stop - offset]


PEERS = (H5pyResizable, ZarrAppend, TablesEArray, PickleLog)
#: The pip name each peer needs.
NEEDS = {H5pyResizable: ("h5py", "hdf5plugin"), ZarrAppend: ("zarr",),
         TablesEArray: ("tables",), PickleLog: ()}
