"""The catalogue of benchmark datasets: generated (:mod:`.generated`), real
data shipped in installed packages and the user's own files (which kinds
are read: ``.npy``, ``.npz``, ``.nii``/``.nii.gz``, ``.h5``/``.hdf5``,
``.cp`` and, only with ``trust_pickles``, joblib/pickle files, and how);
how ``--size`` is read and which a run measures; each dataset's object
sized, described and cached for the measurement processes, so every method
reads byte-identical input from the output directory's scratch space
(``_work/datasets``)."""

import fnmatch
import os
import pickle
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .generated import (BIG_FACTOR, make_atlas, make_big, make_dataframe, make_images, make_noise,
                        make_sparse_matrix, make_sparse_table, make_text, make_timeseries)
from .output import safe_name

#: Named sizes accepted by ``--size`` (bytes per built-in dataset).
SIZE_PRESETS = {
    "tiny": 256 * 1024,  # --quick: every method in seconds
    "small": 8 * 1024**2,  # CI-friendly but still past the L2/L3 caches
    "medium": 100 * 1024**2,  # the default: what the issue calls ~100 MB
    "large": 1024**3,
}


def parse_size(text):
    """A ``--size`` value in bytes: a preset name (:data:`SIZE_PRESETS`), a
    number of megabytes (``"100"``) or a number with a unit (``"512KB"``,
    ``"100MB"``, ``"1.5GB"``)."""
    if isinstance(text, (int, float)):
        return int(text)
    s = str(text).strip().lower()
    if s in SIZE_PRESETS:
        return SIZE_PRESETS[s]
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([kmg]?i?b?)?", s)
    if not m:
        raise ValueError(f"cannot parse size {text!r}; use e.g. 100MB, 1GB, tiny, small")
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3, "b": 1}.get((m.group(2) or "mb")[:1], 1024**2)
    return max(1024, int(float(m.group(1)) * scale))


@dataclass
class Dataset:
    """One benchmark input: ``name`` (in the CSV and file names), ``source``
    (``"builtin"``, ``"package"`` or ``"file"``), a ``description`` for humans,
    and ``make(size_bytes, quick) -> object``, deterministic."""

    name: str
    source: str
    description: str
    make: Callable[[int, bool], Any]


def builtin_datasets():
    """The generated datasets (all seeded, so every run sees the same bytes);
    the pandas and scipy ones when those packages are installed."""
    from importlib.util import find_spec
    made = [
        ("atlas_c", "smooth 4-D probabilistic atlas, float32, C order", make_atlas),
        ("atlas_f", "same atlas, Fortran order", lambda s: make_atlas(s, "F")),
        ("images", "high-entropy RGB images, uint8 (n, h, w, 3)", make_images),
        ("text", "text corpus: list of str", make_text),
        ("sparse_table", "float64 table, ~90% NaN", make_sparse_table),
        ("timeseries", "int64 random-walk time series (16, n)", make_timeseries),
        ("noise", "float64 Gaussian noise, 1-D", make_noise),
        ("big", f"atlas_c repeated x{BIG_FACTOR} (memory strain)", make_big),
    ]
    if find_spec("pandas"):
        made.append(("dataframe", "pandas DataFrame: float, int, categorical, str and datetime "
                     "columns", make_dataframe))
    if find_spec("scipy"):
        made.append(("sparse_matrix", "scipy.sparse CSR matrix, float64, ~1% non-zero",
                     make_sparse_matrix))
    return [Dataset(name, "builtin", description, lambda s, q, make=make: make(s))
            for name, description, make in made]


_NIBABEL_EXAMPLES = ("anatomical.nii", "functional.nii", "example4d.nii.gz", "standard.nii.gz",
                     "example_nifti2.nii.gz")


def _digits(size_bytes, quick):
    from sklearn.datasets import load_digits
    return load_digits()


def _random_forest(size_bytes, quick):
    from sklearn.ensemble import RandomForestClassifier
    d = _digits(size_bytes, quick)
    # Fewer trees for the smaller runs: the model scales with --size like the generated data.
    trees = 10 if quick else 100 if size_bytes >= SIZE_PRESETS["medium"] else 30
    model = RandomForestClassifier(n_estimators=trees, random_state=0, n_jobs=1)
    return model.fit(d.data, d.target)


