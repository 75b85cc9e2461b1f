"""The storage suite: every dataset x method x level, one CSV row each."""

import os
import shutil
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from . import datasets as ds
from . import methods as mt
from .measure import median, remove_output, run_in_subprocess
from .output import safe_name as _safe

MB = 1e6  # all MB figures in the CSV are 10**6 bytes

#: The CSV's columns, in order, and what each means (also written to
#: machine.json). Times are medians over ``repeats``; peaks are RSS above
#: the level before the call (first repeat, fresh process).
COLUMN_DOCS = {
    "dataset": "dataset name (file_* for user files)",
    "source": "builtin (generated, seeded), package (shipped with nibabel/scikit-learn) or file",
    "description": "what it is, with dtype/shape/order or container type",
    "method": "storage method (python -m cpersist.benchmarks --list)",
    "family": "library",
    "codec": "compressor ('none' = raw, 'default' = cpersist's default codec)",
    "level": "compression level actually used (np.savez_compressed: fixed, reported as 6)",
    "size_bytes": "in-memory size: array nbytes, or deep size of an object graph",
    "disk_bytes": "file size after the write",
    "ratio": "size_bytes / disk_bytes (higher = smaller file)",
    "disk_fraction": "disk_bytes / size_bytes",
    "kept_raw": "cpersist with a codec: fraction of the array bytes stored uncompressed, because "
                "a probe of the chunk showed the codec saving too little for what decoding it "
                "costs (15% at levels 1-5, 5% at 6-9, less for forms that decode faster) or its "
                "output was no smaller",
    "write_s": "median seconds of the write call (file closed, before fsync)",
    "read_s": "median seconds of the read call; memmapped reads include touching every byte",
    "read_open_s": "memmapped reads only: median seconds of the load call alone",
    "write_MBps": "size_bytes / 1e6 / write_s (uncompressed MB per second)",
    "read_MBps": "size_bytes / 1e6 / read_s",
    "write_peak_MB": "peak RSS above the level before the write (first repeat, fresh process), MB = 1e6 B",
    "read_peak_MB": "peak RSS above the level before the read; includes mapped file pages touched",
    "write_peak_anon_MB": "same, anonymous memory only (sampled every ms)",
    "read_peak_anon_MB": "same for the read (excludes mapped file pages)",
    "limit_write_s": "cpersist: median seconds its codec alone takes to encode the arrays' "
                     "chunks on the same threads, in memory (raw: to copy them into new "
                     "memory); empty for other methods and compress='max'",
    "limit_read_s": "the same for decoding them into new memory (raw: copying)",
    "write_of_limit": "median over the repeats of the codec alone's time (timed just after) / the "
                      "write's: its throughput as a fraction of its codec's (1 = as fast; raw: a copy)",
    "read_of_limit": "the same for the read (mmap: against a copy, the read touching every byte); a "
                     "cold read (cache=cold) counts the disk too, which the codec alone never reads",
    "fsync_s": "seconds of the fsync after the last write (not in write_s)",
    "cache": "cold = fsync + POSIX_FADV_DONTNEED before each read repeat; warm = file read once first",
    "resident_frac": "cold reads: max fraction of the file still in the page cache after eviction (mincore)",
    "peak_via": "VmHWM = kernel high-water mark reset per call (exact); sampler = /proc/self/statm every ms",
    "mmap": "read memory-maps the file",
    "repeats": "timed repeats per operation (the fewer of the write's and the read's; without "
               "--repeat, an operation stops repeating after 2 s), each of write and read in "
               "its own fresh process",
    "threads": "n_threads passed to cpersist.dump and cpersist.load (empty: all CPUs)",
    "status": "ok, n/a (method cannot store this data; see reason) or failed (error or wrong data: not timed)",
    "reason": "why n/a or failed",
    "notes": "method details (level mapping, API used)",
    "write_times": "every write repeat, seconds, ';'-separated",
    "read_times": "every read repeat, seconds, ';'-separated",
}
COLUMNS = list(COLUMN_DOCS)


