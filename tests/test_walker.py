"""The pickle-opcode walker, the format's global names, and inspect's array paths."""

import io
import os
import pathlib
import pickle
import pickletools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cpersist
from cpersist import _format_names, _rebuild
from cpersist._opcodes import walk
from cpersist._paths import scan_arrays
from cpersist.container import ContainerReader
from cpersist.exceptions import CorruptFileError
from cpersist.inspection import scan_pickle
from cpersist.unpickler import SAFE_GLOBALS, ArrayUnpickler

from .conftest import assert_same, make_matrix

FORMAT_RST = pathlib.Path(__file__).resolve().parent.parent / "docs" / "format.rst"


def _pickle_stream(path):
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        return bytes(reader.read_bytes(reader.sections[reader.root]))


def _documented_globals():
    """The bulleted ``cpersist.*`` names of format.rst's "The pickle stream" section."""
    text = FORMAT_RST.read_text()
    section = text.split("The pickle stream\n-----------------\n", 1)[1]
    section = re.split(r"\n[^\n]+\n-{3,}\n", section, 1)[0]
    return set(re.findall(r"^\* ``(cpersist\.[\w.]+)``$", section, re.M))


def _every_kind_of_array():
    return {
        "big": np.arange(20000.0),
        "small": np.arange(5, dtype=np.int16),
        "matrix": make_matrix(np.ones((100, 100))),
        "masked": np.ma.masked_array(np.arange(10000.0), mask=np.arange(10000) % 3 == 0),
    }


def test_format_rst_lists_exactly_the_format_globals():
    assert _documented_globals() == _format_names.FORMAT_GLOBALS
    assert len(_format_names.FORMAT_GLOBALS) == 4


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_dump_names_exactly_the_format_globals(tmp_path, protocol):
    path = tmp_path / "all.cp"
    obj = _every_kind_of_array()
    cpersist.dump(obj, path, compress=3, protocol=protocol)
    named = {g for g in walk(_pickle_stream(path)).globals if g.startswith("cpersist")}
    assert named == _format_names.FORMAT_GLOBALS
    back = cpersist.load(path, trusted=False)
    for key in obj:
        assert_same(back[key], obj[key])


def test_functions_pickle_under_their_literal_names():
    for (module, name), func in _rebuild.BY_NAME.items():
        # Defined in cpersist._rebuild, written under the format's literal.
        assert func.__code__.co_filename.endswith("_rebuild.py")
        for protocol in (2, 4):
            ops = [(op.name, arg) for op, arg, _ in pickletools.genops(
                pickle.dumps(func, protocol=protocol))]
            if protocol == 2:
                assert ("GLOBAL", f"{module} {name}") in ops
            else:
                assert ("SHORT_BINUNICODE", module) in ops and ("SHORT_BINUNICODE", name) in ops
    assert {".".join(pair) for pair in _rebuild.BY_NAME} == _format_names.FORMAT_GLOBALS


def test_unpickler_resolves_format_names_from_the_table(tmp_path):
    unpickler = ArrayUnpickler(io.BytesIO(b""), load_array=len, restricted=True)
    for literal in _format_names.FORMAT_GLOBALS - {_format_names.STORED_ARRAY}:
        module, name = _format_names.split(literal)
        assert (module, name) in SAFE_GLOBALS
        assert unpickler.find_class(module, name) is _rebuild.BY_NAME[module, name]
    assert unpickler.find_class(*_format_names.split(_format_names.STORED_ARRAY)) is len


def test_plain_pickle_names_the_loader():
    stream = pickle.dumps(_rebuild.stored_array, protocol=2)[:-1] + b"K\x00\x85R."
    with pytest.raises(pickle.UnpicklingError, match="cpersist.load"):
        pickle.loads(stream)


class Model:
    def __init__(self):
        self.coef_ = np.linspace(0, 1, 30000)
        self.bias_ = np.float64(0.5)
        self.classes_ = np.arange(3)


