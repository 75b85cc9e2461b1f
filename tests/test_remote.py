"""Remote storage through fsspec: ``memory://`` and a loopback moto S3 server.

Everything here goes through real fsspec file systems and a real S3 server
(moto's, on 127.0.0.1 with port 0, see :mod:`tests._s3`); requests are
counted by the server itself.
"""

import io
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import warnings

import fsspec
import numpy as np
import pytest

import cpersist
from cpersist.storage.fsspec.write import PART_SIZE
from cpersist.container.sources.ranges import REQUEST_SIZE
from cpersist.storage.fsspec.read import END_BYTES, FsspecSource
from cpersist.container.sources.ranges import merge_ranges

from ._fresh import fresh_env, run_cli, run_code, start_python
from ._s3 import CREDENTIALS, s3_server  # noqa: F401 (a fixture)
from .conftest import assert_same, assert_same_result


def _object(rng, n=1_000_000):
    return {
        "smooth": np.cumsum(rng.normal(size=n)).astype(np.float32),
        "ints": rng.integers(0, 50, (n // 1000, 1000)).astype(np.int16).T,  # Fortran order
        "small": np.arange(10),
        "text": "a model",
        "nested": [np.zeros((0, 3)), {"m": np.eye(3, dtype=">f8")}],
    }


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot pickle this on purpose")


# -- memory:// --------------------------------------------------------------

@pytest.fixture
def memory_dir():
    fs = fsspec.filesystem("memory")
    root = f"/cpersist-test-{os.getpid()}-{id(fs)}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.mark.parametrize("compress", [0, 3, "lz4"])
def test_memory_roundtrip(memory_dir, compress):
    fs, root = memory_dir
    obj = _object(np.random.default_rng(1))
    url = f"memory://{root}/obj.cp"
    assert cpersist.dump(obj, url, compress=compress, chunk_size=1 << 18) == [url]
    assert_same(obj, cpersist.load(url))
    assert_same(obj, cpersist.load((fs, f"{root}/obj.cp")))
    assert_same(obj, cpersist.load(fsspec.open(url)))
    assert fs.ls(root, detail=False) == [f"{root}/obj.cp"]  # no temporary object left


def test_filesystem_pair_and_openfile_as_targets(memory_dir):
    fs, root = memory_dir
    obj = _object(np.random.default_rng(2), 10_000)
    cpersist.dump(obj, (fs, f"{root}/pair.cp"), compress=1)
    cpersist.dump(obj, fsspec.open(f"memory://{root}/open.cp"))
    assert_same(obj, cpersist.load(f"memory://{root}/pair.cp"))
    assert_same(obj, cpersist.load(f"memory://{root}/open.cp"))


def test_memory_failed_dump_leaves_old_object(memory_dir):
    fs, root = memory_dir
    url = f"memory://{root}/obj.cp"
    old = {"x": np.arange(1000)}
    cpersist.dump(old, url)
    before = fs.cat_file(f"{root}/obj.cp")
    with pytest.raises(RuntimeError, match="on purpose"):
        cpersist.dump({"x": np.ones(100_000), "bad": Unpicklable()}, url, compress=3)
    assert fs.cat_file(f"{root}/obj.cp") == before
    assert fs.ls(root, detail=False) == [f"{root}/obj.cp"]


def test_memory_mmap_mode_warns_once_and_loads(memory_dir):
    fs, root = memory_dir
    obj = {"a": np.arange(100_000.0), "b": np.ones(50_000)}
    url = f"memory://{root}/raw.cp"
    cpersist.dump(obj, url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        back = cpersist.load(url, mmap_mode="r")
    assert [str(w.message) for w in caught] == [
        f"cpersist: cannot memory-map arrays from {url}: it is in remote storage; "
        f"loading them into memory"]
    assert caught[0].filename == __file__
    assert_same(obj, back)


def test_memory_inspect_verify_convert(memory_dir):
    fs, root = memory_dir
    obj = _object(np.random.default_rng(3), 100_000)
    src, dst = f"memory://{root}/src.cp", f"memory://{root}/dst.cp"
    cpersist.dump(obj, src, compress=0, chunk_size=1 << 16)
    stats = cpersist.convert(src, dst, compress=("zstd", 5))
    assert stats["stored_bytes_after"] < stats["stored_bytes_before"]
    assert_same(obj, cpersist.load(dst))
    report = cpersist.inspect(dst)
    assert report["file_bytes"] == fs.size(f"{root}/dst.cp")
    assert {a["path"] for a in report["arrays"]} >= {"obj['smooth']", "obj['ints']"}
    assert cpersist.verify(dst)["raw_bytes"] == cpersist.verify(src)["raw_bytes"]


def test_memory_missing_object(memory_dir):
    fs, root = memory_dir
    url = f"memory://{root}/missing.cp"
    with pytest.raises(FileNotFoundError) as info:
        cpersist.load(url)
    assert info.value.filename == url


def test_file_url_is_a_local_path(tmp_path):
    obj = {"a": np.arange(8192.0)}  # a section of its own (small arrays stay in the stream)
    url = (tmp_path / "local.cp").as_uri()
    cpersist.dump(obj, url)
    assert (tmp_path / "local.cp").exists()
    back = cpersist.load(url, mmap_mode="r")
    assert type(back["a"]) is np.memmap  # the local fast path: mapped
    assert_same(obj, back, mmap=True)


def test_storage_options_need_a_url(tmp_path):
    with pytest.raises(ValueError, match="storage_options apply to URLs"):
        cpersist.dump({}, tmp_path / "x.cp", storage_options={"anon": True})
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        cpersist.load("memory://x/y.cp", storage_options="anon")


def test_http_is_read_only():
    with pytest.raises(ValueError, match="HTTP URLs are read-only"):
        cpersist.dump({}, "http://127.0.0.1:9/x.cp")


def test_url_without_fsspec_names_the_extra():
    code = ("import sys; sys.modules['fsspec'] = None; import cpersist\n"
            "try:\n    cpersist.load('s3://bucket/key.cp')\n"
            "except ImportError as exc:\n    print(exc)\n")
    out = run_code(code, check=True).stdout
    assert out.strip() == ("s3://bucket/key.cp: reading and writing URLs needs fsspec: "
                           "pip install fsspec s3fs (the remote extra: pip install '.[remote]' in a checkout)")


def test_merge_ranges():
    gap = 1 << 20
    ranges = [(0, 10), (10, 5), (100, 1), (gap + 50, 3), (10 * gap, 4), (50, 2)]
    requests, places = merge_ranges(ranges, gap=gap, limit=REQUEST_SIZE)
    assert requests == [(0, gap + 53), (10 * gap, 10 * gap + 4)]
    assert places == [(0, 0), (0, 10), (0, 100), (0, gap + 50), (1, 0), (0, 50)]
    # A gap one byte wider is not merged:
    assert len(merge_ranges([(0, 1), (gap + 2, 1)], gap=gap)[0]) == 2
    # The size limit cuts merging:
    assert merge_ranges([(0, 6), (6, 6)], gap=gap, limit=10)[0] == [(0, 6), (6, 12)]


# -- S3 (moto) ----------------------------------------------------------------

@pytest.mark.parametrize("compress", [0, 3, "blosc:lz4"])
def test_s3_roundtrip(s3_server, compress):
    obj = _object(np.random.default_rng(4))
    url = s3_server.url(f"roundtrip-{compress}.cp")
    options = s3_server.storage_options
    assert cpersist.dump(obj, url, compress=compress, chunk_size=1 << 18,
                         storage_options=options) == [url]
    assert_same(obj, cpersist.load(url, storage_options=options))
    with FsspecSource(
            s3_server.filesystem(), url, url, options) as source:
        again, spec_options, identity = source.reopen_spec()
    assert again == url and spec_options == options
    assert identity["size"] == s3_server.filesystem().size(url) and identity["etag"]


def test_s3_reopen_checks_identity(s3_server):
    from cpersist.storage.fsspec.reopen import reopen

    url = s3_server.url("reopened.cp")
    options = s3_server.storage_options
    cpersist.dump({"a": np.arange(10)}, url, storage_options=options)
    with FsspecSource(s3_server.filesystem(), url, url, options) as source:
        spec = source.reopen_spec()
    with reopen(*spec) as again:
        assert again.identity == spec[2]
    cpersist.dump({"a": np.arange(11)}, url, storage_options=options)  # replaced
    with pytest.raises(cpersist.FileChangedError, match="changed since it was first opened"):
        reopen(*spec)


def test_s3_fsspec_file_object_is_read_by_ranges(s3_server):
    obj = _object(np.random.default_rng(8))
    key = "file-object.cp"
    url = s3_server.url(key)
    cpersist.dump(obj, url, compress=3, chunk_size=1 << 16,
                  storage_options=s3_server.storage_options)
    counts = cpersist.verify(url, storage_options=s3_server.storage_options)
    s3_server.counter.clear()
    with s3_server.filesystem().open(url, "rb") as file:
        assert_same(obj, cpersist.load(file))
        assert file.tell() == file.size  # left after the dump, as any file object
    gets = s3_server.counter.gets(key)
    # Read like a URL: both ends, whose trailer shows that this dump ends the
    # object (no walk of its records), then at most one request per array.
    assert counts["sections"] + counts["chunks"] > 20
    assert len(gets) <= 2 + len(obj)


def test_s3_fsspec_file_object_with_two_dumps(s3_server):
    first = {"a": np.arange(300_000.0)}
    second = {"b": np.arange(50_000, dtype=np.int32), "c": "second"}
    key = "two-dumps.cp"
    url = s3_server.url(key)
    one, two = cpersist.dumps(first, compress=3), cpersist.dumps(second, compress=3)
    fs = s3_server.filesystem()
    fs.pipe_file(url, one + two)
    with fs.open(url, "rb") as file:
        assert_same(first, cpersist.load(file))
        assert file.tell() == len(one)  # where the second dump starts
        assert_same(second, cpersist.load(file))
        assert file.tell() == len(one) + len(two)


def test_s3_dump_to_missing_bucket(s3_server):
    url = "s3://no-such-bucket-cpersist/key.cp"
    with pytest.raises(OSError, match="no-such-bucket-cpersist"):
        cpersist.dump({"a": np.arange(10)}, url, storage_options=s3_server.storage_options)


def test_s3_whole_load_merges_requests(s3_server):
    rng = np.random.default_rng(5)
    obj = {"a": rng.normal(size=12_000_000).astype(np.float32),
           "b": rng.integers(0, 1000, 2_000_000)}
    key = "many-chunks.cp"
    url = s3_server.url(key)
    options = s3_server.storage_options
    cpersist.dump(obj, url, compress=3, chunk_size=1 << 18, storage_options=options)
    size = s3_server.filesystem().size(url)
    info = cpersist.inspect(url, storage_options=options)
    chunks = cpersist.verify(url, storage_options=options)["chunks"]
    assert chunks > 100 and size > 2 * REQUEST_SIZE
    s3_server.counter.clear()
    assert_same(obj, cpersist.load(url, storage_options=options))
    gets = s3_server.counter.gets(key)
    # The whole object streamed, beside its end (the index, read first),
    # whatever the number of arrays.
    assert len(info["arrays"]) == 2
    assert len(gets) == 2
    served = sum(r[3] for r in gets)
    assert served == size + END_BYTES  # each byte once, but the end
    # One array read whole: one streamed request for its section.
    with cpersist.open(url, storage_options=options) as handle:
        s3_server.counter.clear()
        assert_same(obj["a"], handle.arrays["obj['a']"][:])
    assert len(s3_server.counter.gets(key)) == 1
    # Opening the object (inspect) costs one HEAD and one round trip of two GETs.
    s3_server.counter.clear()
    cpersist.inspect(url, storage_options=options)
    assert [r[0] for r in s3_server.counter.requests] == ["HEAD", "GET", "GET"]


def test_s3_failed_dump_leaves_old_object(s3_server):
    fs = s3_server.filesystem()
    url = s3_server.url("replaced.cp")
    options = s3_server.storage_options
    old = {"x": np.arange(1000)}
    cpersist.dump(old, url, storage_options=options)
    before = fs.cat_file(url)
    big = np.random.default_rng(6).integers(0, 255, PART_SIZE + (4 << 20), dtype=np.uint8)
    with pytest.raises(RuntimeError, match="on purpose"):
        # The array fills more than one part, uploaded before pickling fails.
        cpersist.dump({"big": big, "bad": Unpicklable()}, url, storage_options=options)
    assert fs.cat_file(url) == before
    assert fs.list_multipart_uploads(s3_server.bucket) == []  # aborted, none left
    assert_same(old, cpersist.load(url, storage_options=options))
    # A large object that succeeds replaces it whole.
    cpersist.dump({"big": big}, url, storage_options=options)
    assert_same({"big": big}, cpersist.load(url, storage_options=options))


def test_s3_missing_object_and_bucket(s3_server):
    options = s3_server.storage_options
    url = s3_server.url("no-such-key.cp")
    with pytest.raises(FileNotFoundError) as info:
        cpersist.load(url, storage_options=options)
    assert info.value.filename == url
    with pytest.raises(FileNotFoundError, match="no-such-bucket-cpersist"):
        cpersist.load("s3://no-such-bucket-cpersist/key.cp", storage_options=options)


def test_s3_unreachable_endpoint_names_the_url():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = "s3://bucket/key.cp"
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "skip_instance_cache": True,
               "key": "testing", "secret": "testing",
               "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2}}
    with pytest.raises(cpersist.RemoteStorageError, match=r"^s3://bucket/key\.cp: request failed"):
        cpersist.load(url, storage_options=options)


def test_s3_truncated_object_is_corrupt(s3_server):
    fs = s3_server.filesystem()
    url = s3_server.url("truncated.cp")
    cpersist.dump({"a": np.arange(100_000)}, url, compress=3,
                  storage_options=s3_server.storage_options)
    fs.pipe_file(url, fs.cat_file(url)[:-100])
    with pytest.raises(cpersist.CorruptFileError, match=r"^s3://"):
        cpersist.load(url, storage_options=s3_server.storage_options)


def _cli(*args, env=None):
    return run_cli(*args, env=env or fresh_env(), timeout=120)


def test_cli_on_s3_urls(s3_server):
    obj = _object(np.random.default_rng(7), 200_000)
    url = s3_server.url("cli.cp")
    cpersist.dump(obj, url, compress=3, storage_options=s3_server.storage_options)
    env = {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": s3_server.endpoint,
           "PYTHONPATH": os.pathsep.join(sys.path)}
    info = _cli("info", url, env=env)
    assert info.returncode == 0, info.stderr
    assert info.stdout.startswith(f"{url}: cpersist format ")
    assert "obj['smooth']" in info.stdout
    verify = _cli("verify", url, env=env)
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.startswith(f"{url}: OK (")
    missing = _cli("verify", s3_server.url("nope.cp"), env=env)
    assert missing.returncode == 1
    assert missing.stdout.startswith(f"{s3_server.url('nope.cp')}: FAILED: ")
    # The endpoint as a --storage-option instead of the environment:
    env.pop("AWS_ENDPOINT_URL")
    dst = s3_server.url("cli-raw.cp")
    converted = _cli("convert", url, dst, "--compress", "raw",
                     "--storage-option", f"endpoint_url={s3_server.endpoint}",
                     "--storage-option", "skip_instance_cache=true", env=env)
    assert converted.returncode == 0, converted.stderr
    assert_same(obj, cpersist.load(dst, storage_options=s3_server.storage_options))


def test_cli_bad_storage_option():
    result = _cli("info", "memory://x/y.cp", "--storage-option", "novalue")
    assert result.returncode == 2
    assert "expected KEY=VALUE, got 'novalue'" in result.stderr


# -- cpersist.open on S3 --------------------------------------------------------

def _without_aws_environment():
    """The environment of a process that knows no S3 credentials nor endpoint
    (and looks for none in files or on the network)."""
    variables = {k: None for k in os.environ if k.startswith("AWS_")}
    variables.update(AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                     AWS_EC2_METADATA_DISABLED="true")
    return fresh_env(**variables)


def _with_credentials(s3_server):
    """Storage options naming the endpoint and the credentials themselves."""
    return {**s3_server.storage_options, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}


def _nibbles(n_bytes, seed):
    """``n_bytes`` random 4-bit values, one per byte: compressible to about
    half, like noisy sensor data, and never repeating."""
    words = np.random.default_rng(seed).integers(0, 2**63, n_bytes // 16, dtype=np.int64)
    packed = words.view(np.uint8)
    out = np.empty((packed.size, 2), dtype=np.uint8)
    np.bitwise_and(packed, 0x0F, out=out[:, 0])
    np.right_shift(packed, 4, out=out[:, 1])
    return out.reshape(-1)


def test_s3_slices_of_a_100_mb_object_cost_few_requests(s3_server):
    a = _nibbles(200 << 20, seed=9).reshape(-1, 2048)  # 102 400 rows of 2 KiB
    key = "hundred-mb.cp"
    url = s3_server.url(key)
    options = s3_server.storage_options
    cpersist.dump({"samples": a}, url, compress=1, storage_options=options)
    size = s3_server.filesystem().size(url)
    assert size >= 100 * 10**6
    with cpersist.open(url, storage_options=options) as f:
        lazy = f.arrays["obj['samples']"]
        rows_per_chunk = lazy.chunks[0][0]
        chunks = lazy._bind().section.chunks
        largest = max(c.length for c in chunks)
    assert len(chunks) >= 25

    def counted(index):
        """The slice read through a fresh handle, and the requests (all of
        them: the HEAD, both ends, the chunks) and bytes it cost."""
        s3_server.counter.clear()
        with cpersist.open(url, storage_options=options) as f:
            got = f.arrays["obj['samples']"][index]
        requests = [r for r in s3_server.counter.requests if r[1].endswith("/" + key)]
        return got, requests, sum(r[3] for r in requests)

    # Opening costs a HEAD and both ends (header; index and pickle stream),
    # then the slice one GET for the chunks it touches.
    middle = 20 * rows_per_chunk
    inside = (slice(middle + 100, middle + 300), slice(5, 900))
    got, requests, served = counted(inside)
    assert_same_result(a[inside], got)
    assert len(requests) <= 4
    assert served <= 2 * largest + 2 * END_BYTES  # at most 2 chunks, the header and the tail
    one_percent = a.shape[0] // 100  # half a chunk's rows
    inside = slice(middle + 512, middle + 512 + one_percent)
    got, requests, served = counted(inside)
    assert_same_result(a[inside], got)
    assert len(requests) <= 4
    assert served <= 2 * largest + 2 * END_BYTES
    # Across a chunk boundary: both chunks in one request.
    across = slice(middle - 500, middle - 500 + one_percent)
    got, requests, served = counted(across)
    assert_same_result(a[across], got)
    assert len(requests) <= 4
    assert served <= 2 * largest + 2 * END_BYTES
    # A column of those rows is read the same way.
    column = (across, 7)
    got, requests, served = counted(column)
    assert_same_result(a[column], got)
    assert len(requests) <= 4
    assert served <= 2 * largest + 2 * END_BYTES


@pytest.mark.parametrize("compress, verify", [(0, False), (0, True), (3, True)])
def test_memory_slices_across_chunks_fetched_together(memory_dir, compress, verify):
    fs, root = memory_dir
    a = np.random.default_rng(14).random((4000, 30))
    url = f"memory://{root}/across.cp"
    cpersist.dump({"a": a}, url, compress=compress, chunk_size=1 << 15)
    with cpersist.open(url, verify=verify) as f:
        lazy = f.arrays["obj['a']"]
        source = lazy._bind().reader.source
        calls = []
        real = source.read_ranges
        source.read_ranges = lambda ranges: calls.append(list(ranges)) or real(ranges)
        rows = lazy.chunks[0][0]
        for index in [slice(rows - 3, 5 * rows + 2), (slice(rows - 3, 5 * rows + 2), 4),
                      (slice(5 * rows, rows - 10, -3), slice(2, 9)), slice(10, 20)]:
            calls.clear()
            assert_same_result(a[index], lazy[index], str(index))
            assert len(calls) == 1  # one call for all the chunks, merged in one request
            assert len(merge_ranges(calls[0])[0]) == 1


def test_s3_open_lists_and_slices_lazily(s3_server):
    obj = _object(np.random.default_rng(10), 300_000)
    url = s3_server.url("opened.cp")
    options = s3_server.storage_options
    cpersist.dump(obj, url, compress=3, chunk_size=1 << 16, storage_options=options)
    paths = {a["path"] for a in cpersist.inspect(url, storage_options=options)["arrays"]}
    with cpersist.open(url, storage_options=options) as f:
        assert f.name == url
        arrays = f.arrays
        assert set(arrays) == paths
        smooth, ints = arrays["obj['smooth']"], arrays["obj['ints']"]
        assert (smooth.shape, smooth.dtype) == (obj["smooth"].shape, obj["smooth"].dtype)
        for index in [slice(None), slice(12_345, 67_890, 7), slice(None, None, -1000), -1]:
            assert_same_result(obj["smooth"][index], smooth[index])
        for index in [(slice(10, 700), 3), (slice(None), slice(250, 50, -3)), (..., 299)]:
            assert_same_result(obj["ints"][index], ints[index])
        lazy = f.load(lazy=True)
        assert type(lazy["smooth"]) is cpersist.LazyArray and lazy["smooth"] is smooth
        assert lazy["text"] == "a model"
        assert_same(obj["nested"], lazy["nested"])  # small arrays come whole
        assert_same(obj["ints"], np.asarray(lazy["ints"]))
    # Closed, the handle's arrays reopen the object by its URL.
    assert_same_result(obj["smooth"][-5:], smooth[-5:])


def test_s3_lazy_array_carries_url_options_and_identity(s3_server, tmp_path):
    w = np.random.default_rng(11).random((3000, 40))
    url = s3_server.url("carried.cp")
    options = _with_credentials(s3_server)
    cpersist.dump({"w": w}, url, compress=3, chunk_size=1 << 16, storage_options=options)
    with cpersist.open(url, storage_options=options) as f:
        data = pickle.dumps(f.arrays["obj['w']"])
    reference = pickle.loads(data)._file.reference
    assert reference.url == url and reference.storage_options == options
    assert reference.identity == {"etag": s3_server.filesystem().info(url)["ETag"].strip('"'),
                                  "size": s3_server.filesystem().size(url)}
    # Another process, which knows neither the endpoint nor any credentials,
    # reads it with what the pickle carries.
    (tmp_path / "lazy.pkl").write_bytes(data)
    code = textwrap.dedent(f"""
        import pickle, sys, numpy as np
        lazy = pickle.load(open({str(tmp_path / 'lazy.pkl')!r}, 'rb'))
        np.save(sys.stdout.buffer, lazy[2999:5:-7, ::3])
    """)
    done = run_code(code, text=False, env=_without_aws_environment(), timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert_same_result(w[2999:5:-7, ::3], np.load(io.BytesIO(done.stdout)))
    # The same process without the credentials in the options cannot.
    bare = {k: v for k, v in options.items() if k not in ("key", "secret")}
    code = f"import cpersist; cpersist.load({url!r}, storage_options={bare!r})"
    refused = run_code(code, env=_without_aws_environment(), timeout=120)
    assert refused.returncode == 1 and "Unable to locate credentials" in refused.stderr
    # The object replaced: reading the pickled array refuses the new one.
    cpersist.dump({"w": w[::-1]}, url, compress=3, chunk_size=1 << 16, storage_options=options)
    with pytest.raises(cpersist.FileChangedError,
                       match=rf"^{url}: the object changed since it was first opened"):
        pickle.loads(data)[0]


def test_s3_dask_cluster_sums_a_lazy_array(s3_server, dask_client):
    a = np.random.default_rng(12).integers(-10**9, 10**9, (40_000, 25))
    url = s3_server.url("dask.cp")
    options = _with_credentials(s3_server)
    cpersist.dump({"a": a}, url, compress=3, chunk_size=1 << 20, storage_options=options)
    # The workers know no endpoint nor credentials but the array's.
    environments = dask_client.run(lambda: {k for k in os.environ if k.startswith("AWS_")})
    assert all(not names & {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"}
               for names in environments.values())
    with cpersist.open(url, storage_options=options) as f:
        x = f.arrays["obj['a']"].to_dask()
    assert len(x.chunks[0]) >= 8
    s3_server.counter.clear()
    assert dask_client.compute(x.sum()).result() == a.sum()
    assert_same_result(a[::-3, 7], dask_client.compute(x[::-3, 7]).result())
    assert s3_server.counter.gets("dask.cp")  # read from the server by the workers


def test_cli_storage_options_name_endpoint_and_credentials(s3_server):
    obj = _object(np.random.default_rng(13), 100_000)
    url = s3_server.url("cli-options.cp")
    cpersist.dump(obj, url, compress=3, storage_options=s3_server.storage_options)
    options = ["--storage-option", f"endpoint_url={s3_server.endpoint}",
               "--storage-option", f"key={CREDENTIALS['AWS_ACCESS_KEY_ID']}",
               "--storage-option", f"secret={CREDENTIALS['AWS_SECRET_ACCESS_KEY']}"]
    info = _cli("info", url, *options, env=_without_aws_environment())
    assert info.returncode == 0, info.stderr
    assert info.stdout.startswith(f"{url}: cpersist format ") and "obj['ints']" in info.stdout
    verify = _cli("verify", url, *options, env=_without_aws_environment())
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.startswith(f"{url}: OK (")


def test_open_url_lazy_array_pickles_and_reopens_from_the_url():
    url = f"memory://cpersist-lazy-{os.getpid()}/lazy.cp"
    w = np.arange(60_000, dtype=np.float64).reshape(600, 100)
    cpersist.dump({"w": w}, url, compress=3, chunk_size=1 << 14)
    try:
        with cpersist.open(url) as handle:
            lazy = handle.arrays["obj['w']"]
            np.testing.assert_array_equal(lazy[10:20, 5], w[10:20, 5])
            copy = pickle.loads(pickle.dumps(lazy))
        # The handle is closed: the unpickled array reopens the object by its URL.
        assert_same(w[100:300], copy[100:300])
        cpersist.dump({"w": w + 1}, url)  # the object is replaced
        again = pickle.loads(pickle.dumps(copy))
        with pytest.raises(cpersist.FileChangedError, match="changed"):
            again[0:2]
    finally:
        fsspec.filesystem("memory").rm(url, recursive=True)


# -- whole sections streamed ---------------------------------------------------

def _large_object(seed=9):
    # Compressible but not trivially, in many chunks, its one section longer
    # than REQUEST_SIZE.
    rng = np.random.default_rng(seed)
    n = 15_000_000
    return {"a": np.round(rng.normal(scale=3, size=n).astype(np.float32) * 32) / 32,
            "note": "streamed"}


@pytest.fixture(scope="module")
def large_object(s3_server):
    obj = _large_object()
    key = "streamed.cp"
    url = s3_server.url(key)
    cpersist.dump(obj, url, compress=3, chunk_size=1 << 18,
                  storage_options=s3_server.storage_options)
    return obj, key, url


def test_s3_full_load_is_one_request_per_section(s3_server, large_object):
    obj, key, url = large_object
    options = s3_server.storage_options
    size = s3_server.filesystem().size(url)
    assert cpersist.verify(url, storage_options=options)["chunks"] > 100
    assert size > REQUEST_SIZE + 2 * END_BYTES
    s3_server.counter.clear()
    assert_same(obj, cpersist.load(url, storage_options=options))
    requests = [(r[0], r[2]) for r in s3_server.counter.requests if r[1].endswith(key)]
    # One HEAD, then in one round trip the end (the index) and the whole
    # object streamed.
    assert [method for method, _ in requests] == ["HEAD", "GET", "GET"]
    assert sorted(r[2] for r in s3_server.counter.gets(key)) == [
        f"bytes=0-{size - 1}", f"bytes={size - END_BYTES}-{size - 1}"]
    assert sum(r[3] for r in s3_server.counter.gets(key)) == size + END_BYTES
    # verify reads every byte too.
    s3_server.counter.clear()
    assert cpersist.verify(url, storage_options=options)["stored_bytes"] < size
    assert len(s3_server.counter.gets(key)) == 2


def test_s3_raw_section_read_whole_is_one_request(s3_server):
    big = np.random.default_rng(10).integers(0, 1 << 30, 6_000_000)  # 48 MB raw
    key = "raw-streamed.cp"
    url = s3_server.url(key)
    options = s3_server.storage_options
    cpersist.dump({"big": big}, url, storage_options=options)
    for verify in (True, False):
        s3_server.counter.clear()
        assert_same({"big": big}, cpersist.load(url, storage_options=options, verify=verify))
        gets = s3_server.counter.gets(key)
        assert len(gets) == 2
        assert sum(r[3] for r in gets) == s3_server.filesystem().size(url) + END_BYTES


def test_s3_lazy_slice_stays_small(s3_server, large_object):
    obj, key, url = large_object
    options = s3_server.storage_options
    with cpersist.open(url, storage_options=options) as handle:
        lazy = handle.arrays["obj['a']"]
        s3_server.counter.clear()
        np.testing.assert_array_equal(lazy[1000:1010], obj["a"][1000:1010])
    gets = s3_server.counter.gets(key)
    assert len(gets) <= 2
    assert sum(r[3] for r in gets) <= 2 * (1 << 18)  # at most two chunks' bytes


def test_s3_slice_of_incompressible_data_fetches_only_its_pieces(s3_server):
    """Chunks kept verbatim carry their pieces' checksums: a slice fetches
    the 1 MiB pieces holding it, not whole 4 MiB chunks."""
    from cpersist.container.layout import PIECE_SIZE

    a = np.random.default_rng(21).integers(0, 256, size=(12_000, 1000), dtype=np.uint8)
    key = "noise.cp"
    url = s3_server.url(key)
    options = s3_server.storage_options
    cpersist.dump({"a": a}, url, compress=3, storage_options=options)
    with cpersist.open(url, storage_options=options) as handle:
        lazy = handle.arrays["obj['a']"]
        rows = lazy.chunks[0][0]
        for rows_read in (slice(rows + 100, rows + 700), slice(2 * rows - 300, 2 * rows + 300)):
            # Some columns of the rows: not one run of the stored bytes.
            for part in (rows_read, (rows_read, slice(5, 10))):
                s3_server.counter.clear()
                assert_same_result(a[part], lazy[part])
                gets = s3_server.counter.gets(key)
                assert len(gets) == 1
                assert sum(r[3] for r in gets) <= 600 * 1000 + 2 * PIECE_SIZE


def test_s3_object_replaced_during_read_is_refused(s3_server, large_object):
    obj, key, url = large_object
    options = s3_server.storage_options
    fs = s3_server.filesystem()
    with cpersist.open(url, storage_options=options) as handle:
        lazy = handle.arrays["obj['a']"]
        original = fs.cat_file(url)
        try:
            # Same size, other bytes: only the version check tells them apart.
            fs.pipe_file(url, original[:-1] + bytes([original[-1] ^ 1]))
            with pytest.raises(cpersist.FileChangedError,
                               match=rf"^{url}: the object changed since it was first opened"):
                lazy.read()
        finally:
            fs.pipe_file(url, original)


@pytest.mark.parametrize("verify", [True, False])
def test_s3_object_replaced_under_a_slice_is_refused(s3_server, verify):
    # A slice is a range request: it names the version the index came from,
    # so the new object's bytes are never read through the old index.
    url = s3_server.url(f"replaced-slice-{verify}.cp")
    options = s3_server.storage_options
    w = np.arange(600_000, dtype=np.float64).reshape(6000, 100)
    cpersist.dump({"w": w}, url, storage_options=options)  # raw: slices are plain ranges
    fs = s3_server.filesystem()
    with cpersist.open(url, storage_options=options, verify=verify) as handle:
        lazy = handle.arrays["obj['w']"]
        assert_same(w[3000:3010], lazy[3000:3010])
        original = fs.cat_file(url)
        fs.pipe_file(url, original[:-1] + bytes([original[-1] ^ 1]))  # same size
        with pytest.raises(cpersist.FileChangedError,
                           match=rf"^{url}: the object changed since it was first opened"):
            lazy[4000:4010]


def test_s3_truncated_large_object_is_corrupt(s3_server, large_object):
    _, key, url = large_object
    fs = s3_server.filesystem()
    cut = s3_server.url("streamed-truncated.cp")
    data = fs.cat_file(url)
    for keep in (len(data) - 100, len(data) // 2):
        fs.pipe_file(cut, data[:keep])
        with pytest.raises(cpersist.CorruptFileError, match=r"^s3://"):
            cpersist.load(cut, storage_options=s3_server.storage_options)


def test_http_full_load_is_one_request_per_section(s3_server, large_object):
    # The moto server answers plain HTTP range requests too, for an object
    # written by a multipart upload.
    obj, _, _ = large_object
    key = "http-streamed.cp"
    cpersist.dump(obj, s3_server.url(key), compress=3, chunk_size=1 << 18,
                  storage_options=s3_server.storage_options)
    url = f"{s3_server.endpoint}/{s3_server.bucket}/{key}"
    s3_server.counter.clear()
    assert_same(obj, cpersist.load(url))
    gets = s3_server.counter.gets(key)
    assert len(gets) == 2
    size = s3_server.filesystem().size(s3_server.url(key))
    assert sum(r[3] for r in gets) == size + END_BYTES


def test_http_server_without_range_requests(tmp_path):
    # Python's http.server ignores Range headers: every answer is the whole file.
    cpersist.dump({"a": np.arange(100_000)}, tmp_path / "x.cp")  # 800 kB: read by ranges
    server = start_python("-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                          "--directory", tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N ..."
        port = int(line.split(" port ")[1].split()[0])
        url = f"http://127.0.0.1:{port}/x.cp"
        with pytest.raises(cpersist.RemoteStorageError,
                           match=rf"^{url}: the server does not answer range requests"):
            cpersist.load(url)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


def test_s3_load_with_a_large_pickle_stream(s3_server, large_object):
    # Thousands of small arrays travel in the pickle stream, which then
    # outgrows the bytes fetched at the end: one more request, no more.
    rng = np.random.default_rng(11)
    obj = {"a": large_object[0]["a"], "many": [rng.random(i % 50) for i in range(5_000)]}
    key = "large-pickle.cp"
    url = s3_server.url(key)
    options = s3_server.storage_options
    cpersist.dump(obj, url, compress=3, chunk_size=1 << 18, storage_options=options)
    info = cpersist.inspect(url, storage_options=options)
    assert info["pickle"]["stored_bytes"] > END_BYTES
    s3_server.counter.clear()
    assert_same(obj, cpersist.load(url, storage_options=options))
    assert len(s3_server.counter.gets(key)) == 3


def test_s3_damaged_chunk_in_a_streamed_load(s3_server, large_object):
    _, _, url = large_object
    fs = s3_server.filesystem()
    data = bytearray(fs.cat_file(url))
    data[len(data) // 2] ^= 0xFF  # inside a chunk of the one array
    damaged = s3_server.url("streamed-damaged.cp")
    fs.pipe_file(damaged, bytes(data))
    for n_threads in (1, 2):
        # The load stops at that chunk: the stream is closed, nothing waits.
        with pytest.raises(cpersist.CorruptFileError,
                           match=rf"^{damaged}: checksum mismatch in section"):
            cpersist.load(damaged, storage_options=s3_server.storage_options,
                          n_threads=n_threads)