@dataclass
class StorageConfig:
    """Options of the storage suite, from the command line's options of the
    same names. ``repeat_budget``: seconds after which an operation is not
    repeated (None: every repeat); ``default_datasets``: what runs without
    ``datasets`` or ``files`` (None: all); ``codec_levels``: the levels of the
    ``cpersist:<codec>`` methods (None: ``levels``)."""

    out: str = "cpersist-bench"
    datasets: Optional[List[str]] = None
    methods: Optional[List[str]] = None
    levels: Sequence[int] = mt.DEFAULT_LEVELS
    size_bytes: int = ds.SIZE_PRESETS["medium"]
    repeats: int = 3
    repeat_budget: Optional[float] = None
    warm_cache: bool = False
    files: List[str] = field(default_factory=list)
    trust_pickles: bool = False
    quick: bool = False
    threads: Optional[int] = None
    timeout: float = 1800.0
    keep_files: bool = False
    progress: bool = True
    csv_path: Optional[str] = None
    resume: bool = False
    default_datasets: Optional[List[str]] = None
    codec_levels: Optional[Sequence[int]] = None
    exclude_methods: List[str] = field(default_factory=list)


class Interrupted(Exception):
    """The run was stopped (Ctrl-C); the rows measured until then are in the
    CSV. ``rows``: every row in the CSV (earlier runs' rows too, with
    ``--resume``); ``measured``: how many this run measured."""

    def __init__(self, rows, measured):
        super().__init__(f"interrupted after {measured} measurement(s)")
        self.rows, self.measured = rows, measured


def row_key(row):
    """What identifies a row across runs: dataset, method and level (as text)."""
    return (str(row["dataset"]), str(row["method"]), str(row["level"]))


def _row(dataset, info, method, level, cfg, **kw):
    """A CSV row: what a row says of its dataset and method, then ``kw``."""
    return dict(
        dict.fromkeys(COLUMNS, ""),
        dataset=dataset, source=info.get("source", ""), description=info.get("description", ""),
        method=method.name, family=method.family, codec=method.codec,
        level="" if level is None else level, size_bytes=info.get("size_bytes", ""),
        cache="warm" if cfg.warm_cache else "cold", mmap=method.mmap, repeats=cfg.repeats,
        threads=getattr(method, "threads", None) or "", notes=method.note) | kw


#: ``--quick`` (a smoke run) measures ``compress="max"``, many times slower
#: than any other method, on this dataset alone.
QUICK_MAX_ON = "atlas_c"


def plan(cfg, method_list, dataset_list, cache_dir):
    """Materialise the datasets and decide what runs: ``cells``, the
    ``(dataset_name, info, method, level)`` to measure, and ``skipped``,
    ready-made ``n/a``/``failed`` rows with their reason."""
    cells, skipped = [], []
    unavailable = {m.name: m.available() for m in method_list}
    for d in dataset_list:
        try:
            obj = d.make(cfg.size_bytes, cfg.quick)
        except Exception as e:
            # An untrusted pickle is a refusal (n/a), anything else a failure.
            status = "n/a" if isinstance(e, PermissionError) else "failed"
            info = {"source": d.source, "description": d.description}
            for m in method_list:
                skipped.append(_row(d.name, info, m, None, cfg, status=status,
                                    reason=f"dataset not loaded: {type(e).__name__}: {e}"))
            continue
        info = ds.save_cached(d, obj, os.path.join(cache_dir, _safe(d.name) + ".pkl"))
        for m in method_list:
            reason = unavailable[m.name] or m.why_not(obj)
            if not reason and cfg.quick and isinstance(m, mt.CpersistMax) and d.name != QUICK_MAX_ON:
                reason = (f"--quick measures compress='max' on {QUICK_MAX_ON} only: it "
                          f"compresses each chunk every way it knows (the default run "
                          f"measures it on every dataset)")
            grid = cfg.codec_levels if cfg.codec_levels and isinstance(m, mt.CpersistCodec) else cfg.levels
            levels = m.levels(grid)
            if reason:
                skipped.append(_row(d.name, info, m, levels[0] if len(levels) == 1 else None, cfg,
                                    status="n/a", reason=reason))
            elif not levels:
                skipped.append(_row(d.name, info, m, None, cfg, status="n/a",
                                    reason=f"no supported level in grid {list(cfg.levels)}"
                                           f" (supports {list(m.supported)})"))
            else:
                cells.extend((d.name, info, m, lv) for lv in levels)
        del obj
    return cells, skipped


