"""Datasets for the storage benchmark.

Three sources:

* built in, generated reproducibly from a fixed seed at a size picked by
  ``--size`` (a smooth 4-D probabilistic atlas in C and Fortran order,
  high-entropy images, a text corpus, a sparse table full of NaN, an integer
  time series, pure noise and a "big" variant);
* real data shipped inside installed packages (nibabel's example NIfTI files,
  scikit-learn's digits and sample images, and a random forest fitted on the
  digits);
* the user's own files (``.npy``, ``.npz``, ``.nii``/``.nii.gz``,
  ``.h5``/``.hdf5``, ``.cp`` and, only with ``trust_pickles``, joblib/pickle
  files).

Every dataset is built once by the parent process and pickled into the
output directory's scratch space (``_work/datasets``); the measurement subprocesses load that file, so all
methods see byte-identical input and no subprocess pays for generating data.
"""

import fnmatch
import os
import pickle
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, List

import numpy as np

__all__ = [
    "Dataset",
    "SIZE_PRESETS",
    "parse_size",
    "builtin_datasets",
    "package_datasets",
    "file_dataset",
    "all_datasets",
    "QUICK_DATASETS",
    "select_datasets",
    "datasets_for_run",
    "deep_nbytes",
    "describe",
    "save_cached",
    "load_cached",
    "PICKLE_SUFFIXES",
    "USER_SUFFIXES",
    "unsupported_file",
    "DEFAULT_DATASETS",
]

#: Named sizes accepted by ``--size`` (bytes per built-in dataset).
SIZE_PRESETS = {
    "tiny": 256 * 1024,  # --quick: every method in seconds
    "small": 8 * 1024**2,  # CI-friendly but still past the L2/L3 caches
    "medium": 100 * 1024**2,  # the default: what the issue calls ~100 MB
    "large": 1024**3,
}

SEED = 20240503

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
                f"({' '.join(PICKLE_SUFFIXES)}) with --trust-pickles")
    return None


def parse_size(text):
    """Parse a ``--size`` value into bytes.

    Parameters
    ----------
    text : str or int
        A preset name (``tiny``, ``small``, ``medium``, ``large``), a plain
        number of megabytes (``"100"``), or a number with a unit
        (``"512KB"``, ``"100MB"``, ``"1.5GB"``).

    Returns
    -------
    int
        The size in bytes.
    """
    if isinstance(text, (int, float)):
        return int(text)
    s = str(text).strip().lower()
    if s in SIZE_PRESETS:
        return SIZE_PRESETS[s]
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([kmg]?i?b?)?", s)
    if not m:
        raise ValueError(f"cannot parse size {text!r}; use e.g. 100MB, 1GB, tiny, small")
    value = float(m.group(1))
    unit = (m.group(2) or "mb")[:1]
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3, "b": 1}.get(unit, 1024**2)
    return max(1024, int(value * scale))


@dataclass
class Dataset:
    """One benchmark input.

    Attributes
    ----------
    name : str
        Unique name used in the CSV and file names.
    source : str
        ``"builtin"``, ``"package"`` or ``"file"``.
    description : str
        What it is, for humans.
    make : callable
        ``make(size_bytes, quick) -> object``; must be deterministic.
    """

    name: str
    source: str
    description: str
    make: Callable[[int, bool], Any]
    tags: List[str] = field(default_factory=list)


# ---------------------------------------------------------------------------
# Built-in generated datasets
# ---------------------------------------------------------------------------

_MNI_2MM = (91, 109, 91)  # the usual 2 mm MNI template grid


