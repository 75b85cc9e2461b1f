"""Outputs: CSV, machine/version JSON, matplotlib figures, printed table."""

import csv
import datetime as _dt
import importlib
import json
import math
import os
import platform
import re
import sys

__all__ = [
    "write_csv",
    "read_csv",
    "machine_info",
    "load_average",
    "write_machine_json",
    "plot_storage",
    "plot_serializers",
    "format_table",
    "max_vs_peers",
    "format_max_vs_peers",
]

_VERSIONED = (
    "cpersist", "numpy", "tables", "blosc", "blosc2", "nibabel", "joblib", "lz4", "zstandard",
    "sklearn", "matplotlib", "tqdm",
)


def write_csv(path, rows, columns):
    """Write ``rows`` (dicts) to ``path`` with the given column order."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


def read_csv(path):
    """Read a results CSV back (all values as strings)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _version(mod):
    try:
        m = importlib.import_module(mod)
    except Exception:
        return None
    return str(getattr(m, "__version__", "?"))


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _total_ram():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def load_average():
    """The 1-, 5- and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info(extra=None):
    """Machine description and library versions for the side JSON.

    Parameters
    ----------
    extra : dict, optional
        Merged in (command line, options, measurement notes).

    Returns
    -------
    dict
    """
    info = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_bytes": _total_ram(),
        "load_average": load_average(),
        "versions": {m: _version(m) for m in _VERSIONED},
    }
    try:
        import tables

        info["versions"]["hdf5"] = tables.hdf5_version
        info["tables_complibs"] = [c for c in tables.filters.all_complibs if tables.which_lib_version(c)]
    except Exception:
        pass
    try:
        from .methods import cpersist_codecs

        info["cpersist_codecs"] = cpersist_codecs()
    except Exception:
        pass
    if extra:
        info.update(extra)
    return info


def write_machine_json(path, extra=None):
    """Write :func:`machine_info` as JSON to ``path``."""
    with open(path, "w") as f:
        json.dump(machine_info(extra), f, indent=2, default=str)
    return path


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed (CI, servers)
    import matplotlib.pyplot as plt

    return plt


def _f(v):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


_FAMILY_COLORS = {
    "cpersist": "tab:red", "numpy": "tab:blue", "pickle": "tab:gray", "joblib": "tab:green",
    "tables": "tab:purple", "nibabel": "tab:orange", "blosc2": "tab:cyan", "zarr": "tab:olive",
    "h5py": "tab:brown", "safetensors": "tab:pink",
}


def _minor_label(v, _pos=None):
    """Label the 2x and 5x minor ticks of a log axis in plain numbers."""
    if v <= 0:
        return ""
    lead = round(v / 10 ** math.floor(math.log10(v)), 6)
    return f"{v:g}" if lead in (2.0, 5.0) else ""


def _grouped_bars(plt, rows, key, ylabel, title, path, log):
    fig = bar_figure(plt, rows, key, ylabel, title, log)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def bar_figure(plt, rows, key, ylabel, title, log):
    """One bar per (method, level) of ``rows``, coloured by level; the legend
    sits right of the axes, where it cannot cover a bar."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    levels = sorted({int(r["level"]) for r in rows})
    cmap = plt.get_cmap("viridis")
    colors = {lv: cmap(lv / 9.5) for lv in levels}  # same colour for a level in every chart
    width = 0.8 / max(1, len(levels))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(methods) + 2), 4.6))
    seen = set()
    for i, m in enumerate(methods):
        mrows = [r for r in rows if r["method"] == m]
        n = len(mrows)
        for j, r in enumerate(sorted(mrows, key=lambda r: int(r["level"]))):
            v = _f(r[key])
            if v is None:
                continue
            lv = int(r["level"])
            x = i + (j - (n - 1) / 2) * width
            ax.bar(x, max(v, 1e-9) if log else v, width=width * 0.95, color=colors[lv],
                   label=f"level {lv}" if lv not in seen else None)
            seen.add(lv)
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels(methods, rotation=60, ha="right", fontsize=7)
    if log:
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(_minor_label))
        ax.tick_params(axis="y", which="minor", labelsize=6)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0)
    # Fixed margins instead of tight_layout: it measures every tick label
    # and doubles the time per figure (dozens of figures per run).
    width = fig.get_figwidth()
    fig.subplots_adjust(left=1.0 / width, right=1.0 - 0.9 / width, top=0.91, bottom=0.36)
    return fig


