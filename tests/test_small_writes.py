"""How raw sections are written: one of a few MiB is checksummed by the
thread that writes it (handing the checksums to a pool thread and waiting
for it would take longer); a large one's chunks are gathered into large
writes, the file's bytes those of one write per chunk."""

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cpersist
from cpersist._runtime.parallel import COPY_ALONE_BELOW
from cpersist.container import raw_runs as writer


def test_small_raw_sections_are_checksummed_by_the_writing_thread(tmp_path, monkeypatch):
    real_get_pool = writer.get_pool
    pools = []

    def recording_get_pool(n_threads):
        pools.append(n_threads)
        return real_get_pool(n_threads)

    monkeypatch.setattr(writer, "get_pool", recording_get_pool)
    small = np.arange(COPY_ALONE_BELOW // 8 - 1, dtype=np.float64)
    large = np.arange(2 * COPY_ALONE_BELOW // 8, dtype=np.float64)
    path = tmp_path / "a.cp"
    cpersist.dump({"a": small, "b": small[::-1].copy()}, path, n_threads=2)
    assert pools == []
    back = cpersist.load(path)  # checksums verified
    assert back["a"].tobytes() == small.tobytes() and back["b"].tobytes() == small[::-1].tobytes()
    cpersist.dump(large, path, n_threads=2, chunk_size=COPY_ALONE_BELOW // 4)
    assert pools == [2]
    assert cpersist.load(path).tobytes() == large.tobytes()
    assert cpersist.verify(path)["chunks"] == 9  # the array's 8, the pickle stream


def test_gathered_raw_writes_give_the_bytes_of_one_write_per_chunk(tmp_path, monkeypatch):
    """Chunks gathered into writes of RAW_WRITE_SIZE (a whole number of
    chunks, then the rest) and the sections and index after them: the same
    bytes as one write per chunk, and through a file object (no descriptor
    written to) too."""
    big = np.random.default_rng(0).random(5 * COPY_ALONE_BELOW // 8 + 3)
    obj = {"big": big, "small": np.arange(7), "again": big[::-1].copy(), "s": "x"}
    files = []
    for size in (0, 2 * COPY_ALONE_BELOW, writer.RAW_WRITE_SIZE):
        monkeypatch.setattr(writer, "RAW_WRITE_SIZE", size)
        path = tmp_path / f"{size}.cp"
        cpersist.dump(obj, path, n_threads=2, chunk_size=COPY_ALONE_BELOW)
        files.append(path.read_bytes())
    with open(tmp_path / "object.cp", "wb") as file:
        file.write(b"head")
        cpersist.dump(obj, file, n_threads=2, chunk_size=COPY_ALONE_BELOW)
    assert files[0] == files[1] == files[2] == (tmp_path / "object.cp").read_bytes()[4:]
    back = cpersist.load(tmp_path / "0.cp")
    assert back["big"].tobytes() == big.tobytes() and back["again"].tobytes() == obj["again"].tobytes()


_TOO_LARGE = textwrap.dedent("""
    import resource, signal, sys, numpy as np, cpersist
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
    try:
        cpersist.dump(np.ones(int(sys.argv[3]) // 8), sys.argv[1], n_threads=2)
    except OSError as exc:
        print(exc.errno, exc.filename == sys.argv[1])
""")


@pytest.mark.skipif(not hasattr(os, "writev") or sys.platform == "win32",
                    reason="file size limits are POSIX's")
def test_a_large_raw_dump_past_the_file_size_limit_leaves_the_old_file(tmp_path):
    """A large raw dump past the file size limit (EFBIG: its blocks cannot
    be reserved, and a write fails midway) raises an OSError naming the
    path; the old file is left as it was and no temporary file."""
    path = tmp_path / "a.cp"
    cpersist.dump({"old": np.arange(10)}, path)
    old = path.read_bytes()
    limit = writer.RAW_WRITE_SIZE + COPY_ALONE_BELOW + 12345
    out = subprocess.run([sys.executable, "-c", _TOO_LARGE, str(path), str(limit),
                          str(3 * writer.RAW_WRITE_SIZE)],
                         capture_output=True, text=True, cwd=os.getcwd(), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(errno.EFBIG), "True"]
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == ["a.cp"]