def measure_cell(name, info, method, level, cfg, work_dir):
    """Write then read one (dataset, method, level) and build its CSV row."""
    fpath = os.path.join(work_dir, f"{_safe(name)}__{_safe(method.name)}__L{level}{method.suffix}")
    base = dict(method=method, level=level, file_path=fpath, data_path=info["path"], repeats=cfg.repeats,
                budget=cfg.repeat_budget, prime=info.get("size_bytes") or 0)
    try:
        w = run_in_subprocess(dict(base, op="write"), cfg.timeout)
        if w["status"] != "ok":
            return _row(name, info, method, level, cfg, status="failed", reason=w.get("reason", "?"))
        r = run_in_subprocess(dict(base, op="read", cold=not cfg.warm_cache,
                                   prime=base["prime"] + w["disk_bytes"]), cfg.timeout)
        if r["status"] != "ok":
            return _row(name, info, method, level, cfg, status="failed", reason=r.get("reason", "?"),
                        disk_bytes=w["disk_bytes"], cache=r.get("cache", ""))
        kept = method.kept_raw(fpath) if level and hasattr(method, "kept_raw") else None
    finally:
        if not cfg.keep_files:
            remove_output(fpath)
    size, disk = info["size_bytes"], w["disk_bytes"]
    ws, rs = median(w["write_times"]), median(r["read_times"])
    lw, lr = median(w.get("limit_write_times")), median(r.get("limit_read_times"))
    # Each repeat against the codec alone timed just after it: a busy machine's slow spell slows both.
    of_w = median([lim / t for lim, t in zip(w.get("limit_write_times") or (), w["write_times"]) if t])
    of_r = median([lim / t for lim, t in zip(r.get("limit_read_times") or (), r["read_times"]) if t])
    return _row(
        name, info, method, level, cfg,
        disk_bytes=disk,
        ratio=float(f"{size / disk:.6g}") if disk else "",
        disk_fraction=float(f"{disk / size:.6g}") if size else "",
        kept_raw="" if kept is None else round(kept, 4),
        write_s=ws, read_s=rs,
        # Memmapped reads: the load call alone (flat in size), read_s adds the touch.
        read_open_s=median(r["open_times"]) if method.mmap else "",
        write_MBps=round(size / MB / ws, 2) if ws else "", read_MBps=round(size / MB / rs, 2) if rs else "",
        write_peak_MB=round(w["write_peak"] / MB, 3), read_peak_MB=round(r["read_peak"] / MB, 3),
        write_peak_anon_MB=round(w["write_peak_anon"] / MB, 3), read_peak_anon_MB=round(r["read_peak_anon"] / MB, 3),
        limit_write_s="" if lw is None else float(f"{lw:.6g}"),
        limit_read_s="" if lr is None else float(f"{lr:.6g}"),
        write_of_limit="" if of_w is None else round(of_w, 3), read_of_limit="" if of_r is None else round(of_r, 3),
        fsync_s=round(w["fsync_s"], 6),
        cache=r["cache"],
        resident_frac="" if r.get("resident_frac") is None else round(r["resident_frac"], 4),
        peak_via="VmHWM" if (w.get("peak_exact") and r.get("peak_exact")) else "sampler",
        status="ok", repeats=min(len(w["write_times"]), len(r["read_times"])),
        write_times=";".join(f"{t:.6g}" for t in w["write_times"]),
        read_times=";".join(f"{t:.6g}" for t in r["read_times"]),
    )


