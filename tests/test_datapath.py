"""The data path: byte sources, which file objects are used through their
descriptor, errors that name the file, standard input and FIFOs in the CLI."""

import bz2
import gzip
import io
import lzma
import os
import subprocess
import textwrap
import threading

import numpy as np
import pytest

import cpersist
from cpersist import CorruptFileError
from cpersist.storage.open import open_source
from cpersist.container.files import local_fd
from cpersist._runtime.temporaries import TMP_SUFFIX
from cpersist.container import ContainerReader
from cpersist.container.sources import (FileObjectSource, LocalFileSource, MemorySource,
                                        ShortReadError, SpooledSource, source_for)

from . import _fresh
from .conftest import assert_same


def run_cli(*args, stdin=None):
    return _fresh.run_cli(*args, input=stdin, text=False, timeout=120)


def sample():
    return {"a": np.arange(100_000, dtype=np.float64).reshape(250, 400),
            "f": np.asfortranarray(np.ones((30, 20), dtype=np.int16)), "s": "text"}


# -- byte sources ---------------------------------------------------------------

DATA = bytes(range(256)) * 40


def _sources(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"PREFIX" + DATA)
    plain = open(path, "rb")
    plain.seek(6)
    wrapped = io.BytesIO(b"PREFIX" + DATA)
    wrapped.seek(6)
    return [LocalFileSource(plain, "plain", plain.fileno(), owned=True),
            FileObjectSource(wrapped, "wrapped"),
            MemorySource(bytearray(DATA), "memory"),
            SpooledSource(io.BufferedReader(io.BytesIO(DATA)), "spooled")]


def test_every_source_reads_exact_ranges_from_its_start(tmp_path):
    for source in _sources(tmp_path):
        with source:
            assert source.size == len(DATA), source
            buffer = bytearray(100)
            source.read_into(1000, buffer)
            assert buffer == DATA[1000:1100]
            assert bytes(source.read(0, 7)) == DATA[:7]
            assert [bytes(r) for r in source.read_ranges([(5, 3), (len(DATA) - 4, 4), (9, 0)])] \
                == [DATA[5:8], DATA[-4:], b""]
            # The offset in the message is the file's (past its prefix).
            with pytest.raises(ShortReadError, match=f"^{source.name}: truncated: wanted 10 "
                                                     f"bytes at offset "
                                                     f"{source.base + len(DATA) - 4}, got"):
                source.read_into(len(DATA) - 4, bytearray(10))
            assert isinstance(ShortReadError("x"), CorruptFileError)


def test_concurrent_reads_from_every_source_are_whole(tmp_path):
    """Threads reading different ranges at once each get their own bytes
    (the file-object source serialises each seek-and-read)."""
    for source in _sources(tmp_path):
        errors = []

        def reader(k):
            for i in range(300):
                offset = (k * 997 + i * 31) % (len(DATA) - 64)
                if bytes(source.read(offset, 64)) != DATA[offset:offset + 64]:
                    errors.append((k, i))

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        source.close()
        assert errors == [], source


def test_only_a_local_file_source_maps(tmp_path):
    sources = _sources(tmp_path)
    mapped = sources[0].map(10, 100, "r")
    mm, start = mapped
    assert mm[start:start + 100] == DATA[10:110]
    mm.close()
    assert [s.map(0, 10, "r") for s in sources[1:]] == [None, None, None]
    assert [s.can_map for s in sources] == [True, False, False, False]
    for source in sources:
        source.close()


def test_source_for_picks_by_what_is_behind_the_file_object(tmp_path):
    path = tmp_path / "x.cp"
    cpersist.dump(sample(), path)
    with open(path, "rb") as file:
        assert type(source_for(file, "f")) is LocalFileSource
    with gzip.open(tmp_path / "x.gz", "wb") as file:
        file.write(path.read_bytes())
    with gzip.open(tmp_path / "x.gz", "rb") as file:
        assert type(source_for(file, "g")) is FileObjectSource
    assert type(source_for(io.BytesIO(b"abc"), "b")) is FileObjectSource
    assert type(source_for(path.read_bytes(), "m")) is MemorySource
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"abc")
    os.close(write_fd)
    with open(read_fd, "rb") as pipe:
        source = source_for(pipe, "p")
        assert type(source) is SpooledSource and bytes(source.read(0, 3)) == b"abc"
        source.close()