def package_datasets():
    """Real data bundled with nibabel and scikit-learn (no network needed); a
    package not installed lists none."""
    from importlib.util import find_spec
    out = []
    nibabel = find_spec("nibabel")  # its data found beside it: nibabel.testing imports pytest
    for fname in _NIBABEL_EXAMPLES if nibabel else ():
        p = os.path.join(nibabel.submodule_search_locations[0], "tests", "data", fname)
        if os.path.exists(p):
            out.append(Dataset("nifti_" + fname.split(".")[0], "package",
                               f"nibabel example {fname}",
                               lambda s, q, path=p: load_nifti_array(path)))
    if not find_spec("sklearn"):
        return out

    def sample_images(size_bytes, quick):
        from sklearn.datasets import load_sample_images
        return np.stack(load_sample_images().images)

    return out + [
        Dataset("digits", "package", "scikit-learn digits images, float64 (1797, 8, 8)",
                lambda s, q: np.ascontiguousarray(_digits(s, q).images)),
        Dataset("digits_dict", "package", "scikit-learn digits as a dict of arrays",
                lambda s, q: {k: getattr(_digits(s, q), k) for k in ("data", "target", "images")}),
        Dataset("sample_images", "package", "scikit-learn sample JPEGs, uint8 (2, 427, 640, 3)",
                sample_images),
        Dataset("random_forest", "package", "RandomForestClassifier fitted on digits (many small arrays)",
                _random_forest),
    ]


#: Suffixes of files that are unpickled to load them (code can run).
PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib", ".jl", ".pck", ".p")
_HDF5_SUFFIXES = (".h5", ".hdf5", ".he5")
#: Every suffix :func:`load_user_file` reads.
USER_SUFFIXES = (".npy", ".npz", ".nii", ".nii.gz") + _HDF5_SUFFIXES + (".cp",) + PICKLE_SUFFIXES


def unsupported_file(path):
    """None when :func:`load_user_file` reads ``path``'s kind of file, else why not."""
    if not path.lower().endswith(USER_SUFFIXES):
        return (f"{path}: unsupported file type; the benchmark reads "
                f"{' '.join(USER_SUFFIXES[:-len(PICKLE_SUFFIXES)])} files, and pickle/joblib files "
                f"({' '.join(PICKLE_SUFFIXES)}) with --trust-pickles, and .pt .pth "
                f".safetensors checkpoints")
    return None


def untrusted_pickle(path):
    """Why ``path`` cannot be measured without ``--trust-pickles``, or None."""
    if path.lower().endswith(PICKLE_SUFFIXES):
        return (f"{path}: a pickle/joblib file; loading it runs the code it names, so the "
                f"benchmark measures it only with --trust-pickles (only for files you trust)")
    return None


def load_nifti_array(path):
    """The data of a NIfTI file as an in-memory array (never a memmap)."""
    import nibabel as nib
    # np.array (not asarray) so a memmap of the file never leaks into the cache.
    return np.array(np.asanyarray(nib.load(path).dataobj))


def _unwrap_single(d):
    return next(iter(d.values())) if len(d) == 1 else d


def load_user_file(path, trust_pickles=False):
    """The object to benchmark from a user's file: an array, or a dict of
    arrays. Pickle-based files raise :class:`PermissionError` without
    ``trust_pickles`` (as does a ``.cp`` file needing classes outside the
    allowlist); a file of another kind raises :class:`ValueError`."""
    low = path.lower()
    if low.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    if low.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            return _unwrap_single({k: z[k] for k in z.files})
    if low.endswith((".nii", ".nii.gz")):
        return load_nifti_array(path)
    if low.endswith(_HDF5_SUFFIXES):
        arrays = _read_hdf5(path)
        if not arrays:
            raise ValueError(f"{path}: no datasets found in HDF5 file")
        return _unwrap_single(arrays)
    if low.endswith(".cp"):
        import cpersist
        # Plain data (arrays, dicts, lists, str ...) loads restricted; objects
        # of other classes need trust, like any pickle.
        try:
            return cpersist.load(path, trusted=trust_pickles)
        except cpersist.UntrustedObjectError as e:
            raise PermissionError(f"{path}: {e}; pass --trust-pickles to allow it") from e
    if low.endswith(PICKLE_SUFFIXES):
        if not trust_pickles:
            raise PermissionError(
                f"{path}: loading a pickle/joblib file runs code; pass --trust-pickles to allow it")
        import joblib
        # joblib.load reads plain pickles too (and its own compressed files).
        return joblib.load(path)
    raise ValueError(unsupported_file(path))


def _read_hdf5(path):
    """Every dataset of an HDF5 file by path; compound ones as structured arrays."""
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, node: out.__setitem__(name, node[()])
                     if isinstance(node, h5py.Dataset) else None)
    return out


def file_dataset(path, trust_pickles=False):
    """A :class:`Dataset` reading the user's file ``path`` (see
    :func:`load_user_file`)."""
    path = os.fspath(path)
    return Dataset("file_" + safe_name(os.path.basename(path)), "file", f"user file {path}",
                   lambda s, q: load_user_file(path, trust_pickles))


