"""What a lab script adds to a benchmark run's folder: a measurement taken
in a scratch folder of its own, written as JSON for :mod:`benchmarks.ratios`
to read beside the installed suites' files."""

import json
import os
import shutil
import tempfile


def measure_into(out, filename, prefix, measure):
    """``measure(directory)`` in a new scratch folder (its name starting
    with ``prefix``), removed afterwards; its result written to
    ``out/filename`` as JSON (``out`` made if new) and returned."""
    os.makedirs(out, exist_ok=True)
    directory = tempfile.mkdtemp(prefix=prefix)
    try:
        result = measure(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    with open(os.path.join(out, filename), "w") as file:
        json.dump(result, file, indent=1)
    return result
