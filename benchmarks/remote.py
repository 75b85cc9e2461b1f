"""Reading from S3: a full load from a loopback S3 server (moto, in a child
process so that serving does not share this interpreter's lock) beside zarr
v3 through :class:`zarr.storage.FsspecStore` with the same chunks and codec,
and a plain s3fs download of the same bytes (what any reader must at least
spend); then the requests and bytes the server answers for a slice after a
fresh :func:`cpersist.open`. Medians over ``runs``, a fresh file system each.

Run from the repository root (it is not installed with cpersist; it needs
``pip install 'cpersist[remote]' 'moto[server]'``)::

    python -m benchmarks.remote RUN_DIR [--mb 210] [--runs 3]

It writes ``remote.csv`` and ``remote.txt`` to the run's folder;
:mod:`benchmarks.ratios` makes its comparisons ratios keyed for the bounds.
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys

import numpy as np

from cpersist.benchmarks.output import write_csv
from cpersist.tools.table import format_table

from .timing import time_runs

__all__ = ["REMOTE_COLUMNS", "run", "format_results", "main"]

#: Keys of each result row (``requests`` and ``served_mb``: what one read of
#: the slice row asks of the server).
REMOTE_COLUMNS = ["method", "what", "median_s", "min_s", "max_s", "runs", "array_mb",
                  "stored_mb", "mb_per_s", "ratio_vs_cpersist", "requests", "served_mb",
                  "status", "reason"]
#: The slice row's method.
SLICE = "cpersist.open slice"

_SERVER = r"""
import logging
from moto.moto_server.werkzeug_app import (DomainDispatcherApplication, MotoRequestHandler,
                                           create_backend_app)
from werkzeug.serving import make_server
import json, threading
app = DomainDispatcherApplication(create_backend_app)
counts = {"requests": 0, "bytes": 0}
lock = threading.Lock()

def counting(environ, start_response):
    # GET /__requests__ answers the requests and body bytes served since the
    # last time it was asked (itself not counted).
    if environ.get("PATH_INFO") == "/__requests__":
        with lock:
            body = json.dumps(counts).encode()
            counts.update(requests=0, bytes=0)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    with lock:
        counts["requests"] += 1
    return counted(app(environ, start_response))

def counted(body):
    for piece in body:
        with lock:
            counts["bytes"] += len(piece)
        yield piece

server = make_server("127.0.0.1", 0, counting, threaded=True,
                     request_handler=MotoRequestHandler)