def _cost(info, level):
    """Rough relative cost of one cell, for the progress bar's time estimate:
    the data's size, more at high levels, plus the fixed cost of two processes."""
    size_mb = (info.get("size_bytes") or 0) / MB
    return 0.5 + size_mb * (1 + (level or 0) / 3)


class _Silent:
    """The part of tqdm's interface the benchmark uses, doing nothing
    (tqdm is in the [bench] extra; the benchmark runs without it)."""

    update = set_postfix_str = close = lambda self, *args, **kwargs: None


#: A bar whose steps are estimated costs, not counts: only the percentage and
#: the elapsed and remaining time mean something to a reader.
_WEIGHTED_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {elapsed} elapsed, ~{remaining} left {postfix}"


def progress_bar(total, desc="", disable=False, weighted=False):
    """A tqdm bar counting to ``total``, or a no-op one.

    With ``weighted``, ``total`` and the updates are estimated costs, and the
    bar shows the percentage done and the time left rather than counts.
    """
    if disable:
        return _Silent()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Silent()
    if weighted:
        return tqdm(total=total, desc=desc, dynamic_ncols=True, bar_format=_WEIGHTED_FORMAT)
    return tqdm(total=total, desc=desc, unit="run", dynamic_ncols=True)


class _CsvSink:
    """The results CSV, written one row at a time so an interrupted run keeps its rows."""

    def __init__(self, path, resume):
        import csv
        self.rows = []
        kept = resume and os.path.exists(path) and os.path.getsize(path)
        if kept:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                if reader.fieldnames != COLUMNS:
                    raise ValueError(f"{path}: not a results CSV of this benchmark version "
                                     f"(columns differ); cannot --resume from it")
                self.rows = list(reader)
        self._file = open(path, "a" if kept else "w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS, extrasaction="ignore")
        if not kept:
            self._writer.writeheader()
            self._file.flush()
        self.done = {row_key(r) for r in self.rows}

    def add(self, row):
        self._writer.writerow(row)
        self._file.flush()
        self.rows.append(row)
        self.done.add(row_key(row))

    def close(self):
        self._file.close()


def run_storage(cfg):
    """Run the storage suite, writing each row to the CSV as it is measured,
    and return every row of the CSV (with ``cfg.resume``, the earlier rows
    first); raises :class:`Interrupted` on Ctrl-C, the CSV holding every row
    finished until then."""
    work = os.path.join(cfg.out, "_work")
    cache_dir = os.path.join(work, "datasets")
    os.makedirs(cache_dir, exist_ok=True)
    method_list = [m for m in mt.select_methods(cfg.methods, mt.all_methods(cfg.threads))
                   if m.name.split("@")[0] not in cfg.exclude_methods]
    dataset_list = ds.datasets_for_run(cfg.datasets, cfg.files, cfg.trust_pickles,
                                       ds.QUICK_DATASETS if cfg.quick else cfg.default_datasets)
    sink = _CsvSink(cfg.csv_path or os.path.join(cfg.out, "results.csv"), cfg.resume)
    measured, bar = 0, None
    try:
        cells, skipped = plan(cfg, method_list, dataset_list, cache_dir)
        for row in (r for r in skipped if row_key(r) not in sink.done):
            sink.add(row)
        todo = [c for c in cells if row_key({"dataset": c[0], "method": c[2].name, "level": c[3]})
                not in sink.done]
        bar = progress_bar(total=sum(_cost(info, lv) for _, info, _, lv in todo),
                           desc="cpersist bench", disable=not cfg.progress, weighted=True)
        for name, info, m, lv in todo:
            bar.set_postfix_str(f"{name} | {m.name} L{lv}")
            sink.add(measure_cell(name, info, m, lv, cfg, work))
            measured += 1
            bar.update(_cost(info, lv))
    except KeyboardInterrupt:
        raise Interrupted(sink.rows, measured) from None
    finally:
        if bar is not None:
            bar.close()
        sink.close()
        if not cfg.keep_files:
            shutil.rmtree(work, ignore_errors=True)
    return sink.rows
