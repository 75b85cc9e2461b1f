"""torch, jax and ml_dtypes stay optional: nothing imports torch (jax) unless
a dump meets a tensor (JAX array) or a load rebuilds one, nor ml_dtypes
unless a load rebuilds an array of its types; where CI runs, all must be there."""

import os

import pytest

from ._fresh import ROOT, run_code


def _modules_after(code):
    probe = "import sys; print('MODULES:', *sorted(m for m in sys.modules if m in " \
            "('torch', 'jax') or m.startswith(('torch.', 'cpersist.pickling.tensors', " \
            "'ml_dtypes', 'jax.', 'jaxlib'))))"
    out = run_code(f"{code}\n{probe}", timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split("MODULES:")[-1].split())


def test_torch_is_installed_where_ci_runs():
    # .ci/run sets CI=true and installs torch: its tensor tests must run there.
    if os.environ.get("CI") == "true":
        import torch  # noqa: F401


def test_jax_is_installed_where_ci_runs():
    # .ci/run sets CI=true and installs the jax extra: its tests must run there.
    if os.environ.get("CI") == "true":
        import flax  # noqa: F401
        import jax  # noqa: F401
        import optax  # noqa: F401


def test_ml_dtypes_is_installed_where_ci_runs():
    # The test extra installs it: its tests must run there, not skip.
    if os.environ.get("CI") == "true":
        import ml_dtypes  # noqa: F401


def test_non_tensor_paths_import_no_torch(tmp_path):
    path = str(tmp_path / "a.cp")
    code = ("import numpy as np, cpersist\n"
            f"cpersist.dump({{'a': np.arange(10.0), 'b': ['x']}}, {path!r}, compress=3)\n"
            f"cpersist.load({path!r}); cpersist.load({path!r}, trusted=False)\n"
            f"cpersist.load({path!r}, mmap_mode='r'); cpersist.inspect({path!r})\n"
            f"with cpersist.open({path!r}) as f: f.arrays; f.load(lazy=True)")
    assert _modules_after(code) == set()


def test_a_file_of_tensors_imports_torch_when_loaded(tmp_path):
    torch = pytest.importorskip("torch")
    import cpersist

    path = str(tmp_path / "t.cp")
    cpersist.dump({"w": torch.ones(3)}, path)
    after = _modules_after(f"import cpersist; assert cpersist.load({path!r})['w'].sum() == 3")
    assert "torch" in after
    # Listing needs no torch, nor does the text of cpersist info.
    assert "torch" not in _modules_after(
        f"import cpersist; cpersist.inspect({path!r})\n"
        f"from cpersist.cli import main; assert main(['info', '--details', {path!r}]) == 0")


def test_ci_installs_the_cpu_torch_before_the_test_command():
    import re
    from pathlib import Path

    ci = Path(ROOT, ".ci", "run").read_text().splitlines()
    torch_at = ci.index("pip install torch==2.13.0")
    tests_at = next(i for i, line in enumerate(ci) if "python -m pytest" in line)
    assert torch_at < tests_at and "export CI=true" in ci[torch_at:tests_at]
    setup = Path(ROOT, "setup.py").read_text()
    low, high = re.search(r'"torch>=([\d.]+),<(\d+)"', setup).groups()
    assert tuple(map(int, low.split("."))) <= (2, 13, 0) < (int(high),)
    # The test extra must not pull an unpinned torch (a CUDA build of several GB).
    assert "TORCH" not in re.search(r"^TEST = .*$", setup, re.M).group(0)
    # The jax extra too, before the tests, and with jax and jaxlib of one release.
    assert ci.index("pip install '.[jax]'") < tests_at
    jax, jaxlib = (re.search(rf'"{name}==([\d.]+)"', setup).group(1) for name in ("jax", "jaxlib"))
    assert jax == jaxlib


def test_a_file_of_ml_dtypes_arrays_imports_ml_dtypes_only_when_loaded(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    import cpersist

    path = str(tmp_path / "m.cp")
    cpersist.dump({"w": np.ones(100_000, ml_dtypes.bfloat16),
                   "b": np.ones(10, ml_dtypes.int4)}, path, compress=3)
    after = _modules_after(
        f"import cpersist; assert cpersist.load({path!r})['w'].dtype.name == 'bfloat16'")
    assert "ml_dtypes" in after and "torch" not in after
    listing = (f"import cpersist; cpersist.inspect({path!r}); cpersist.verify({path!r})\n"
               f"from cpersist.cli import main; main(['info', {path!r}])")
    assert _modules_after(listing) == set()