def make_atlas(size_bytes, order="C", seed=SEED):
    """A smooth 4-D probabilistic atlas (x, y, z, region), float32.

    Each region is a sum of a few Gaussian blobs; the maps are normalised so
    that they sum to at most one per voxel (like a probabilistic atlas) and
    are zero outside an ellipsoidal "brain" mask, which is what real atlases
    look like and what makes them compressible.

    Parameters
    ----------
    size_bytes : int
        Target in-memory size.
    order : {"C", "F"}
        Memory layout of the result.
    seed : int
        Seed of the generator.

    Returns
    -------
    numpy.ndarray
    """
    rng = np.random.default_rng(seed)
    voxels = int(np.prod(_MNI_2MM))
    n_regions = int(round(size_bytes / (4 * voxels)))
    if n_regions >= 2:
        shape = _MNI_2MM
    else:
        # Smaller than two full-resolution maps: shrink the grid instead.
        n_regions = 2
        f = (size_bytes / (4 * 2 * voxels)) ** (1 / 3)
        shape = tuple(max(4, int(round(d * f))) for d in _MNI_2MM)
    axes = [np.linspace(-1.0, 1.0, d, dtype=np.float32) for d in shape]
    out = np.empty(shape + (n_regions,), dtype=np.float32)
    for r in range(n_regions):
        acc = np.zeros(shape, dtype=np.float32)
        for _ in range(3):
            c = rng.uniform(-0.6, 0.6, size=3)
            w = rng.uniform(0.08, 0.3, size=3)
            g = [np.exp(-((a - ci) ** 2) / (2 * wi**2)).astype(np.float32) for a, ci, wi in zip(axes, c, w)]
            acc += rng.uniform(0.5, 1.0) * g[0][:, None, None] * g[1][None, :, None] * g[2][None, None, :]
        out[..., r] = acc
    total = out.sum(axis=-1, keepdims=True)
    out /= total + np.float32(0.05)
    x, y, z = np.meshgrid(*axes, indexing="ij", sparse=True)
    mask = (x / 0.9) ** 2 + (y / 0.95) ** 2 + (z / 0.85) ** 2 <= 1.0
    out *= mask[..., None]
    # Atlases are published with limited precision; rounding the mantissa
    # keeps them realistic (and the low bits are not pure noise).
    np.round(out, 4, out=out)
    return np.asfortranarray(out) if order == "F" else out


