"""Sphinx configuration of the cpersist documentation.

Build (warnings are errors, and every example runs)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html
    python -m sphinx -W --keep-going -b doctest docs docs/_build/doctest
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # document the checkout, installed or not

with open(os.path.join(ROOT, "cpersist", "__init__.py"), encoding="utf-8") as _f:
    release = re.search(r'__version__ = "([^"]+)"', _f.read()).group(1)
version = ".".join(release.split(".")[:2])

project = "cpersist"
author = "the cpersist developers"
copyright = "2026, the cpersist developers"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "numpydoc",
]

exclude_patterns = ["_build", "*.inc.rst", "**/*.inc.rst", "Thumbs.db", ".DS_Store"]
templates_path = []
# The benchmark figures live in _static/bench/ (absent in a fresh checkout).
html_static_path = ["_static"] if os.path.isdir(os.path.join(HERE, "_static")) else []
html_theme = "alabaster"
html_theme_options = {
    "description": "Persist Python objects holding numpy arrays, fast and compressed",
    "fixed_sidebar": True,
}
nitpicky = False
default_role = "py:obj"

# -- autodoc / numpydoc -------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# -- doctest ------------------------------------------------------------------
# The examples (in the .rst pages and in the docstrings autodoc pulls in)
# write files such as "model.cp": run each page's examples in a fresh
# temporary directory, with numpy and cpersist imported.
#
# Examples that need an optional library no extra of the test command
# installs (torch) are ``.. doctest::`` blocks with ``:skipif:
# _missing("torch")``: skipped where it is not installed, so that the docs
# build on a fresh machine; where CI=true (.ci/run installs it) they always
# run, and fail if it is missing.
doctest_global_setup = """
import os as _os, shutil as _shutil, tempfile as _tempfile
import numpy as np
import cpersist


def _missing(module):
    if _os.environ.get("CI") == "true":
        return False
    try:
        __import__(module)
    except ImportError:
        return True
    return False


_doc_old_cwd = _os.getcwd()
_doc_tmp = _tempfile.mkdtemp(prefix="cpersist-doctest-")
_os.chdir(_doc_tmp)
"""
doctest_global_cleanup = """
_os.chdir(_doc_old_cwd)
_shutil.rmtree(_doc_tmp, ignore_errors=True)
"""
import doctest as _doctest  # noqa: E402

doctest_default_flags = (_doctest.ELLIPSIS | _doctest.NORMALIZE_WHITESPACE
                         | _doctest.IGNORE_EXCEPTION_DETAIL | _doctest.DONT_ACCEPT_TRUE_FOR_1)
