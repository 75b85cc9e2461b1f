"""Reading the user's own files into the object to benchmark: which files are
supported (``.npy``, ``.npz``, ``.nii``/``.nii.gz``, ``.h5``/``.hdf5``, ``.cp``
and, only with ``trust_pickles``, joblib/pickle files) and how each is loaded.
"""

import numpy as np

__all__ = ["PICKLE_SUFFIXES", "USER_SUFFIXES", "unsupported_file", "untrusted_pickle",
           "load_user_file", "load_nifti_array"]

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
    img = nib.load(path)
    # np.array (not asarray) so a memmap of the file never leaks into the cache.
    return np.array(np.asanyarray(img.dataobj))


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

    def visit(name, node):
        if isinstance(node, h5py.Dataset):
            out[name] = node[()]

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out
