"""A raw section of a few MiB is checksummed by the thread that writes it:
handing the checksums to a pool thread and waiting for it would take longer."""

import numpy as np

import cpersist
from cpersist._runtime.parallel import COPY_ALONE_BELOW
from cpersist.container import writer


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
