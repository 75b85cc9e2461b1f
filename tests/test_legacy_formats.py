"""Format 1.x, written only by development versions before 0.1.0, is refused
with an error that says so, by every reader, before anything is unpickled."""

import os
import shutil

import pytest

import cpersist

from ._forge import set_version

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "format-2.0", "raw.cp")


@pytest.mark.parametrize("minor", [0, 1])
def test_format_1_is_refused_naming_it(tmp_path, minor):
    path = tmp_path / "old.cp"
    with open(FIXTURE, "rb") as file:
        path.write_bytes(set_version(file.read(), 1, minor))
    readers = (cpersist.load, cpersist.inspect, cpersist.verify, cpersist.open,
               lambda p: cpersist.load(p, trusted=False),
               lambda p: cpersist.loads(p.read_bytes()))
    for read in readers:
        with pytest.raises(cpersist.UnsupportedVersionError) as info:
            read(path)
        message = str(info.value)
        assert str(path) in message or "bytes" in message
        assert f"format 1.{minor}" in message and "development versions" in message
        assert "reads format 2.0 and later" in message


def test_format_2_0_still_loads(tmp_path):
    # the header patch above is the only difference from a file that loads
    path = tmp_path / "new.cp"
    shutil.copyfile(FIXTURE, path)
    with open(FIXTURE, "rb") as file:
        assert set_version(file.read(), 2, 0) == path.read_bytes()
    assert cpersist.load(path)
