"""The built-in benchmark data, generated reproducibly from a fixed seed:
each generator takes ``size_bytes`` and returns the same object for the
same size."""

import numpy as np

SEED = 20240503

_MNI_2MM = (91, 109, 91)  # the usual 2 mm MNI template grid


def make_atlas(size_bytes, order="C", seed=SEED):
    """A smooth 4-D probabilistic atlas (x, y, z, region), float32, of about
    ``size_bytes`` in ``order``: each region a sum of a few Gaussian blobs, the
    maps normalised to sum to at most one per voxel and zero outside an
    ellipsoidal "brain" mask, which is what real atlases look like and what
    makes them compressible."""
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
        base = np.stack([
            255 * (0.5 + 0.5 * np.sin(6.28 * (xx * rng.uniform(0.5, 3) + rng.uniform()))),
            255 * yy * rng.uniform(0.3, 1.0),
            255 * (0.5 + 0.5 * np.cos(6.28 * (xx + yy) * rng.uniform(0.5, 2)))], axis=-1)
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
    return [" ".join(map(vocab.__getitem__, chunk.tolist())) for chunk in np.split(ids, bounds)
            if len(chunk)]


def make_sparse_table(size_bytes, seed=SEED + 3):
    """A float64 table (rows, 40) with ~90 % missing values (NaN)."""
    rng = np.random.default_rng(seed)
    n_cols = 40
    n_rows = max(16, int(size_bytes // (8 * n_cols)))
    out = np.full((n_rows, n_cols), np.nan)
    for c in range(n_cols):
        present = rng.random(n_rows) < rng.uniform(0.02, 0.2)
        k = int(present.sum())
        out[present, c] = (rng.poisson(rng.uniform(1, 50), size=k).astype(np.float64) if c % 2
                           else np.round(rng.normal(rng.uniform(-100, 100), 10, size=k), 2))
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
    return np.random.default_rng(seed).standard_normal(max(16, int(size_bytes // 8)))


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
