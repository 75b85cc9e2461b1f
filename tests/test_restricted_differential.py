"""A restricted load gives what a trusted load gives: a slice of the lab's
differential run (``python -m benchmarks.differential_restricted`` runs all
of it), every family whose library is installed, where CI runs all of them."""

import collections
import importlib.util
import os

from benchmarks.differential_restricted import first_difference, run


def test_restricted_loads_equal_trusted_loads():
    if os.environ.get("CI") == "true":  # CI installs them: their objects must be compared
        import jax  # noqa: F401
        import ml_dtypes  # noqa: F401
        import torch  # noqa: F401
    counts, problems = run(every=53, compress=(0, 3), protocols=(0, 5))
    assert not problems, "\n".join(problems[:20])
    assert counts["loads compared"] == counts["identical"] >= 300
    assert counts["dry runs"] > 0 and counts["objects (numpy)"] > 0
    installed = {f: importlib.util.find_spec(f) is not None
                 for f in ("torch", "ml_dtypes", "jax")}
    assert all(counts[f"objects ({f})"] > 0 for f, there in installed.items() if there)


def test_the_comparison_sees_what_it_checks():
    import numpy as np

    a = np.arange(6.0).reshape(2, 3)
    assert first_difference({"a": a, "b": a}, {"a": a.copy(), "b": a.copy()}) is not None
    assert "layout" in first_difference(a, np.asfortranarray(a))
    assert "bytes" in first_difference(a, a + 1)
    assert "dtype" in first_difference(a, a.astype(">f8"))
    read_only = a.copy()
    read_only.flags.writeable = False
    assert "layout" in first_difference(a, read_only)
    masked = np.ma.masked_array([1.0, 2.0], mask=[0, 1], fill_value=5.0)
    assert "fill value" in first_difference(masked, np.ma.masked_array([1.0, 2.0], mask=[0, 1]))
    assert "mask" in first_difference(masked, np.ma.masked_array([1.0, 2.0], mask=[1, 1]))
    assert first_difference(float("nan"), float("nan")) is None
    assert first_difference(0.0, -0.0) is not None
    assert first_difference(collections.OrderedDict(a=1), {"a": 1}) is not None
    nan_na = np.dtypes.StringDType(na_object=float("nan"))  # NaN is not NaN, yet the same NA
    assert first_difference(np.array(["a", np.nan], nan_na),
                            np.array(["a", np.nan], np.dtypes.StringDType(na_object=np.nan))) is None
