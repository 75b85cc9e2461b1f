"""Publish a benchmark run in the documentation.

Usage, from the repository root, after a full run::

    python -m cpersist.benchmarks --out bench-results
    python docs/publish_bench.py bench-results [--figures atlas_c,images,random_forest]

It copies ``pareto.png``, ``serializers.png`` (if present) and the disk /
write / read charts of the chosen datasets to ``docs/_static/bench/``, and
rewrites ``docs/bench_results.inc.rst`` (included by the user guide and the
benchmarks page) with:

* the machine and options of the run (from ``machine.json``);
* a table per cpersist codec and level: compression ratio (total size in
  memory / total size on disk) and write / read throughput (total MB /
  total median seconds), over every dataset of the run;
* a table comparing methods at level 3 (or their fixed level) on each chosen
  dataset;
* in ``docs/codec_choice.inc.rst`` (the user guide's "why this default"),
  every codec at level 3 on the generated datasets;
* the figures.

Every number comes from the run's ``results.csv``; nothing is typed in.
"""

import argparse
import csv
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FRAGMENT = os.path.join(HERE, "bench_results.inc.rst")
CHOICE_FRAGMENT = os.path.join(HERE, "codec_choice.inc.rst")
STATIC = os.path.join(HERE, "_static", "bench")
DEFAULT_FIGURES = ("atlas_c", "images", "random_forest")
#: Methods compared per dataset: (method, level) with None = any level the
#: method has (fixed-level methods) and "max" = the highest level in the run,
#: tried in this order.
COMPARED = [
    ("cpersist", "0"), ("cpersist-mmap", None), ("cpersist", "3"), ("cpersist:lz4", "3"),
    ("cpersist:blosc:zstd", "3"), ("cpersist:zstd", "max"), ("np.save", None),
    ("np.savez_compressed", None), ("pickle5", None), ("joblib", "3"), ("tables:blosc:zstd", "3"),
    ("nibabel.nii.gz", "3"),
]


def _f(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _rst_table(header, rows):
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    rule = "  ".join("=" * w for w in widths)
    out = [rule, "  ".join(c.ljust(w) for c, w in zip(cells[0], widths)).rstrip(), rule]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells[1:]]
    out.append(rule)
    return out


def codec_table(rows):
    """Ratio and throughput of every cpersist codec and level, over all datasets."""
    groups = {}
    for r in rows:
        if r["status"] != "ok" or not r["method"].startswith("cpersist") or r["mmap"] == "True":
            continue
        codec = "raw" if r["level"] == "0" else r["codec"]
        if codec == "default":
            continue  # the same codec as cpersist:zstd-auto
        key = (codec, int(r["level"]))
        g = groups.setdefault(key, {"mem": 0.0, "disk": 0.0, "w": 0.0, "r": 0.0, "n": 0})
        g["mem"] += _f(r["size_bytes"]) or 0
        g["disk"] += _f(r["disk_bytes"]) or 0
        g["w"] += _f(r["write_s"]) or 0
        g["r"] += _f(r["read_s"]) or 0
        g["n"] += 1
    out = []
    for (codec, level), g in sorted(groups.items(), key=lambda kv: (kv[0][0] != "raw", kv[0])):
        if codec == "raw" and level != 0:
            continue
        out.append([codec, "-" if codec == "raw" else level, f"{g['mem'] / g['disk']:.2f}",
                    f"{g['mem'] / 1e6 / g['w']:.0f}" if g["w"] else "-",
                    f"{g['mem'] / 1e6 / g['r']:.0f}" if g["r"] else "-", g["n"]])
    return _rst_table(["Codec", "Level", "Ratio", "Write MB/s", "Read MB/s", "Datasets"], out)


#: Generated datasets the default codec was chosen on.
CHOICE_DATASETS = ("atlas_c", "atlas_f", "timeseries", "sparse_table", "text", "images", "noise")