def test_reader_over_a_memory_source(tmp_path):
    buffer = io.BytesIO()
    cpersist.dump(sample(), buffer, compress="zstd")
    reader = ContainerReader(MemorySource(buffer.getvalue(), "mem"))
    assert reader.name == "mem" and reader.size == len(buffer.getvalue())
    big = max(reader.sections, key=lambda s: s.raw_size)
    assert bytes(reader.read_bytes(big)) == sample()["a"].tobytes()


def test_a_truncated_source_names_the_section(tmp_path):
    buffer = io.BytesIO()
    cpersist.dump(sample(), buffer)
    data = buffer.getvalue()
    reader = ContainerReader(MemorySource(data, "mem"))
    big = max(reader.sections, key=lambda s: s.raw_size)
    # The same index over data cut short inside the section.
    reader.source = MemorySource(data[:big.offset + 100], "cut")
    with pytest.raises(CorruptFileError, match=f"mem: truncated in section {big.index}"):
        reader.read_bytes(big)


# -- one decision: plain local file or not ---------------------------------------

@pytest.mark.parametrize("opener", [gzip.open, bz2.open, lzma.open])
def test_compressing_file_objects_as_targets(opener, tmp_path):
    """Their fileno() is the compressed file's: reserving blocks on it would
    pad that file with zeros (a 32 MB .gz, an .xz that cannot be read)."""
    obj = {"z": np.zeros(4_000_000), "s": "small"}
    path = tmp_path / "z.cp.compressed"
    with opener(path, "wb") as file:
        assert local_fd(file) is None
        cpersist.dump(obj, file)
    assert os.path.getsize(path) < 1 << 20
    with opener(path, "rb") as file:
        assert_same(obj, cpersist.load(file))
    if opener is gzip.open:
        with opener(path, "rb") as file, pytest.warns(UserWarning, match="not a plain file"):
            assert_same(obj, cpersist.load(file, mmap_mode="r"))


def test_plain_files_are_used_through_their_descriptor(tmp_path):
    path = tmp_path / "p.cp"
    with open(path, "wb") as file:
        assert local_fd(file) == file.fileno()
    with open(path, "r+b") as file:
        assert local_fd(file) == file.fileno()
    with open(path, "rb", buffering=0) as file:
        assert local_fd(file) == file.fileno()
    read_fd, write_fd = os.pipe()
    with open(read_fd, "rb") as pipe, open(write_fd, "wb") as other:
        assert local_fd(pipe) is None and local_fd(other) is None


# -- one way to open a source ------------------------------------------------------

def _pipe_with(data):
    read_fd, write_fd = os.pipe()

    def feed():
        with open(write_fd, "wb") as out:
            out.write(data)

    thread = threading.Thread(target=feed)
    thread.start()
    return open(read_fd, "rb"), thread


def test_inspect_verify_and_convert_read_non_seekable_streams(tmp_path):
    buffer = io.BytesIO()
    cpersist.dump(sample(), buffer, compress="zstd")
    data = buffer.getvalue()
    pipe, feeder = _pipe_with(data)
    with pipe:
        assert cpersist.inspect(pipe)["arrays"][0]["shape"] == (250, 400)
    feeder.join()
    pipe, feeder = _pipe_with(data)
    with pipe:
        assert cpersist.verify(pipe) == cpersist.verify(io.BytesIO(data))
    feeder.join()
    pipe, feeder = _pipe_with(data)
    with pipe:
        stats = cpersist.convert(pipe, tmp_path / "raw.cp", compress=0)
    feeder.join()
    assert stats["stored_bytes_after"] == stats["raw_bytes"]
    assert_same(sample(), cpersist.load(tmp_path / "raw.cp"))