@pytest.mark.parametrize("compress", [0, 3])
def test_inspect_gives_every_array_its_path(tmp_path, compress):
    obj = {"w": np.ones(20000), "layers": [{"b": np.zeros(4)}, {"b": np.full(20000, 2.0)}],
           "model": Model(), "t": (np.arange(3.0),)}
    path = tmp_path / "paths.cp"
    cpersist.dump(obj, path, compress=compress)
    info = cpersist.inspect(path)
    stored = {a["path"]: a for a in info["arrays"]}
    inline = {a["path"]: a for a in info["inline_arrays"]}
    expected_big = {"obj['w']", "obj['layers'][1]['b']", "obj['model'].coef_"}
    expected_small = {"obj['layers'][0]['b']", "obj['model'].classes_", "obj['t'][0]"}
    if compress:
        assert set(stored) == expected_big
        assert set(inline) == expected_small
        assert inline["obj['layers'][0]['b']"] == {
            "path": "obj['layers'][0]['b']", "dtype": "<f8", "shape": [4], "order": "C",
            "raw_bytes": 32}
        assert inline["obj['model'].classes_"]["dtype"] == np.arange(3).dtype.str
    else:
        assert set(stored) == expected_big | expected_small
        assert info["inline_arrays"] == []
    assert stored["obj['model'].coef_"]["shape"] == (30000,)
    # The same answer as the path scanner of the decoded stream.
    scan = scan_arrays(_pickle_stream(path))
    assert {a["section"]: a["path"] for a in info["arrays"]} == scan["paths"]
    assert info["inline_arrays"] == scan["inline"]


def test_walk_gives_globals_and_paths_in_one_pass(tmp_path):
    path = tmp_path / "m.cp"
    cpersist.dump({"m": Model()}, path)
    stream = _pickle_stream(path)
    walked = walk(stream)
    assert f"{Model.__module__}.Model" in walked.globals
    assert _format_names.STORED_ARRAY in walked.globals
    assert walked.error is None and walked.protocol == 5
    scan = scan_pickle(stream)
    assert scan["globals"] == sorted(walked.globals - {_format_names.STORED_ARRAY})
    assert sorted(scan_arrays(stream)["paths"].values()) == [
        "obj['m'].classes_", "obj['m'].coef_"]


def test_long_string_keys_are_not_shown(tmp_path):
    path = tmp_path / "k.cp"
    cpersist.dump({"k" * 300: np.ones(10000), "short": np.ones(10000)}, path)
    paths = sorted(scan_arrays(_pickle_stream(path))["paths"].values())
    assert paths == ["obj['short']", "obj[?]"]


def test_stack_global_strings_followed_through_dup():
    # DUP copies the module name's string; POP drops the copy.
    stream = b"\x80\x04\x8c\x02os20\x8c\x06getcwd\x93."
    assert [op.name for op, _, _ in pickletools.genops(stream)] == [
        "PROTO", "SHORT_BINUNICODE", "DUP", "POP", "SHORT_BINUNICODE", "STACK_GLOBAL", "STOP"]
    assert pickle.loads(stream) is os.getcwd  # what the unpickler resolves
    scan = scan_pickle(stream)
    assert scan["globals"] == ["os.getcwd"] and scan["unresolved_globals"] == 0


def test_build_on_a_literal_changes_nothing_shared():
    # BUILD whose object is a literal, twice: nothing survives between walks.
    stream = b"\x80\x04K\x01}\x94b."
    for _ in range(2):
        walked = walk(stream)
        assert walked.error is None and walked.top == 1


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_walk_never_raises(data):
    walked = walk(b"\x80\x04" + data)
    assert isinstance(scan_arrays(b"\x80\x04" + data), dict)
    if walked.error is None:
        assert isinstance(scan_pickle(b"\x80\x04" + data)["globals"], list)
    else:
        with pytest.raises(CorruptFileError, match="damaged pickle stream"):
            scan_pickle(b"\x80\x04" + data)


def test_walk_never_raises_on_damaged_real_streams(tmp_path):
    path = tmp_path / "d.cp"
    cpersist.dump(_every_kind_of_array() | {"m": Model(), "l": [1, "x", None]}, path, compress=3)
    stream = _pickle_stream(path)
    rng = np.random.default_rng(0)
    for _ in range(300):
        damaged = bytearray(stream)
        for pos in rng.integers(0, len(damaged), size=3):
            damaged[pos] = int(rng.integers(0, 256))
        walked = walk(damaged)
        assert walked.error is not None or walked.top is not None
        scan_arrays(damaged)
