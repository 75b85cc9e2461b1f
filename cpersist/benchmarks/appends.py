"""Files that grow: appending row batches, against h5py, zarr, PyTables and
pickle (each a :class:`Contender`: how it appends batches and reads them back).

Each contender appends ``n`` batches of ``rows x 128`` float32 values (half
smooth, half noise) to one file it keeps open, then the file is read back,
warm page cache, in this process. Reported as ratios of each cpersist
contender (record log, growing array) to each peer: total append time,
file size, a slice across :data:`SLICE_CROSSES` batches, reading it all;
and each contender's last appends over its first (1: an append costs the
same however large the file)."""

import os
import pickle
import statistics
import time

import numpy as np

import cpersist

from ..tools.table import format_table
from .measure import disk_size, remove_output
from .output import measure_into
from .turns import failed_row, not_installed, ratio_row

MB = 1 << 20
#: (appends, rows per batch) of the data, full size and ``--quick``.
SIZES = {"full": (200, 10_000), "quick": (20, 1_000)}
COLUMNS = 128
#: Appends whose median is compared at each end of a run (fewer when a run
#: is shorter than four times this).
ENDS = 50
#: Timed repeats of each read (the median is kept).
READ_REPEATS = 3
#: Batches the slice crosses the boundaries of.
SLICE_CROSSES = 10