def _pareto_front(points):
    """Indices of points not dominated (higher speed and higher ratio win)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for x2, y2 in points):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def plot_pareto(rows, path, title=""):
    """Ratio-vs-speed scatter of one dataset's methods and levels (Pareto view).

    Each point is one (method, level) on this dataset alone, so a method that
    cannot store some other dataset still appears here. Write throughput on
    the left, read on the right; the non-dominated points are joined and
    labelled.
    """
    plt = _plt()
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ok = [r for r in rows if r.get("status") == "ok"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6), sharey=True)
    fams_seen = []
    for ax, key, label in ((axes[0], "write_MBps", "write"), (axes[1], "read_MBps", "read")):
        pts, labels, fams = [], [], []
        for r in ok:
            x, y = _f(r[key]), _f(r["ratio"])
            if x and y:
                pts.append((x, y))
                labels.append(f"{r['method']} L{r['level']}")
                fams.append(r["family"])
        for fam in dict.fromkeys(fams):
            idx = [i for i, f in enumerate(fams) if f == fam]
            ax.scatter([pts[i][0] for i in idx], [pts[i][1] for i in idx], s=22,
                       color=_FAMILY_COLORS.get(fam, "black"), label=fam, alpha=0.8)
        fams_seen = fams_seen or list(dict.fromkeys(fams))
        front = _pareto_front(pts) if pts else []
        if front:
            ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "k--", lw=0.8, alpha=0.6)
            for i in front:
                ax.annotate(labels[i], pts[i], fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{label} throughput, MB/s of uncompressed data")
        ax.grid(alpha=0.3)
        ax.set_title(f"ratio vs {label} speed", fontsize=9)
    axes[0].set_ylabel("compression ratio (in-memory / on-disk)")
    if fams_seen:
        fig.legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="lower center",
                   ncol=min(len(fams_seen), 10), frameon=False)
    fig.suptitle(title or "Pareto view", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_storage(rows, out_dir):
    """Per dataset: disk/write/read bar charts and the Pareto scatter.

    Parameters
    ----------
    rows : list of dict
        Storage-suite rows (only ``status == "ok"`` rows are drawn).
    out_dir : str

    Returns
    -------
    list of str
        Paths of the PNG files written.
    """
    plt = _plt()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    ok = [r for r in rows if r.get("status") == "ok"]
    by_ds = {}
    for r in ok:
        by_ds.setdefault(r["dataset"], []).append(r)
    for name, rs in by_ds.items():
        size_mb = (_f(rs[0]["size_bytes"]) or 0) / 1e6
        cache = rs[0].get("cache", "")
        sub = f"{name} ({size_mb:.3g} MB in memory)"
        paths.append(_disk_chart(plt, rs, sub, out_dir, name))
        paths.append(_grouped_bars(plt, rs, "write_s", "write time, s (median)", f"{sub}: write time",
                                   os.path.join(out_dir, f"{_safe(name)}_write.png"), log=True))
        paths.append(_grouped_bars(plt, rs, "read_s", f"read time, s (median, {cache} cache)",
                                   f"{sub}: read time ({cache} cache; mmap rows touch every byte)",
                                   os.path.join(out_dir, f"{_safe(name)}_read.png"), log=True))
        paths.append(plot_pareto(rs, os.path.join(out_dir, f"{_safe(name)}_pareto.png"),
                                 f"{sub}: compression ratio against speed"))
    return paths


def _disk_chart(plt, rs, sub, out_dir, name):
    rows = [dict(r, disk_MB=(_f(r["disk_bytes"]) or 0) / 1e6) for r in rs]
    # Linear: sizes of one dataset are comparable and bars must start at 0.
    return _grouped_bars(plt, rows, "disk_MB", "disk size, MB", f"{sub}: disk size",
                         os.path.join(out_dir, f"{_safe(name)}_disk.png"), log=False)


def plot_serializers(rows, path):
    """Store/load seconds vs number of dict entries, one line per serializer."""
    plt = _plt()
    ok = [r for r in rows if r.get("status") == "ok"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    sers = list(dict.fromkeys(r["serializer"] for r in ok))
    for ax, key, lab in ((axes[0], "store_s", "store seconds"), (axes[1], "load_s", "load seconds"),
                         (axes[2], "file_MB", "file size, MB")):
        cmap = plt.get_cmap("tab20")
        for i, s in enumerate(sers):
            rs = sorted((r for r in ok if r["serializer"] == s), key=lambda r: int(r["entries"]))
            xs = [int(r["entries"]) for r in rs]
            ys = [max(_f(r[key]) or 0, 1e-7) for r in rs]
            ax.plot(xs, ys, marker="o", ms=3, label=s, color=cmap(i % 20),
                    ls="--" if s.startswith("cpersist") else "-")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("dict entries (str -> int)")
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("picklebench: dict of str -> int, stored to and loaded from disk", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------
# Text table
# ---------------------------------------------------------------------------


def _fmt(v, spec):
    x = _f(v)
    return "-" if x is None else format(x, spec)


def format_table(rows, max_reason=60):
    """The end-of-run results table (measured and failed rows; n/a counted)."""
    head = f"{'dataset':<18} {'method':<22} {'lvl':>3} {'ratio':>7} {'wMB/s':>8} {'rMB/s':>8} " \
           f"{'wPeakMB':>8} {'rPeakMB':>8} {'status':<7}"
    lines = [head, "-" * len(head)]
    na = 0
    for r in rows:
        if r.get("status") == "n/a":
            na += 1
            continue
        line = (f"{str(r['dataset'])[:18]:<18} {str(r['method'])[:22]:<22} {str(r['level']):>3} "
                f"{_fmt(r.get('ratio'), '.2f'):>7} {_fmt(r.get('write_MBps'), '.1f'):>8} "
                f"{_fmt(r.get('read_MBps'), '.1f'):>8} {_fmt(r.get('write_peak_MB'), '.1f'):>8} "
                f"{_fmt(r.get('read_peak_MB'), '.1f'):>8} {r.get('status', ''):<7}")
        if r.get("status") != "ok":
            line += " " + str(r.get("reason", ""))[:max_reason]
        lines.append(line)
    lines.append(f"({na} dataset/method pairs not applicable; see the CSV 'reason' column)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# cpersist max against the smallest peer file
# ---------------------------------------------------------------------------


def max_vs_peers(rows, max_method="cpersist max"):
    """Per dataset, the ``max`` preset's file against the smallest peer file.

    A peer is any method outside the cpersist family, at any level it ran.

    Returns
    -------
    list of dict
        ``dataset``, ``max_bytes``, ``peer`` (method and level),
        ``peer_bytes`` and ``ratio`` (``max_bytes / peer_bytes``: at most 1
        means the ``max`` file is no larger); empty when no row of
        ``max_method`` was measured.
    """
    ok = [r for r in rows if r.get("status") == "ok" and _f(r.get("disk_bytes"))]
    out = []
    for name in dict.fromkeys(r["dataset"] for r in ok):
        mine = [r for r in ok if r["dataset"] == name and r["method"] == max_method]
        peers = [r for r in ok if r["dataset"] == name and r["family"] != "cpersist"]
        if not mine or not peers:
            continue
        best = min(peers, key=lambda r: _f(r["disk_bytes"]))
        mx, pb = _f(mine[0]["disk_bytes"]), _f(best["disk_bytes"])
        out.append({"dataset": name, "max_bytes": int(mx), "peer": f"{best['method']} L{best['level']}",
                    "peer_bytes": int(pb), "ratio": round(mx / pb, 4)})
    return out


def format_max_vs_peers(entries):
    """Printed table of :func:`max_vs_peers`."""
    lines = ["cpersist max against the smallest peer file (size ratio: <= 1.00 means max is no larger)",
             f"{'dataset':<18} {'max MB':>10} {'smallest peer':<30} {'peer MB':>10} {'ratio':>6}"]
    for e in entries:
        lines.append(f"{e['dataset'][:18]:<18} {e['max_bytes'] / 1e6:>10.4f} {e['peer'][:30]:<30} "
                     f"{e['peer_bytes'] / 1e6:>10.4f} {e['ratio']:>6.2f}")
    return "\n".join(lines)
