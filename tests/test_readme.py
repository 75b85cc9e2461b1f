"""README.rst opens with the two set-up commands, and CI runs the second."""

import re
from pathlib import Path

from . import _fresh

ROOT = Path(_fresh.ROOT)


def setup_commands():
    text = (ROOT / "README.rst").read_text()
    block = re.search(r"\.\. code-block:: console\n\n((?:   .*\n)+)", text)
    assert block, "README.rst has no console code block"
    # The block must be the first thing after the title and description.
    assert text.index(".. code-block::") < text.index("\nExample\n")
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands():
    install_and_run, run_tests = setup_commands()
    assert "python -m cpersist.benchmarks" in install_and_run
    assert install_and_run.startswith("pip install ")
    assert "pytest" in run_tests and run_tests.startswith("pip install ")


def test_ci_runs_the_readme_test_command_verbatim():
    _, run_tests = setup_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert run_tests in [line.strip() for line in ci]
