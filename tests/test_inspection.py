"""inspect(): what a file needs and holds, found without executing anything."""

import collections
import io
import pickle
import sys

import numpy as np
import pytest

import cpersist
from cpersist.container import FORMAT_MAJOR, FORMAT_MINOR

from ._forge import Point, call, proto, s, stack_global, write_container


def test_inspect_lists_arrays_and_globals(tmp_path):
    obj = {"w": np.arange(100_000, dtype="<f8").reshape(1000, 100),
           "f": np.asfortranarray(np.ones((300, 200), dtype=">i4")),
           "p": Point(1, 2), "d": collections.OrderedDict(a=1)}
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path, compress=("zstd", 3))
    info = cpersist.inspect(path)
    assert info["format"] == f"{FORMAT_MAJOR}.{FORMAT_MINOR}"
    assert info["pickle"]["protocol"] == pickle.HIGHEST_PROTOCOL
    assert 0 < info["pickle"]["stored_bytes"] and info["pickle"]["raw_bytes"] > 0
    arrays = {a["shape"]: a for a in info["arrays"]}
    w, f = arrays[(1000, 100)], arrays[(300, 200)]
    assert (w["dtype"], w["order"], w["codec"], w["level"]) == ("<f8", "C", "zstd", 3)
    assert (f["dtype"], f["order"]) == (">i4", "F")
    assert w["raw_bytes"] == 800_000 and 0 < w["stored_bytes"] < w["raw_bytes"]
    assert "tests._forge.Point" in info["globals"]
    assert "collections.OrderedDict" in info["globals"]
    assert info["globals"] == sorted(info["globals"])
    assert "cpersist.pickler.stored_array" not in info["globals"]
    assert info["unresolved_globals"] == 0 and info["extension_codes"] == []


def test_inspect_lists_an_array_held_at_several_places_once_with_its_other_paths(tmp_path):
    from cpersist.stream.paths import MAX_ALSO

    big, small = np.arange(100_000.0), np.arange(5.0)
    path = tmp_path / "tied.cp"
    cpersist.dump({"a": big, "b": big, "s": small, "t": [small] * 20}, path, compress=3)
    info = cpersist.inspect(path)
    [stored], [inline] = info["arrays"], info["inline_arrays"]
    assert (stored["path"], stored["also"]) == ("obj['a']", ["obj['b']"])
    assert inline["path"] == "obj['s']"
    assert inline["also"] == [f"obj['t'][{i}]" for i in range(MAX_ALSO)]  # no more than that
    back = cpersist.load(path)
    assert back["b"] is back["a"] and back["t"][19] is back["s"]  # what the paths describe


@pytest.mark.usefixtures("sections")
def test_inspect_raw_file_and_streams(tmp_path):
    path = tmp_path / "r.cp"
    cpersist.dump([np.arange(10)], path)
    info = cpersist.inspect(path)
    assert info["arrays"][0]["codec"] is None and info["arrays"][0]["level"] is None
    with open(path, "rb") as file:
        assert cpersist.inspect(file) == info
    assert cpersist.inspect(io.BytesIO(path.read_bytes()))["arrays"] == info["arrays"]


def test_inspect_executes_nothing(tmp_path):
    sentinel = tmp_path / "sentinel"
    module = "cpersist_inspect_never_imported"
    stream = proto(4, call(stack_global("os", "system"), s(f"touch {sentinel}"))
                   + pickle.POP + call(stack_global(module, "Evil"))
                   + pickle.POP
                   # STACK_GLOBAL fed through the memo
                   + s("check_call") + pickle.MEMOIZE + pickle.POP
                   + s("subprocess") + pickle.MEMOIZE + pickle.POP
                   + pickle.BINGET + b"\x01" + pickle.BINGET + b"\x00" + pickle.STACK_GLOBAL
                   + pickle.POP
                   + pickle.GLOBAL + b"builtins\neval\n" + pickle.POP
                   + pickle.EXT1 + b"\x07")
    path = write_container(tmp_path / "evil.cp", stream)
    info = cpersist.inspect(path)
    assert info["globals"] == sorted([f"{module}.Evil", "builtins.eval", "os.system",
                                      "subprocess.check_call"])
    assert info["extension_codes"] == [7]
    assert not sentinel.exists() and module not in sys.modules


def test_inspect_protocol0_and_unresolved(tmp_path):
    stream = (pickle.MARK + pickle.INST + b"os\nsystem\n" + pickle.POP
              + proto(4, call(stack_global("builtins", "str"), s("x"))
                      + s("sys") + pickle.STACK_GLOBAL))
    path = write_container(tmp_path / "p.cp", stream)
    info = cpersist.inspect(path)
    assert "os.system" in info["globals"] and "builtins.str" in info["globals"]
    assert info["unresolved_globals"] == 1  # a module name computed at load time


@pytest.mark.parametrize("stream", [b"", b"\x80\x05", b"\xff\xfe", proto(4, b"\x8c\x05ab")])
def test_inspect_damaged_pickle(tmp_path, stream):
    path = write_container(tmp_path / "d.cp", stream)
    with pytest.raises(cpersist.CorruptFileError, match="pickle stream"):
        cpersist.inspect(path)
    with pytest.raises(cpersist.CorruptFileError):
        cpersist.verify(path)


def test_inspect_bad_source():
    with pytest.raises(TypeError):
        cpersist.inspect(42)
