"""The documentation builds without a warning and its examples run.

``sphinx -W -b html`` fails on any warning (a broken reference, a docstring
numpydoc cannot parse, a missing image); ``-b doctest`` runs every ``>>>``
example and ``testcode`` block of the pages and of the docstrings autodoc
pulls in (dump, load, convert, ...). The README's example is run too.
Needs the ``docs`` extra (Sphinx and numpydoc). The examples of
checkpoints.rst need torch, which the test extra does not install: they are
skipped without it, except where CI=true (.ci/run installs torch).
"""

import importlib.util
import os
import re
import shutil

from ._fresh import ROOT, fresh_env, run_code, run_python

DOCS = os.path.join(ROOT, "docs")
PAGES = ["index", "getting_started", "user_guide", "larger_than_memory", "growing", "checkpoints",
         "joblib",
         "cloud", "cli", "safety", "format", "benchmarks", "benchmark_results", "api", "changelog",
         "contributing"]


def sphinx(builder, out):
    return run_python("-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", builder, DOCS, out)


def torch_examples_run():
    """Whether the doctest build runs the examples that need torch."""
    return os.environ.get("CI") == "true" or importlib.util.find_spec("torch") is not None


def test_sphinx_is_installed():
    result = run_code("import sphinx, numpydoc")
    assert result.returncode == 0, (
        "building the docs needs Sphinx and numpydoc: pip install -e '.[docs]'\n"
        + result.stderr
    )


def test_html_builds_without_warnings(tmp_path):
    result = sphinx("html", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for page in PAGES:
        assert (tmp_path / f"{page}.html").is_file(), page
    api = (tmp_path / "api.html").read_text(encoding="utf-8")
    for name in ("cpersist.dump", "cpersist.load", "cpersist.convert", "cpersist.inspect",
                 "cpersist.verify", "cpersist.CorruptFileError", "cpersist.open",
                 "cpersist.LazyArray", "cpersist.FileHandle"):
        assert f'id="{name}"' in api, name


def test_doctests_pass(tmp_path):
    result = sphinx("doctest", tmp_path)
    report = (tmp_path / "output.txt").read_text(encoding="utf-8") \
        if (tmp_path / "output.txt").exists() else ""
    assert result.returncode == 0, result.stdout + result.stderr + report
    summary = re.search(r"(\d+) tests\s+0 failures in tests", report)
    assert summary and int(summary.group(1)) >= 50, report[-2000:]
    # the docstring examples of the API are among them
    assert "Document: api" in report
    if torch_examples_run():
        checkpoints = re.search(r"Document: checkpoints\n-+\n.*?(\d+) passed and 0 failed",
                                report, re.S)
        assert checkpoints and int(checkpoints.group(1)) >= 20, report[-2000:]


def test_torch_examples_skip_without_torch_except_on_ci(tmp_path):
    """checkpoints.rst's examples, built where ``import torch`` fails: skipped
    (the build passes, running the others), unless CI=true, where they fail."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "import runpy\n"
        f"_docs = runpy.run_path({os.path.join(DOCS, 'conf.py')!r})\n"
        "extensions = ['sphinx.ext.doctest']\n"
        "doctest_global_setup = _docs['doctest_global_setup']\n"
        "doctest_global_cleanup = _docs['doctest_global_cleanup']\n"
    )
    shutil.copy(os.path.join(DOCS, "checkpoints.rst"), src / "index.rst")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "torch.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    for ci, fails in ((None, False), ("true", True)):
        out = tmp_path / f"out-{ci}"
        result = run_python("-m", "sphinx", "-W", "-q", "-E", "-b", "doctest", src, out,
                            env=fresh_env(hidden, CI=ci))
        report = (out / "output.txt").read_text(encoding="utf-8")
        assert (result.returncode != 0) == fails, result.stdout + result.stderr + report
        if fails:
            assert "No module named 'torch'" in report
        else:
            # The page's examples without torch (ml_dtypes, JAX, background
            # dumps) ran; one that imports torch would have failed the build.
            assert "0 failures in tests" in report, report


def test_a_failing_example_fails_the_build(tmp_path):
    """The doctest build really reports failures (so the docs cannot rot)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "extensions = ['sphinx.ext.doctest']\ndoctest_global_setup = 'import cpersist'\n"
    )
    (src / "index.rst").write_text("Test\n====\n\n>>> cpersist.available_codecs()[:1]\n['nope']\n")
    result = sphinx_dir("doctest", src, tmp_path / "out")
    assert result.returncode != 0


def sphinx_dir(builder, src, out):
    return run_python("-m", "sphinx", "-W", "-q", "-b", builder, src, out)


def test_readme(tmp_path):
    with open(os.path.join(ROOT, "README.rst"), encoding="utf-8") as f:
        readme = f.read()
    # It is valid reStructuredText (PyPI renders it with docutils); its two
    # set-up commands are tests/test_readme.py's.
    from docutils.core import publish_doctree

    publish_doctree(readme, settings_overrides={"halt_level": 2, "report_level": 2})
    # Every page it links to exists.
    for link in re.findall(r"<(docs/[^>]+)>`_", readme):
        assert os.path.isfile(os.path.join(ROOT, link)), link
    # Its Python example runs.
    code = re.search(r"\.\. code-block:: python\n\n((?:   .*\n|\n)+)", readme).group(1)
    code = "\n".join(line[3:] for line in code.splitlines())
    result = run_code(code, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "model.cp").is_file() and (tmp_path / "raw.cp").is_file()