def test_open_source_names_the_argument_it_cannot_read():
    # What cannot be mapped is said by the load that asks (test_api, test_remote).
    with pytest.raises(TypeError, match="src must be a path or a binary file object"):
        open_source(3, what="src")


# -- errors name the file --------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_device_as_target_names_it():
    with open("/dev/full", "wb") as file:
        with pytest.raises(OSError) as info:
            cpersist.dump({"a": np.ones(1_000_000)}, file)
        assert info.value.errno == 28 and info.value.filename == "/dev/full"
        assert "/dev/full" in str(info.value)
        assert info.value.__cause__ is None and info.value.__suppress_context__
        try:
            file.close()
        except OSError:
            pass  # what the file object still buffers cannot be written either


_FSIZE_CHILD = textwrap.dedent("""
    import json, os, resource, signal, sys
    import numpy as np, cpersist
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    try:
        cpersist.dump({"a": np.ones(1_000_000)}, sys.argv[1])
    except OSError as exc:
        print(json.dumps({"errno": exc.errno, "filename": exc.filename, "text": str(exc),
                          "context": exc.__context__ is not None and not exc.__suppress_context__}))
""")


def test_a_file_size_limit_names_the_target_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "big.cp"
    result = _fresh.run_code(_FSIZE_CHILD, target, timeout=120)
    assert result.returncode == 0, result.stderr
    import json
    error = json.loads(result.stdout)
    assert error["errno"] == 27  # EFBIG
    assert error["filename"] == str(target) and str(target) in error["text"]
    assert error["context"] is False  # no second error chained from closing
    assert os.listdir(tmp_path) == []
    assert not any(n.endswith(TMP_SUFFIX) for n in os.listdir(tmp_path))


# -- the command line: standard input and FIFOs -------------------------------------

@pytest.fixture
def cp_bytes(tmp_path):
    path = tmp_path / "s.cp"
    cpersist.dump(sample(), path, compress="zstd")
    return path.read_bytes()


def test_cli_info_reads_standard_input(cp_bytes):
    result = run_cli("info", "--json", "-", stdin=cp_bytes)
    assert result.returncode == 0, result.stderr
    import json
    report = json.loads(result.stdout)
    assert report["file"] == "-" and [a["path"] for a in report["arrays"]] == \
        ["obj['a']", "obj['f']"][:len(report["arrays"])]


def test_cli_verify_reads_standard_input(cp_bytes):
    result = run_cli("verify", "-", stdin=cp_bytes)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("-: OK (")
    damaged = bytearray(cp_bytes)
    damaged[200] ^= 0xFF
    result = run_cli("verify", "-", stdin=bytes(damaged))
    assert result.returncode == 1
    assert result.stdout.decode().startswith("-: FAILED: ")


def test_cli_convert_reads_standard_input(cp_bytes, tmp_path):
    result = run_cli("convert", "-", tmp_path / "out.cp", "--compress", "raw", stdin=cp_bytes)
    assert result.returncode == 0, result.stderr
    assert_same(sample(), cpersist.load(tmp_path / "out.cp", mmap_mode="r"), mmap=True)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("verb", ["info", "verify"])
def test_cli_reads_a_fifo(verb, cp_bytes, tmp_path):
    fifo = tmp_path / "pipe.cp"
    os.mkfifo(fifo)
    child = _fresh.start_python("-m", "cpersist", verb, fifo, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    with open(fifo, "wb") as out:
        out.write(cp_bytes)
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 0, stderr
    assert str(fifo) in stdout.decode()


def test_cli_errors_without_a_file_name_get_it(tmp_path):
    from cpersist.tools.report import error_line

    assert error_line(OSError(29, "Illegal seek"), "x.cp") == "x.cp: Illegal seek"
    assert error_line(OSError(2, "No such file", "y.cp"), "x.cp") == "y.cp: No such file"