print(server.server_address[1], flush=True)
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log
server.serve_forever()
"""

_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def _start_server():
    process = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    port = process.stdout.readline().strip()
    if not port.isdigit():
        process.kill()
        raise RuntimeError("the moto S3 server did not start (pip install 'moto[server]')")
    return process, f"http://127.0.0.1:{port}"


def make_array(mb, seed=0):
    """float32 data of ``mb`` MB that Zstandard shrinks to about half: a
    smooth signal plus noise, in steps of 1/32."""
    n = int(mb * 1e6) // 4
    rng = np.random.default_rng(seed)
    signal = np.sin(np.linspace(0, 200 * np.pi, n, dtype=np.float32)) * 100
    noise = rng.normal(scale=3, size=n).astype(np.float32)
    data = signal + noise
    return np.round(data * 32) / 32  # compressible, not trivially


def run(mb=210, runs=3, chunk_size=4 << 20, level=3, progress=print):
    """Rows (:data:`REMOTE_COLUMNS`) of reading ``mb`` MB of float32 data (about
    half that stored) from a loopback S3 server: ``cpersist.load``, ``zarr
    FsspecStore`` and ``s3fs cat_file``, ``runs`` times each (Zstandard at
    ``level``, ``chunk_size`` bytes per chunk in cpersist and zarr alike), then
    the slice row; a reader that cannot run is ``n/a`` with the reason.
    ``progress`` is called with a line of text as each step starts."""
    import s3fs

    import cpersist

    os.environ.update(_CREDENTIALS)
    process, endpoint = _start_server()
    try:
        options = {"endpoint_url": endpoint}
        fs = s3fs.S3FileSystem(**options)
        bucket = "cpersist-bench"
        fs.mkdir(bucket)
        progress(f"making {mb} MB of float32 data")
        data = make_array(mb)
        url = f"s3://{bucket}/array.cp"
        progress("uploading the cpersist object")
        cpersist.dump({"data": data}, url, compress=("zstd", level), chunk_size=chunk_size,
                      storage_options=options)
        stored = fs.size(url)
        rows = []

        def row(method, what, read, stored_bytes):
            progress(f"timing {method}")
            entry = {"method": method, "what": what, "array_mb": round(data.nbytes / 1e6, 1),
                     "stored_mb": round(stored_bytes / 1e6, 1) if stored_bytes else None}
            try:
                times = time_runs(read, runs)
            except Exception as exc:  # a peer missing or failing: reported, not fatal
                entry.update(status="n/a", reason=f"{type(exc).__name__}: {exc}"[:200], runs=0)
                rows.append(entry)
                return
            median = statistics.median(times)
            entry.update(median_s=round(median, 3), min_s=round(min(times), 3),
                         max_s=round(max(times), 3), runs=len(times),
                         mb_per_s=round(data.nbytes / 1e6 / median, 1), status="ok",
                         reason="")
            rows.append(entry)

        def load_cpersist():
            out = cpersist.load(url, storage_options=options)["data"]
            assert out.shape == data.shape

        row("cpersist.load", f"whole object, zstd level {level}, {chunk_size >> 20} MiB "
            f"chunks", load_cpersist, stored)

        zarr_stored = None
        try:
            zarr_url, zarr_read = _zarr_array(data, bucket, options, chunk_size, level)
            zarr_stored = sum(fs.du(zarr_url, total=False).values())
        except Exception as exc:
            zarr_read = _raiser(exc)
        row("zarr FsspecStore", f"zarr v3 array, ZstdCodec level {level}, same chunks",
            zarr_read, zarr_stored)

        row("s3fs cat_file", "download of the cpersist object's bytes, no decoding",
            lambda: s3fs.S3FileSystem(**options).cat_file(url), stored)

        # 1% of the rows from the middle, from a fresh open: the requests
        # (HEAD and GETs) and bytes the server answers for the open, the
        # listing and the slice.
        lo = len(data) // 2
        hi = lo + len(data) // 100

        def read_slice():
            with cpersist.open(url, storage_options=options) as handle:
                part = handle.arrays["obj['data']"][lo:hi]
            assert np.array_equal(part, data[lo:hi])

        _served(endpoint)
        read_slice()
        asked = _served(endpoint)
        row(SLICE, f"1% of the rows (elements {lo}:{hi}) after a fresh open", read_slice,
            None)
        rows[-1].update(requests=asked["requests"], served_mb=round(asked["bytes"] / 1e6, 2))
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
    base = rows[0].get("median_s")
    for entry in rows:
        if entry.get("status") == "ok" and base and entry["method"] != SLICE:
            # Above 1: cpersist's full load is that many times faster.
            entry["ratio_vs_cpersist"] = round(entry["median_s"] / base, 2)
    return rows


def _served(endpoint):
    """Requests and bytes the server answered since the last call."""
    import json
    from urllib.request import urlopen

    with urlopen(f"{endpoint}/__requests__") as answer:
        return json.loads(answer.read())


def _raiser(exc):
    def read():
        raise exc
    return read


def _zarr_array(data, bucket, options, chunk_size, level):
    import zarr
    from zarr.codecs import ZstdCodec
    from zarr.storage import FsspecStore

    url = f"s3://{bucket}/array.zarr"
    store = FsspecStore.from_url(url, storage_options=dict(options, asynchronous=True))
    array = zarr.create_array(store, shape=data.shape, dtype=data.dtype,
                              chunks=(chunk_size // data.itemsize,),
                              compressors=ZstdCodec(level=level), overwrite=True)
    array[:] = data

    def read():
        fresh = FsspecStore.from_url(url, storage_options=dict(options, asynchronous=True),
                                     read_only=True)
        out = zarr.open_array(fresh, mode="r")[:]
        assert out.shape == data.shape

    return url, read


def format_results(rows):
    """The suite's printed table."""
    table = []
    for r in rows:
        span = f"{r['min_s']:.2f}-{r['max_s']:.2f}" if r.get("status") == "ok" else ""
        if r.get("status") != "ok":
            table.append([r["method"], f"{r.get('status')}: {r.get('reason')}"])
        elif r["method"] == SLICE:
            table.append([r["method"], f"{r['median_s']:.3f}", span,
                          f"{r['requests']} requests, {r['served_mb']} MB served"])
        else:
            stored = r["stored_mb"] if r["stored_mb"] is not None else "-"
            table.append([r["method"], f"{r['median_s']:.2f}", span, f"{r['mb_per_s']:.1f}", stored,
                          r.get("ratio_vs_cpersist", "-")])
    return format_table(["method", "median s", "range s", "MB/s", "stored MB", "time / cpersist"],
                        table, right=(1, 2, 3, 4, 5))


#: The table's title.
TITLE = "Reading from S3 (moto on 127.0.0.1)"


def main(argv=None):
    """Measure, print the table, write ``remote.csv`` and ``remote.txt``; 1
    when a row failed (a reader that cannot run is ``n/a``, not a failure)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.remote",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="RUN_DIR", help="folder of a benchmark run (made if new)")
    parser.add_argument("--mb", type=float, default=210, help="array size in MB (default 210)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per reader (default 3)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    missing = [name for name in ("s3fs", "moto") if importlib.util.find_spec(name) is None]
    if missing:
        rows = [{"method": "cpersist.load", "status": "not installed",
                 "reason": f"needs {' and '.join(missing)} (pip install "
                           f"'cpersist[remote]' 'moto[server]')"}]
    else:
        try:
            rows = run(mb=args.mb, runs=args.runs, progress=lambda text: None)
        except Exception as exc:  # reported as a failed row
            rows = [{"method": "cpersist.load", "status": "failed",
                     "reason": f"{type(exc).__name__}: {exc}"[:300]}]
    table = format_results(rows)
    print(f"{TITLE}\n{table}")
    write_csv(os.path.join(args.out, "remote.csv"), rows, REMOTE_COLUMNS)
    with open(os.path.join(args.out, "remote.txt"), "w", encoding="utf-8") as file:
        file.write(f"{TITLE}\n{table}\n")
    return 1 if any(r.get("status") == "failed" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
