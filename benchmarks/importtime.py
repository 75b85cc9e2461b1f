"""Start-up cost: ``import cpersist``, a first ``load`` and ``cpersist --help``
beside joblib.

Every figure is the median over fresh interpreters, each started by
``subprocess`` with the same Python and environment as the benchmark. The
imports are timed inside the interpreter, after ``import numpy`` (every
user of cpersist or joblib has numpy loaded already, so its import is not
counted against either). So is the import followed by the first ``load``
of a small model (a 4 MB float32 matrix and a vector, ``compress=3``): what
a script that loads a model once pays, modules imported on first use
included. ``cpersist --help`` is timed from outside, wall clock from process
start to exit, beside an interpreter that runs nothing (``python -c
pass``): the difference is what cpersist's command line adds.
"""

import os
import shutil
import statistics
import subprocess
import sys

from cpersist.tools.table import format_table

__all__ = ["IMPORT_COLUMNS", "run_import_times", "format_import_times"]

#: CSV columns of ``import_time.csv``.
IMPORT_COLUMNS = ["what", "kind", "command", "median_ms", "min_ms", "max_ms", "runs", "status",
                  "reason"]

_TIMED = ("import time, numpy; t0 = time.perf_counter(); import {module}; {then}"
          "print(time.perf_counter() - t0)")


def _cli_command():
    """``cpersist`` next to this interpreter if installed, else ``python -m cpersist``."""
    script = os.path.join(os.path.dirname(sys.executable), "cpersist")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    found = shutil.which("cpersist")
    return [found] if found else [sys.executable, "-m", "cpersist"]


def _inside(module, runs, load=None):
    """Seconds of ``import module`` (then ``module.load(load)``, if given)
    measured inside ``runs`` fresh interpreters."""
    then = "" if load is None else f"{module}.load({load!r}); "
    code = _TIMED.format(module=module, then=then)
    times = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else
                               f"exit code {done.returncode}")
        times.append(float(done.stdout.split()[-1]))
    return times


def _wall(command, runs):
    """Wall seconds of ``command`` from start to exit, ``runs`` times."""
    import time

    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=120)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode(errors="replace").strip() or
                               f"exit code {done.returncode}")
    return times


def _row(what, kind, command, measure):
    row = {"what": what, "kind": kind, "command": command}
    try:
        times = measure()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        row.update(status="n/a", reason=str(e)[:200], runs=0)
        return row
    ms = [t * 1e3 for t in times]
    row.update(median_ms=round(statistics.median(ms), 2), min_ms=round(min(ms), 2),
               max_ms=round(max(ms), 2), runs=len(ms), status="ok", reason="")
    return row


def _small_model(directory):
    """Paths of one small model written by cpersist and by joblib, both at
    ``compress=3`` (without joblib, its row fails at ``import joblib``)."""
    import numpy as np

    import cpersist

    rng = np.random.default_rng(0)
    model = {"coef": np.cumsum(rng.standard_normal((1000, 1000)), axis=1).astype(np.float32),
             "intercept": rng.standard_normal(1000)}
    paths = {"cpersist": os.path.join(directory, "model.cp"),
             "joblib": os.path.join(directory, "model.joblib")}
    cpersist.dump(model, paths["cpersist"], compress=3)
    try:
        import joblib
    except ImportError:
        pass
    else:
        joblib.dump(model, paths["joblib"], compress=3)
    return paths


def run_import_times(runs=11):
    """Time the imports, a first load and the command line in fresh interpreters.

    Parameters
    ----------
    runs : int
        Fresh interpreters per row; the median is reported with the range.

    Returns
    -------
    list of dict
        One row per measurement with the :data:`IMPORT_COLUMNS` keys: ``import
        cpersist`` and ``import joblib`` (the peer), and each import followed
        by the first load of a small model, timed inside the interpreter
        after ``import numpy``; ``cpersist --help`` and ``python -c pass``,
        wall time of the whole process. A row whose command fails (joblib
        not installed, say) has status ``n/a`` and the reason.
    """
    import tempfile

    python = os.path.basename(sys.executable)
    cli = _cli_command()
    cli_text = " ".join([python] + cli[1:] if cli[0] == sys.executable else
                        [os.path.basename(cli[0])] + cli[1:]) + " --help"
    loaded = "import and first load of a 4 MB model, numpy already imported"
    with tempfile.TemporaryDirectory(prefix="cpersist-startup-") as directory:
        models = _small_model(directory)
        return [
            _row("import cpersist", "import, numpy already imported",
                 f"{python} -c 'import numpy; import cpersist'", lambda: _inside("cpersist", runs)),
            _row("import joblib", "import, numpy already imported",
                 f"{python} -c 'import numpy; import joblib'", lambda: _inside("joblib", runs)),
            _row("cpersist.load", loaded,
                 f"{python} -c 'import numpy; import cpersist; cpersist.load(\"model.cp\")'",
                 lambda: _inside("cpersist", runs, models["cpersist"])),
            _row("joblib.load", loaded,
                 f"{python} -c 'import numpy; import joblib; joblib.load(\"model.joblib\")'",
                 lambda: _inside("joblib", runs, models["joblib"])),
            _row("cpersist --help", "wall time of the process", cli_text,
                 lambda: _wall(cli + ["--help"], runs)),
            _row("python -c pass", "wall time of the process", f"{python} -c pass",
                 lambda: _wall([sys.executable, "-c", "pass"], runs)),
        ]


def format_import_times(rows):
    """The end-of-run table of :func:`run_import_times`."""
    return format_table(["start-up", "median ms", "range ms", "runs", "measured"], [
        [r["what"], f"{r['median_ms']:.1f}", f"{r['min_ms']:.1f}-{r['max_ms']:.1f}", r["runs"], r["kind"]]
        if r["status"] == "ok" else [r["what"], f"{r['status']}: {r['reason']}"]
        for r in rows], right=(1, 2, 3))
