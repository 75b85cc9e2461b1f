"""Packaging for cpersist."""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "cpersist" / "__init__.py").read_text()).group(1)

BENCH = ["tables>=3.9", "nibabel>=5.0", "matplotlib>=3.7", "tqdm>=4.60", "joblib>=1.3",
         "scikit-learn>=1.3", "zarr>=3.0", "h5py>=3.8", "hdf5plugin>=4.0", "safetensors>=0.4",
         "pandas>=2.0", "scipy>=1.10"]
DOCS = ["sphinx>=7", "numpydoc>=1.6"]
# Lazy arrays as dask arrays, on threads or a distributed cluster.
DASK = ["dask[array]>=2023.1", "distributed>=2023.1"]
# URLs (s3://, gs://, memory://...) go through fsspec; s3fs for S3.
REMOTE = ["fsspec>=2023.1", "s3fs>=2023.1"]
# Remote storage is tested against moto's S3 server. moto needs boto3, s3fs
# needs aiobotocore, and each aiobotocore release accepts only the few
# botocore releases it was made for, while each boto3 release needs its own
# botocore or newer: left free, pip tries the newest boto3 first and then
# every older one until it meets aiobotocore's botocore. Bounding them to one
# release line that fits together lets pip resolve at once.
S3_TEST = ["moto[server]>=5.2.5", "s3fs>=2026.9.0", "aiobotocore>=3.10.0,<3.11",
           "boto3>=1.43.115,<1.43.118"]
# Checkpoints of torch tensors (and converting them from/to safetensors).
# Not in the test extra: an unpinned torch may resolve to a CUDA build of
# several GB; CI installs the CPU wheel of an exact version first (.ci/run).
TORCH = ["torch>=2.1,<3", "safetensors>=0.4"]
# JAX arrays as sections, and the peers the checkpoint benchmark compares
# (orbax-checkpoint, flax with its optax). jaxlib is released in step with jax:
# pinned together to one release that has Python 3.11 wheels, with the flax,
# optax and orbax-checkpoint releases that resolve with it.
JAX = ["jax==0.10.2", "jaxlib==0.10.2", "ml_dtypes>=0.6", "flax==0.12.8", "optax==0.2.8",
       "orbax-checkpoint==0.12.8"]
# The test suite runs the benchmark in quick mode, builds the docs and runs
# lazy arrays on dask, so the test extra pulls in all of their dependencies.
# pytest-xdist: the README's test command runs the suite on every core.
# ml_dtypes: numpy arrays of its types (bfloat16, float8...), tested without jax.
# atheris: the coverage-guided fuzzer of the restricted load
# (benchmarks/fuzz_restricted.py).
TOOLS = ["pytest>=7", "pytest-xdist>=3.5", "hypothesis>=6", "ml_dtypes>=0.6",
         "atheris>=2.3; platform_system == 'Linux'"]
TEST = TOOLS + S3_TEST + BENCH + DOCS + DASK + REMOTE

setup(
    name="cpersist",
    version=VERSION,
    description="Persist Python objects holding numpy arrays, fast and compressed",
    long_description=(HERE / "README.rst").read_text(),
    long_description_content_type="text/x-rst",
    license="BSD-3-Clause",
    packages=find_packages(include=["cpersist", "cpersist.*"]),
    python_requires=">=3.9",
    # blosc2 >= 4 ships libblosc2 inside its package, where cpersist loads it
    # from (earlier wheels put it in a lib64/ folder beside the package).
    install_requires=["numpy>=1.23", "blosc2>=4.0", "lz4>=4.0", "zstandard>=0.21", "xxhash>=3.0"],
    extras_require={
        "bench": BENCH,
        "test": TEST,
        "docs": DOCS,
        "dask": DASK,
        "remote": REMOTE,
        "torch": TORCH,
        "jax": JAX,
        "all": TEST,
    },
    entry_points={"console_scripts": ["cpersist=cpersist.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering",
        "License :: OSI Approved :: BSD License",
    ],
)
