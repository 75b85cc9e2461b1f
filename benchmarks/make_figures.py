"""Regenerate the benchmark figures published in the docs.

Run from the repository root::

    python benchmarks/make_figures.py --run            # full run (long), figures, publish
    python benchmarks/make_figures.py bench-results    # from an existing run

A full run is ``python -m cpersist.benchmarks --suite all --out RESULTS``
with the default options (about 100 MB per generated dataset, levels 0, 1,
3, 6, 9, three repeats, cold-cache reads); pass extra benchmark options
after ``--``, e.g. ``--run -- --size 250MB --repeat 5``.

From the run's ``results.csv`` and ``serializers.csv`` it redraws every PNG
in RESULTS (so figures can be restyled without re-measuring), writes
``summary.rst`` there (one row per dataset and method, at level 3 or the
method's only level), then hands RESULTS to ``docs/publish_bench.py``, which
copies the chosen figures to ``docs/_static/bench/`` and rewrites
``docs/bench_results.inc.rst`` (``--no-publish`` to skip that step).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # use this checkout's cpersist, installed or not

from cpersist.benchmarks import main as bench_main  # noqa: E402
from cpersist.benchmarks.report import plot_serializers, plot_storage, read_csv  # noqa: E402

HEADLINE_LEVEL = "3"
PUBLISH = os.path.join(ROOT, "docs", "publish_bench.py")


def summary_rst(rows) -> str:
    """RST table: one row per dataset and method (level 3, else the only level run).

    Parameters
    ----------
    rows : list of dict
        Rows of ``results.csv``.

    Returns
    -------
    str
    """
    ok = [r for r in rows if r["status"] == "ok"]
    pick = {}
    for r in ok:
        key = (r["dataset"], r["method"])
        if key not in pick or r["level"] == HEADLINE_LEVEL:
            pick[key] = r
    head = ("Dataset", "Method", "Level", "Ratio", "Write MB/s", "Read MB/s", "Write peak MB",
            "Read peak MB")
    cells = [head] + [
        (r["dataset"], r["method"], r["level"], f"{float(r['ratio']):.2f}",
         f"{float(r['write_MBps']):.0f}", f"{float(r['read_MBps']):.0f}",
         f"{float(r['write_peak_MB']):.1f}", f"{float(r['read_peak_MB']):.1f}")
        for r in pick.values()
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule]
    for i, c in enumerate(cells):
        lines.append("  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())
        if i == 0:
            lines.append(rule)
    lines.append(rule)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """Entry point; see the module docstring."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="?", default="bench-results",
                   help="directory of a benchmark run (default bench-results)")
    p.add_argument("--run", action="store_true", help="run the full benchmark into RESULTS first")
    p.add_argument("--no-publish", action="store_true",
                   help="do not call docs/publish_bench.py (only redraw in RESULTS)")
    args = p.parse_args(argv)
    if args.run:
        rc = bench_main(["--suite", "all", "--out", args.results, "--no-plots"] + extra)
        if rc not in (0, 1):  # 1 = some method failed: still worth drawing
            return rc
    csv_path = os.path.join(args.results, "results.csv")
    if not os.path.exists(csv_path):
        p.error(f"{csv_path} not found: run with --run, or point at a benchmark output directory")
    rows = read_csv(csv_path)
    written = plot_storage(rows, args.results)
    ser = os.path.join(args.results, "serializers.csv")
    if os.path.exists(ser):
        written.append(plot_serializers(read_csv(ser), os.path.join(args.results, "serializers.png")))
    with open(os.path.join(args.results, "summary.rst"), "w") as f:
        f.write(summary_rst(rows))
    print(f"{len(written)} figures and summary.rst written to {args.results}")
    if not args.no_publish and os.path.exists(PUBLISH):
        return subprocess.call([sys.executable, PUBLISH, args.results])
    return 0


if __name__ == "__main__":
    sys.exit(main())