def batch(number, rows):
    """The ``number``-th batch: smooth columns, then noise."""
    start = number * rows
    t = np.arange(start, start + rows, dtype=np.float32)[:, None]
    smooth = np.sin(t / 2000 + np.arange(COLUMNS // 2, dtype=np.float32) / 10)
    noise = np.random.default_rng(number).random((rows, COLUMNS - COLUMNS // 2),
                                                 dtype=np.float32)
    return np.concatenate([smooth, noise], axis=1)


class Contender:
    """How one library appends batches to a file and reads them back; its
    ``name`` and the modules it ``needs`` (as pip names them) are keywords
    of its class statement."""

    name = ""
    needs = ()

    def __init_subclass__(cls, name, needs=()):
        super().__init_subclass__()
        cls.name, cls.needs = name, needs

    def open(self, path):
        """Start an empty file (or directory) at ``path``."""

    def append(self, batch):
        raise NotImplementedError

    def close(self):
        """Make what was appended durable as the library does on close."""

    def read_all(self, path):
        return self.read_slice(path, None, None, None)

    def read_slice(self, path, start, stop, rows_per_batch):
        """Rows ``start:stop``, by default from the batches that hold them."""
        first, last = start // rows_per_batch, (stop - 1) // rows_per_batch
        offset = first * rows_per_batch
        return np.concatenate(self.batches(path, first, last + 1))[start - offset:stop - offset]

    def batches(self, path, first, stop):
        """Batches ``first`` to ``stop - 1`` of the file at ``path``."""
        raise NotImplementedError


class RecordLog(Contender, name="cpersist record log"):
    def open(self, path):
        self._log = cpersist.open(path, "a", compress=3)

    def append(self, batch):
        self._log.append(batch)

    def close(self):
        self._log.close()

    def read_all(self, path):
        return np.concatenate(cpersist.load(path))

    def batches(self, path, first, stop):
        with cpersist.open(path) as log:
            return [log[i] for i in range(first, stop)]


#: The key of the growing array in the file.
ARRAY = "obj['x']"


class GrowingArray(Contender, name="cpersist growing array"):
    def open(self, path):
        self._path, self._file = path, None

    def append(self, batch):
        if self._file is None:  # the first batch makes the file
            cpersist.dump({"x": batch}, self._path, compress=3, growing=True)
            self._file = cpersist.open(self._path, "a")
        else:
            self._file.append(ARRAY, batch)

    def close(self):
        self._file.close()

    def read_all(self, path):
        return cpersist.load(path)["x"]

    def read_slice(self, path, start, stop, rows_per_batch):
        with cpersist.open(path) as f:
            return f.arrays[ARRAY][start:stop]


class H5pyResizable(Contender, name="h5py resize + write", needs=("h5py", "hdf5plugin")):
    def open(self, path):
        import h5py
        import hdf5plugin
        self._file, self._rows, self._data = h5py.File(path, "w"), 0, None
        self._compression = hdf5plugin.Blosc2(cname="zstd", clevel=3,
                                              filters=hdf5plugin.Blosc2.SHUFFLE)

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


class ZarrAppend(Contender, name="zarr append", needs=("zarr",)):
    def open(self, path):
        self._path, self._array = path, None

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


class TablesEArray(Contender, name="PyTables EArray", needs=("tables",)):
    def open(self, path):
        import tables
        self._file, self._array = tables.open_file(path, "w"), None

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


class PickleLog(Contender, name="pickle.dump to an open file"):
    def open(self, path):
        self._file = open(path, "wb")

    def append(self, batch):
        pickle.dump(batch, self._file, protocol=pickle.HIGHEST_PROTOCOL)

    def close(self):
        self._file.close()

    def batches(self, path, first=0, stop=None):
        out = []
        with open(path, "rb") as f:
            while stop is None or len(out) < stop:
                try:
                    out.append(pickle.load(f))
                except EOFError:
                    break
        return out[first:]

    def read_all(self, path):
        return np.concatenate(self.batches(path))


PEERS = (H5pyResizable, ZarrAppend, TablesEArray, PickleLog)


def _holds(got, start, stop, rows):
    """Whether ``got`` is rows ``start:stop`` of the batches, every byte,
    its dtype and shape (compared batch by batch: no copy of them all)."""
    if type(got) is not np.ndarray or got.dtype != np.float32 or got.shape != (
            stop - start, COLUMNS):
        return False
    for number in range(start // rows, (stop - 1) // rows + 1):
        a, b = max(start, number * rows), min(stop, (number + 1) * rows)
        want = batch(number, rows)[a - number * rows:b - number * rows]
        if got[a - start:b - start].tobytes() != want.tobytes():
            return False
    return True


def measure(contender, directory, appends, rows):
    """The figures of one contender, or ``{"error": ...}``."""
    path = os.path.join(directory, contender.name.split()[0] + "-append")
    remove_output(path)
    try:
        times = []
        t0 = time.perf_counter()
        contender.open(path)
        for number in range(appends):
            data = batch(number, rows)
            t1 = time.perf_counter()
            contender.append(data)
            times.append(time.perf_counter() - t1)
        contender.close()
        k = min(ENDS, max(1, len(times) // 4))  # the ends compared: a quarter of a short run
        figures = {"total_s": time.perf_counter() - t0,
                   "first_median_s": statistics.median(times[:k]),
                   "last_median_s": statistics.median(times[-k:]), "ends": k,
                   "file_bytes": disk_size(path)}
        start = rows // 2 + max(0, (appends - SLICE_CROSSES - 1) // 2) * rows
        stop = min(start + SLICE_CROSSES * rows, appends * rows)
        for key, begin, end, read in (
                ("slice_s", start, stop, lambda: contender.read_slice(path, start, stop, rows)),
                ("read_all_s", 0, appends * rows, lambda: contender.read_all(path))):
            runs = []
            for _ in range(READ_REPEATS):
                t1 = time.perf_counter()
                got = read()
                runs.append(time.perf_counter() - t1)
            if not _holds(got, begin, end, rows):
                return {"error": f"{key[:-2]} read back other values"}
            figures[key] = statistics.median(runs)
            del got
        return figures
    except Exception as exc:  # reported as a failed row; the others go on
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        remove_output(path)


def run(out_dir, quick=False):
    """Run the suite; write ``out_dir/appends.json``; return the results."""
    appends, rows = SIZES["quick" if quick else "full"]

    def measure_all(directory):
        contenders = {}
        for contender in (RecordLog(), GrowingArray()) + tuple(peer() for peer in PEERS):
            missing = not_installed((m, m) for m in contender.needs)
            contenders[contender.name] = {"missing": missing} if missing else measure(
                contender, directory, appends, rows)
        return {"appends": appends, "rows": rows, "columns": COLUMNS, "contenders": contenders}

    return measure_into(out_dir, "appends.json", "cpersist-appends-", measure_all,
                        scratch_in_out=True)


#: (figure, what it is, how it is shown) of the ratios against each peer.
RATIOS = (("total_s", "total append time", "{:.2f} s"),
          ("file_bytes", "file size", "{:.1f} MB"),
          ("slice_s", f"slice across {SLICE_CROSSES} batches", "{:.4f} s"),
          ("read_all_s", "read all", "{:.2f} s"))


def ratios(results):
    """The suite's ratio rows: each cpersist contender against each peer,
    and each contender's last appends against its first."""
    rows, contenders = [], results["contenders"]
    ours = [n for n in contenders if n.startswith("cpersist")]
    for name in ours:
        mine = contenders[name]
        for peer in (n for n in contenders if n not in ours):
            theirs = contenders[peer]
            for key, what, form in RATIOS:
                target = f"{name} / {peer}: {what}"
                rows.append(_unmeasured(target, mine, theirs) or ratio_row(
                    "append", target, mine[key] / theirs[key],
                    f"{_shown(key, mine[key], form)} / {_shown(key, theirs[key], form)}"))
    for name, figures in contenders.items():
        target = f"{name}: median of the last appends / of the first"
        rows.append(_unmeasured(target, figures) or ratio_row(
            "append", target, figures["last_median_s"] / figures["first_median_s"],
            f"{figures['last_median_s'] * 1e3:.2f} ms / {figures['first_median_s'] * 1e3:.2f}"
            f" ms ({figures['ends']} each)"))
    return rows


def _shown(key, value, form):
    return form.format(value / 1e6 if key == "file_bytes" else value)


def _unmeasured(target, *figures):
    """The row of a comparison one of whose contenders is not installed or
    failed, or None when each was measured."""
    for f in figures:
        if "missing" in f:
            return ratio_row("append", target, missing=f["missing"])
    for f in figures:
        if "error" in f:
            return failed_row("append", target, f["error"])
    return None


def format_results(results):
    """The figures of every contender, as a table."""
    table = []
    for name, f in results["contenders"].items():
        if "missing" in f:
            table.append([name, f"not installed: pip install {f['missing']}"])
        elif "error" in f:
            table.append([name, f"failed: {f['error']}"])
        else:
            table.append([name, f"{f['total_s']:.2f}", f"{f['first_median_s'] * 1e3:.2f}",
                          f"{f['last_median_s'] * 1e3:.2f}", f"{f['file_bytes'] / 1e6:.1f}",
                          f"{f['slice_s'] * 1e3:.1f}", f"{f['read_all_s']:.2f}"])
    head = (f"{results['appends']} appends of {results['rows']:,} x {results['columns']} "
            f"float32, warm page cache")
    return head + "\n" + format_table(
        ["contender", "appends s", "first ms", "last ms", "file MB", "slice ms", "read all s"],
        table, right=(1, 2, 3, 4, 5, 6))


TITLE = "Files that grow: appends of row batches beside h5py, zarr, PyTables and pickle"
