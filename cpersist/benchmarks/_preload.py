"""Imported once by the measurement forkserver so workers start warm; a
library missing here only makes its methods ``n/a``."""

import importlib

#: What the forkserver imports before forking measurement processes.
_NAMES = (
    "numpy", "cpersist", "cpersist.codecs",
    # cpersist imports these on first use; a worker's first dump must not
    # pay for them, any more than a peer's first call pays for its imports.
    "cpersist.api", "cpersist.tools.inspection", "cpersist.handle",
    "cpersist.benchmarks.measure", "cpersist.benchmarks.methods",
    "cpersist.benchmarks.peers_classic", "cpersist.benchmarks.compare", "cpersist.benchmarks.datasets",
    # A measurement times one call, not the import of its library (zarr's
    # alone costs more than a small dataset's write).
    "tables", "zarr", "zarr.codecs", "h5py", "hdf5plugin", "safetensors.numpy", "nibabel",
    "joblib", "lz4.frame", "bz2", "lzma", "zstandard", "blosc2", "sklearn.ensemble",
    "sklearn.tree",
)

for _name in _NAMES:
    try:
        importlib.import_module(_name)
    except Exception:  # noqa: BLE001 - see module docstring
        pass

try:
    from cpersist.codecs import BUILTIN_CODECS as _BUILTIN
    for _spec in _BUILTIN.values():
        importlib.import_module(_spec.partition(":")[0])
except Exception:  # noqa: BLE001 - see module docstring
    pass

import gc as _gc

# Everything imported so far lives for the whole run: move it out of the
# collector's sight so the gc.collect() before each measurement is cheap
# (and forked children do not touch, hence copy, those pages).
_gc.collect()
_gc.freeze()