def make_images(size_bytes, seed=SEED + 1):
    """High-entropy RGB uint8 images (n, h, w, 3): gradients plus strong noise."""
    rng = np.random.default_rng(seed)
    side = 256 if size_bytes >= 4 * 256 * 256 * 3 else 64
    n = max(2, int(size_bytes // (side * side * 3)))
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
    out = np.empty((n, side, side, 3), dtype=np.uint8)
    for i in range(n):
        base = np.stack(
            [
                255 * (0.5 + 0.5 * np.sin(6.28 * (xx * rng.uniform(0.5, 3) + rng.uniform()))),
                255 * yy * rng.uniform(0.3, 1.0),
                255 * (0.5 + 0.5 * np.cos(6.28 * (xx + yy) * rng.uniform(0.5, 2))),
            ],
            axis=-1,
        )
        noisy = base + rng.normal(0.0, 24.0, size=base.shape).astype(np.float32)
        out[i] = np.clip(noisy, 0, 255).astype(np.uint8)
    return out


def make_text(size_bytes, seed=SEED + 2):
    """A text corpus: list of documents made of Zipf-distributed pseudo-words."""
    rng = np.random.default_rng(seed)
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "pe", "da", "qu", "ix", "or", "el", "an", "th"]
    n_vocab = 20000
    lens = rng.integers(1, 5, size=n_vocab)
    vocab = ["".join(syll[j] for j in rng.integers(0, len(syll), size=k)) for k in lens]
    # ~8 characters per word including the separator.
    n_words = max(200, int(size_bytes // 8))
    ids = rng.zipf(1.3, size=n_words) % n_vocab
    doc_lens = rng.integers(20, 400, size=max(1, n_words // 50))
    bounds = np.cumsum(doc_lens)
    bounds = bounds[bounds < n_words]
    docs = []
    getter = vocab.__getitem__
    for chunk in np.split(ids, bounds):
        if len(chunk):
            docs.append(" ".join(map(getter, chunk.tolist())))
    return docs


def make_sparse_table(size_bytes, seed=SEED + 3):
    """A float64 table (rows, 40) with ~90 % missing values (NaN)."""
    rng = np.random.default_rng(seed)
    n_cols = 40
    n_rows = max(16, int(size_bytes // (8 * n_cols)))
    out = np.full((n_rows, n_cols), np.nan)
    for c in range(n_cols):
        present = rng.random(n_rows) < rng.uniform(0.02, 0.2)
        k = int(present.sum())
        if c % 2:
            vals = rng.poisson(rng.uniform(1, 50), size=k).astype(np.float64)
        else:
            vals = np.round(rng.normal(rng.uniform(-100, 100), 10, size=k), 2)
        out[present, c] = vals
    return out


def make_timeseries(size_bytes, seed=SEED + 4):
    """An int64 time series (16 channels, samples): random walks of counters."""
    rng = np.random.default_rng(seed)
    n_ch = 16
    n = max(16, int(size_bytes // (8 * n_ch)))
    steps = rng.integers(-3, 4, size=(n_ch, n), dtype=np.int64)
    out = np.cumsum(steps, axis=1)
    out += rng.integers(0, 1_000_000, size=(n_ch, 1))
    return out


def make_noise(size_bytes, seed=SEED + 5):
    """Pure float64 Gaussian noise (incompressible), 1-D."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(max(16, int(size_bytes // 8)))


def make_dataframe(size_bytes, seed=SEED + 6):
    """A pandas DataFrame: float, int, categorical, string and datetime columns."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = max(16, int(size_bytes // 60))  # ~60 bytes per row in memory, strings included
    cities = np.array(["Paris", "Lyon", "Lille", "Nantes", "Nice", "Brest", "Metz", "Caen"])
    return pd.DataFrame({
        "price": np.round(rng.lognormal(3, 1, n), 2),
        "count": rng.poisson(7, n).astype(np.int64),
        "city": pd.Categorical(cities[rng.integers(0, len(cities), n)]),
        "code": [f"K{v:05d}" for v in rng.integers(0, 20000, n).tolist()],
        "when": pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 10**6, n), unit="s"),
    })


def make_sparse_matrix(size_bytes, seed=SEED + 7):
    """A scipy CSR matrix, float64, about 1 % non-zero (the rest implicit)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    nnz = max(16, int(size_bytes // 12))  # 8 bytes of value + 4 of column index each
    n_cols = 20000
    n_rows = max(4, nnz // (n_cols // 100))
    return sp.random(n_rows, n_cols, density=nnz / (n_rows * n_cols), format="csr",
                     dtype=np.float64, rng=rng)


BIG_FACTOR = 4


def make_big(size_bytes):
    """The C-order atlas repeated ``BIG_FACTOR`` times along its last axis."""
    a = make_atlas(size_bytes, "C")
    return np.concatenate([a] * BIG_FACTOR, axis=-1)


def builtin_datasets():
    """The generated datasets (all seeded, so every run sees the same bytes).

    Returns
    -------
    list of Dataset
    """
    return [
        Dataset("atlas_c", "builtin", "smooth 4-D probabilistic atlas, float32, C order",
                lambda s, q: make_atlas(s, "C"), ["array", "4d"]),
        Dataset("atlas_f", "builtin", "same atlas, Fortran order",
                lambda s, q: make_atlas(s, "F"), ["array", "4d"]),
        Dataset("images", "builtin", "high-entropy RGB images, uint8 (n, h, w, 3)",
                lambda s, q: make_images(s), ["array", "4d"]),
        Dataset("text", "builtin", "text corpus: list of str",
                lambda s, q: make_text(s), ["object"]),
        Dataset("sparse_table", "builtin", "float64 table, ~90% NaN",
                lambda s, q: make_sparse_table(s), ["array", "2d"]),
        Dataset("timeseries", "builtin", "int64 random-walk time series (16, n)",
                lambda s, q: make_timeseries(s), ["array", "2d"]),
        Dataset("noise", "builtin", "float64 Gaussian noise, 1-D",
                lambda s, q: make_noise(s), ["array", "1d"]),
        Dataset("big", "builtin", f"atlas_c repeated x{BIG_FACTOR} (memory strain)",
                lambda s, q: make_big(s), ["array", "4d", "big"]),
    ] + _optional_builtins()


def _optional_builtins():
    """The pandas and scipy datasets, when those packages are installed."""
    out = []
    try:
        import pandas  # noqa: F401
    except ImportError:
        pass
    else:
        out.append(Dataset("dataframe", "builtin",
                           "pandas DataFrame: float, int, categorical, str and datetime columns",
                           lambda s, q: make_dataframe(s), ["object", "table"]))
    try:
        import scipy.sparse  # noqa: F401
    except ImportError:
        pass
    else:
        out.append(Dataset("sparse_matrix", "builtin", "scipy.sparse CSR matrix, float64, ~1% non-zero",
                           lambda s, q: make_sparse_matrix(s), ["object", "sparse"]))
    return out


# ---------------------------------------------------------------------------
# Real data shipped inside installed packages
# ---------------------------------------------------------------------------

_NIBABEL_EXAMPLES = (
    "anatomical.nii",
    "functional.nii",
    "example4d.nii.gz",
    "standard.nii.gz",
    "example_nifti2.nii.gz",
)


def _load_nifti_array(path):
    import nibabel as nib

    img = nib.load(path)
    # np.array (not asarray) so a memmap of the file never leaks into the cache.
    return np.array(np.asanyarray(img.dataobj))


def _digits_images(size_bytes, quick):
    from sklearn.datasets import load_digits

    return np.ascontiguousarray(load_digits().images)


def _digits_dict(size_bytes, quick):
    from sklearn.datasets import load_digits

    d = load_digits()
    return {"data": d.data, "target": d.target, "images": d.images}


def _sample_images(size_bytes, quick):
    from sklearn.datasets import load_sample_images

    return np.stack(load_sample_images().images)


def _random_forest(size_bytes, quick):
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier

    d = load_digits()
    # Fewer trees for the smaller runs: the model scales with --size like the generated data.
    trees = 10 if quick else 100 if size_bytes >= SIZE_PRESETS["medium"] else 30
    model = RandomForestClassifier(n_estimators=trees, random_state=0, n_jobs=1)
    return model.fit(d.data, d.target)


def package_datasets():
    """Real data bundled with nibabel and scikit-learn (no network needed).

    Datasets whose package is missing are simply not listed.

    Returns
    -------
    list of Dataset
    """
    out = []
    try:
        from nibabel.testing import data_path
    except ImportError:
        data_path = None
    if data_path:
        for fname in _NIBABEL_EXAMPLES:
            p = os.path.join(data_path, fname)
            if os.path.exists(p):
                out.append(Dataset(
                    "nifti_" + fname.split(".")[0], "package",
                    f"nibabel example {fname}",
                    (lambda path: lambda s, q: _load_nifti_array(path))(p),
                    ["array"],
                ))
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return out
    out += [
        Dataset("digits", "package", "scikit-learn digits images, float64 (1797, 8, 8)",
                _digits_images, ["array", "3d"]),
        Dataset("digits_dict", "package", "scikit-learn digits as a dict of arrays",
                _digits_dict, ["dict"]),
        Dataset("sample_images", "package", "scikit-learn sample JPEGs, uint8 (2, 427, 640, 3)",
                _sample_images, ["array", "4d"]),
        Dataset("random_forest", "package", "RandomForestClassifier fitted on digits (many small arrays)",
                _random_forest, ["object", "model"]),
    ]
    return out


# ---------------------------------------------------------------------------
# The user's own files
# ---------------------------------------------------------------------------


def _unwrap_single(d):
    return next(iter(d.values())) if len(d) == 1 else d


def load_user_file(path, trust_pickles=False):
    """Load a user file into the object to benchmark.

    Parameters
    ----------
    path : str
        ``.npy``, ``.npz``, ``.nii``, ``.nii.gz``, ``.h5``, ``.hdf5``, ``.cp``,
        or a joblib/pickle file (``.pkl``, ``.pickle``, ``.joblib``, ...).
    trust_pickles : bool
        Pickle-based files (joblib, pickle, and ``.cp`` files which may hold
        pickled objects) run code when loaded: they are only loaded when this
        is True.

    Returns
    -------
    object
        An array, or a dict of arrays for multi-array containers (a container
        holding a single array yields that array, so array-only methods
        apply).

    Raises
    ------
    PermissionError
        A pickle-based file without ``trust_pickles``.
    ValueError
        Unknown file type.
    """
    low = path.lower()
    if low.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    if low.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            return _unwrap_single({k: z[k] for k in z.files})
    if low.endswith((".nii", ".nii.gz")):
        return _load_nifti_array(path)
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
        except getattr(cpersist, "UntrustedObjectError", ()) as e:
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
    try:
        import h5py
    except ImportError:
        h5py = None
    if h5py is not None:
        out = {}

        def visit(name, node):
            if isinstance(node, h5py.Dataset):
                out[name] = node[()]

        with h5py.File(path, "r") as f:
            f.visititems(visit)
        return out
    import tables

    with tables.open_file(path, "r") as f:
        # Leaf covers arrays and tables (compound datasets, read as records).
        return {node._v_pathname.lstrip("/"): node.read() for node in f.walk_nodes("/", "Leaf")}


def file_dataset(path, trust_pickles=False):
    """A :class:`Dataset` reading the user's file ``path``.

    Parameters
    ----------
    path : str
    trust_pickles : bool
        See :func:`load_user_file`.

    Returns
    -------
    Dataset
    """
    path = os.fspath(path)
    base = os.path.basename(path)
    name = "file_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", base)
    return Dataset(name, "file", f"user file {path}",
                   lambda s, q: load_user_file(path, trust_pickles), ["file"])


#: What ``--quick`` runs: every built-in and one of each kind of real data
#: (the other nibabel examples and the digits array add nothing new).
QUICK_DATASETS = [
    "atlas_c", "atlas_f", "images", "text", "sparse_table", "timeseries", "noise", "big",
    "dataframe", "sparse_matrix", "nifti_anatomical", "nifti_example4d", "digits_dict", "sample_images", "random_forest",
]


#: What the default run measures: the built-in datasets (but the memory
#: strain of "big") and a fitted model, at a size that keeps the run within minutes.
DEFAULT_DATASETS = [name for name in QUICK_DATASETS if name == "random_forest" or name in (
    "atlas_c", "atlas_f", "images", "text", "sparse_table", "timeseries", "noise", "dataframe",
    "sparse_matrix")]


def all_datasets():
    """Built-in plus package datasets, in display order."""
    return builtin_datasets() + package_datasets()


def select_datasets(patterns, available):
    """Filter datasets by names or shell-style patterns (``nifti_*``).

    Parameters
    ----------
    patterns : sequence of str or None
        None or empty keeps everything; ``"builtin"``/``"package"`` select a
        whole source.
    available : sequence of Dataset

    Returns
    -------
    list of Dataset

    Raises
    ------
    ValueError
        A pattern matched nothing (a typo should not silently do nothing).
    """
    if not patterns:
        return list(available)
    chosen, seen = [], set()
    for pat in patterns:
        hits = [d for d in available if fnmatch.fnmatchcase(d.name, pat) or d.source == pat]
        if not hits:
            names = ", ".join(d.name for d in available)
            raise ValueError(f"no dataset matches {pat!r}; known: {names}")
        for d in hits:
            if d.name not in seen:
                seen.add(d.name)
                chosen.append(d)
    return chosen


def datasets_for_run(patterns, files, trust_pickles, default=None):
    """The datasets a run measures, then the user's files.

    Parameters
    ----------
    patterns : sequence of str or None
        ``--datasets``, as for :func:`select_datasets`.
    files : sequence of str
        User files; when given without ``patterns``, only they run.
    trust_pickles : bool
        Passed to :func:`file_dataset`.
    default : sequence of str, optional
        Dataset names used when neither ``patterns`` nor ``files`` are
        given (None: every dataset).
    """
    available = all_datasets()
    if files and not patterns:
        chosen = []
    elif default is not None and not patterns:
        chosen = [d for d in available if d.name in default]
    else:
        chosen = select_datasets(patterns, available)
    return chosen + [file_dataset(p, trust_pickles) for p in files]


# ---------------------------------------------------------------------------
# Sizes, descriptions, cache
# ---------------------------------------------------------------------------


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
    """In-memory size of an object graph.

    Arrays count their data bytes (``nbytes``; views of a shared base count
    once per view, which is what gets serialised), everything else counts
    ``sys.getsizeof`` of each distinct object reached through containers,
    ``__dict__`` and ``__getstate__``.

    Parameters
    ----------
    obj : object

    Returns
    -------
    int
    """
    seen = set()
    keep = []  # states made by __getstate__ must outlive the walk, or ids get reused
    total = 0
    stack = [obj]
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
            if o.dtype.hasobject:
                total += o.nbytes
                stack.extend(o.ravel().tolist())
            else:
                total += o.nbytes
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
            state = None
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
    return {
        "source": dataset.source,
        "description": f"{dataset.description} [{describe(obj)}]",
        "size_bytes": deep_nbytes(obj),
        "path": path,
    }


def load_cached(path):
    """Load a dataset cached (pickled, protocol 5) by the runner's plan step."""
    with open(path, "rb") as f:
        return pickle.load(f)