#: What ``--quick`` runs: every built-in and one of each kind of real data
#: (the other nibabel examples and the digits array add nothing new).
QUICK_DATASETS = [
    "atlas_c", "atlas_f", "images", "text", "sparse_table", "timeseries", "noise", "big",
    "dataframe", "sparse_matrix", "nifti_anatomical", "nifti_example4d", "digits_dict",
    "sample_images", "random_forest",
]
#: What the default run measures: the built-in datasets (but the memory
#: strain of "big") and a fitted model, at a size that keeps the run within minutes.
DEFAULT_DATASETS = ["atlas_c", "atlas_f", "images", "text", "sparse_table", "timeseries", "noise",
                    "dataframe", "sparse_matrix", "random_forest"]


def all_datasets():
    """Built-in plus package datasets, in display order."""
    return builtin_datasets() + package_datasets()


def select(patterns, available, group="source", kind="dataset"):
    """The items of ``available`` whose name matches one of ``patterns``
    (shell-style) or whose ``group`` attribute is one of them, in the order
    matched; every item when ``patterns`` is empty. A pattern that matches
    nothing raises :class:`ValueError` (a typo should not silently do nothing)."""
    if not patterns:
        return list(available)
    chosen = {}
    for pat in patterns:
        hits = [x for x in available if fnmatch.fnmatchcase(x.name, pat) or getattr(x, group) == pat]
        if not hits:
            raise ValueError(f"no {kind} matches {pat!r}; known: "
                             f"{', '.join(x.name for x in available)}")
        chosen.update((x.name, x) for x in hits if x.name not in chosen)
    return list(chosen.values())


def datasets_for_run(patterns, files, trust_pickles, default=None):
    """The datasets a run measures (``--datasets`` patterns, as for
    :func:`select`; else ``default``, names, or every dataset), then the user's
    ``files``; files given without patterns run alone."""
    available = all_datasets()
    if files and not patterns:
        chosen = []
    elif default is not None and not patterns:
        chosen = [d for d in available if d.name in default]
    else:
        chosen = select(patterns, available)
    return chosen + [file_dataset(p, trust_pickles) for p in files]


def _special_nbytes(obj):
    """Size of a pandas DataFrame or a scipy sparse matrix, or None for others."""
    mod = type(obj).__module__
    if mod.startswith("pandas") and hasattr(obj, "memory_usage"):
        usage = obj.memory_usage(deep=True, index=True)
        return int(usage.sum()) if hasattr(usage, "sum") else int(usage)
    if mod.startswith("scipy.sparse") and hasattr(obj, "nnz"):
        parts = [getattr(obj, a, None) for a in ("data", "indices", "indptr", "row", "col", "offsets")]
        return sum(p.nbytes for p in parts if isinstance(p, np.ndarray))
    return None


def deep_nbytes(obj):
    """In-memory size of an object graph: arrays count their data bytes
    (``nbytes``; views of a shared base once per view, which is what gets
    serialised), everything else ``sys.getsizeof`` of each distinct object
    reached through containers, ``__dict__`` and ``__getstate__``."""
    # States made by __getstate__ must outlive the walk (kept), or ids get reused.
    seen, keep, total, stack = set(), [], 0, [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        keep.append(o)
        special = _special_nbytes(o)
        if special is not None:
            total += special
            continue
        if isinstance(o, np.ndarray):
            total += o.nbytes
            if o.dtype.hasobject:
                stack.extend(o.ravel().tolist())
            continue
        total += sys.getsizeof(o)
        if isinstance(o, (str, bytes, bytearray, int, float, complex, bool, type(None))):
            continue
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        else:
            try:
                state = o.__getstate__()
            except Exception:
                state = getattr(o, "__dict__", None)
            if state is not None and state is not o:
                stack.append(state)
    return total


def describe(obj):
    """Short human description: ``float32 (91, 109, 91, 27) C`` or a type name."""
    if isinstance(obj, np.ndarray):
        order = "F" if (obj.flags.f_contiguous and not obj.flags.c_contiguous) else "C"
        return f"{obj.dtype} {tuple(obj.shape)} {order}"
    if isinstance(obj, dict):
        return f"dict of {len(obj)}"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} of {len(obj)}"
    if type(obj).__module__.startswith(("pandas", "scipy.sparse")) and hasattr(obj, "shape"):
        return f"{type(obj).__name__} {tuple(obj.shape)}"
    return type(obj).__name__


def save_cached(dataset, obj, path):
    """Pickle ``obj``, the data of ``dataset``, to ``path`` for the measuring
    processes; return what the result rows say of it (``source``,
    ``description``, ``size_bytes``, ``path``)."""
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=5)
    return {"source": dataset.source, "description": f"{dataset.description} [{describe(obj)}]",
            "size_bytes": deep_nbytes(obj), "path": path}


def load_cached(path):
    """Load a dataset cached (pickled, protocol 5) by the runner's plan step."""
    with open(path, "rb") as f:
        return pickle.load(f)