def choice_table(rows, level="3"):
    """Every codec at ``level`` on the generated datasets: the default's choice.

    Ratio per dataset, their geometric mean, and the median over the datasets
    of the write and read throughput.
    """
    import math
    import statistics

    cells = {}
    for r in rows:
        if (r["status"] == "ok" and r["method"].startswith("cpersist:") and r["level"] == level
                and r["dataset"] in CHOICE_DATASETS and r["mmap"] != "True"):
            cells.setdefault(r["codec"], {})[r["dataset"]] = r
    present = [d for d in CHOICE_DATASETS if any(d in c for c in cells.values())]
    out = []
    for codec, by_ds in sorted(cells.items()):
        if set(by_ds) != set(present):
            continue
        ratios = [_f(by_ds[d]["ratio"]) for d in present]
        mbps = [(_f(by_ds[d]["size_bytes"]) / 1e6, _f(by_ds[d]["write_s"]), _f(by_ds[d]["read_s"]))
                for d in present]
        out.append([codec] + [f"{x:.2f}" for x in ratios]
                   + [f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}",
                      f"{statistics.median(mb / w for mb, w, _ in mbps):.0f}",
                      f"{statistics.median(mb / rd for mb, _, rd in mbps):.0f}"])
    return _rst_table([f"codec (level {level})"] + [f"ratio {d}" for d in present]
                      + ["geo-mean ratio", "median write MB/s", "median read MB/s"], out)


def dataset_table(rows, dataset):
    picked = []
    mine = [r for r in rows if r["dataset"] == dataset and r["status"] == "ok"]
    for method, level in COMPARED:
        found = [r for r in mine if r["method"] == method
                 and (level in (None, "max") or r["level"] == level)]
        if found:
            picked.append(max(found, key=lambda r: int(r["level"] or 0)) if level == "max"
                          else found[0])
    out = [[r["method"], r["level"], f"{(_f(r['disk_bytes']) or 0) / 1e6:.1f}",
            f"{_f(r['ratio']):.2f}", f"{_f(r['write_s']):.3f}", f"{_f(r['read_s']):.3f}",
            f"{_f(r['read_peak_MB']):.1f}" if _f(r["read_peak_MB"]) is not None else "-"]
           for r in picked]
    return _rst_table(["Method", "Level", "Disk MB", "Ratio", "Write s", "Read s",
                       "Read peak MB"], out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="the --out directory of a benchmark run")
    parser.add_argument("--figures", default=",".join(DEFAULT_FIGURES),
                        help="datasets whose tables and charts to publish (comma-separated)")
    args = parser.parse_args(argv)

    with open(os.path.join(args.results, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(args.results, "machine.json")) as f:
        machine = json.load(f)
    datasets = [d for d in args.figures.split(",") if d]
    present = {r["dataset"] for r in rows}
    missing = [d for d in datasets if d not in present]
    if missing:
        parser.error(f"datasets not in this run: {', '.join(missing)}")

    os.makedirs(STATIC, exist_ok=True)
    figures = []
    for name in ["pareto.png", "serializers.png"] + [
        f"{d}_{kind}.png" for d in datasets for kind in ("disk", "write", "read")
    ]:
        src = os.path.join(args.results, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(STATIC, name))
            figures.append(name)

    storage = machine.get("storage", {})
    lines = [
        ".. Generated by docs/publish_bench.py from a benchmark run; do not edit by hand.",
        "",
        f"Run of {machine.get('date_utc', '?')[:10]} on {machine.get('cpu_count', '?')} CPUs "
        f"({machine.get('cpu', '?')}), {round((machine.get('ram_bytes') or 0) / 2**30)} GiB of "
        f"RAM, Python {machine.get('python', '?')}, numpy "
        f"{machine.get('versions', {}).get('numpy', '?')}; command line "
        f"``{' '.join(machine.get('argv', []))}``. Reads: "
        f"{storage.get('cache', '?')}; times are medians of {storage.get('repeats', '?')} "
        f"repeat(s). Ratio = size in memory / size on disk.",
        "",
        "**cpersist codecs and levels**, over every dataset of the run (throughput = total "
        "megabytes / total seconds):",
        "",
        *codec_table(rows),
        "",
    ]
    choice = choice_table(rows)
    with open(CHOICE_FRAGMENT, "w", encoding="utf-8") as f:
        f.write("\n".join([
            ".. Generated by docs/publish_bench.py from a benchmark run; do not edit by hand.",
            "", *choice, ""]))
    for d in datasets:
        description = next(r["description"] for r in rows if r["dataset"] == d)
        lines += [f"**{d}**: {description}", "", *dataset_table(rows, d), ""]
    for name in figures:
        lines += [f".. figure:: /_static/bench/{name}", "   :width: 100%", ""]
    with open(FRAGMENT, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"wrote {FRAGMENT} and {len(figures)} figures in {STATIC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
