"""The pickle-opcode walker, the format's global names, and inspect's array paths."""

import io
import os
import pathlib
import pickle
import pickletools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import cpersist
from cpersist.format import names as _format_names
from cpersist.pickling import rebuild as _rebuild
from cpersist.stream import symbolic as _symbolic
from cpersist.stream.opcodes import walk
from cpersist.stream.paths import array_paths, scan_arrays
from cpersist.container import ContainerReader
from cpersist.exceptions import CorruptFileError
from cpersist.tools.inspection import scan_pickle
from cpersist.pickling.unpickler import SAFE_GLOBALS, ArrayUnpickler

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
    assert len(_format_names.FORMAT_GLOBALS) == 6


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_dump_names_exactly_the_format_globals(tmp_path, protocol):
    path = tmp_path / "all.cp"
    obj = _every_kind_of_array()
    cpersist.dump(obj, path, compress=3, protocol=protocol)
    named = {g for g in walk(_pickle_stream(path)).globals if g.startswith("cpersist")}
    # rebuild_tensor and rebuild_jax are named by files holding torch tensors
    # (test_tensors) and JAX arrays (test_jax).
    assert named == _format_names.FORMAT_GLOBALS - {_format_names.REBUILD_TENSOR,
                                                    _format_names.REBUILD_JAX}
    back = cpersist.load(path, trusted=False)
    for key in obj:
        assert_same(back[key], obj[key])


def test_functions_pickle_under_their_literal_names():
    for (module, name), func in _rebuild.BY_NAME.items():
        # Defined in cpersist.pickling.rebuild, written under the format's literal.
        assert func.__code__.co_filename.endswith(os.path.join("pickling", "rebuild.py"))
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
@pytest.mark.usefixtures("sections")
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


@pytest.mark.usefixtures("sections")
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


@settings(max_examples=300)
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


# -- the walker's decoding against its reference, its paths against the object --

def _reference_walk(data):
    """The walk with every argument read by
    :data:`cpersist.stream.args.READERS`, the reference reader (the C
    unpickler's reading of each opcode): none read by the loop's quick reads."""
    return walk(data, quick_reads=False)


def _tree(value, seen):
    """A walk's value as nested lists: equal for equal trees, sharing included."""
    if type(value) is _symbolic.Node:
        if id(value) in seen:
            return ["seen", seen[id(value)]]
        seen[id(value)] = len(seen)
        return [value.kind, _tree(value.value, seen),
                [[label, _tree(child, seen)] for label, child in value.children],
                value.count, _tree(value.items, seen), _tree(value.state, seen)]
    if type(value) in (tuple, list):
        return [type(value).__name__, [_tree(v, seen) for v in value]]
    if value is _symbolic._MARK or value is _symbolic._OPAQUE:
        return ["marker", value is _symbolic._MARK]
    return ["literal", type(value).__name__, repr(value)]


def _same_walk(data):
    got, expected = walk(data), _reference_walk(data)
    assert (got.protocol, got.globals, got.unresolved, got.extension_codes, got.error) == (
        expected.protocol, expected.globals, expected.unresolved, expected.extension_codes,
        expected.error)
    assert _tree(got.top, {}) == _tree(expected.top, {})


class Holder:
    """A plain object whose attributes hold parts of the tree."""


def _holder(attrs):
    obj = Holder()
    obj.__dict__.update(attrs)
    return obj


_ARRAYS = st.builds(lambda n, seed, dtype: np.random.default_rng(seed).random(n).astype(dtype),
                    st.integers(1, 6), st.integers(0, 2**16),
                    st.sampled_from(["<f8", "<f4", ">i4", "u1"]))
_LEAVES = _ARRAYS | st.integers(-2**40, 2**40) | st.text(max_size=5) | st.none() | st.floats(
    allow_nan=False) | st.binary(max_size=5)
_KEYS = st.text(max_size=6) | st.integers(-300, 70000)
_ATTRS = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)
_TREES = st.recursive(_LEAVES, lambda children: (
    st.lists(children, max_size=4)
    | st.tuples(children) | st.tuples(children, children, children)
    | st.lists(children, min_size=4, max_size=5).map(tuple)
    | st.dictionaries(_KEYS, children, max_size=4)
    | st.dictionaries(_ATTRS, children, max_size=3).map(_holder)
), max_leaves=14)


def _expected_paths(obj):
    """``{id(array): path}``: breadth-first over the object itself, each array
    at the first shortest path reaching it, labelled as ``cpersist info`` does."""
    paths, seen, queue = {}, set(), [(obj, "obj")]
    for node, path in queue:
        if isinstance(node, np.ndarray):
            paths.setdefault(id(node), (path, node))
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            queue += [(v, f"{path}[{k!r}]") for k, v in node.items()]
        elif isinstance(node, (list, tuple)):
            queue += [(v, f"{path}[{i}]") for i, v in enumerate(node)]
        elif isinstance(node, Holder):
            queue += [(v, f"{path}.{k}") for k, v in vars(node).items()]
    return dict(paths.values())


def _first_array(obj):
    for path, arr in _expected_paths(obj).items():
        return arr
    return np.zeros(2)


@pytest.mark.usefixtures("sections")  # the same setting for every example
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=_TREES, protocol=st.sampled_from([2, 3, 4, 5]))
def test_listing_and_walk_agree_with_the_object_and_pickletools(tmp_path_factory, tree,
                                                                protocol):
    # The same array twice (memo reuse) under two names: listed once, at its
    # first shortest path.
    again = _first_array(tree)
    obj = {"tree": tree, "again": [again, (again,)], "tail": Holder()}
    obj["tail"].same = again
    path = tmp_path_factory.mktemp("w") / "t.cp"
    cpersist.dump(obj, path, protocol=protocol)
    expected = _expected_paths(obj)
    with cpersist.open(path) as f:
        listed = f.arrays
        assert list(listed) == [p for p in sorted(expected, key=lambda p: listed[p]._index)]
        assert sorted(listed) == sorted(expected)
        for p, lazy in listed.items():
            assert_same(expected[p], lazy[...])
    stream = _pickle_stream(path)
    _same_walk(stream)
    # A plain pickle of the tree, every protocol: the walk decodes it as
    # pickletools does.
    for plain_protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        _same_walk(pickle.dumps(tree, protocol=plain_protocol))


def _holds_instances(obj, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, Holder):
        return True
    if isinstance(obj, dict):
        return any(_holds_instances(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_holds_instances(v, seen) for v in obj)
    return False


def _recorded(path):
    from cpersist.filehandle import _recorded_paths

    with open(path, "rb") as file:
        return _recorded_paths(ContainerReader(file, str(path)))


@pytest.mark.usefixtures("sections")  # the same setting for every example
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=_TREES, protocol=st.sampled_from([2, 3, 4, 5]))
def test_paths_recorded_at_dump_are_the_walk_s(tmp_path_factory, tree, protocol):
    """The paths a dump records in the index (found on the object) are those
    the walk finds in the stream; objects holding instances record none."""
    again = _first_array(tree)
    obj = {"tree": tree, "again": [again, (again,)], "shared": [tree, tree]}
    path = tmp_path_factory.mktemp("r") / "t.cp"
    cpersist.dump(obj, path, protocol=protocol)
    recorded = _recorded(path)
    if _holds_instances(tree):
        assert recorded is None
        return
    assert recorded == array_paths(_pickle_stream(path))
    assert sorted(recorded.values()) == sorted(_expected_paths(obj))


@pytest.mark.usefixtures("sections")
def test_paths_recorded_for_arrays_in_plain_containers(tmp_path):
    one = {"w": np.arange(3.0)}
    cpersist.dump(one, tmp_path / "one.cp")
    assert _recorded(tmp_path / "one.cp") == {0: "obj['w']"}
    cpersist.dump(np.arange(4), tmp_path / "bare.cp")
    assert _recorded(tmp_path / "bare.cp") == {0: "obj"}
    many = {f"k{i}": np.arange(3.0) + i for i in range(64)}
    cpersist.dump(many, tmp_path / "many.cp")
    assert _recorded(tmp_path / "many.cp") == {i: f"obj[{k!r}]" for i, k in enumerate(many)}
    # Compressed: small arrays are in the stream, not sections: nothing to record.
    cpersist.dump(many, tmp_path / "many-z.cp", compress=3)
    assert _recorded(tmp_path / "many-z.cp") is None
    big = {f"k{i}": np.arange(20000.0) + i for i in range(70)}
    cpersist.dump(big, tmp_path / "big-z.cp", compress=3, chunk_size=1 << 16)
    assert len(_recorded(tmp_path / "big-z.cp")) == 70
    # What the pass does not model records nothing: the stream is walked.
    for other in ({**many, "m": make_matrix(np.ones((2, 2)))}, [many, {1, 2}],
                  {**many, "h": Holder()}, {**many, b"bytes": 1},
                  {**many, "f": np.asfortranarray(np.ones((300, 300)))},
                  Holder(), [one, {1, 2}]):
        cpersist.dump(other, tmp_path / "other.cp")
        recorded = _recorded(tmp_path / "other.cp")
        assert recorded is None or recorded == array_paths(_pickle_stream(tmp_path / "other.cp"))
    cpersist.dump({**many, "f": np.asfortranarray(np.ones((3, 3)))}, tmp_path / "f.cp",
                  compress="max")
    assert _recorded(tmp_path / "f.cp") is None


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.usefixtures("sections")
def test_paths_recorded_under_every_kind_of_key_are_the_walk_s(tmp_path, protocol):
    """Keys the walk labels as literals, or ``[?]`` (None, a long string),
    with arrays and literals under them, as do the paths recorded."""
    w = np.arange(3.0)
    obj = {None: [w, 1], True: {"x": np.ones(2)}, 2.5: (np.zeros(2), "s"), -3: [[np.ones(3)]],
           "é\n'\"": {0: np.arange(4)}, "k" * 200: np.arange(5), "k" * 201: np.arange(6),
           "leaves": {None: 1, True: 2, 0.5: b"x", -1: None, "k" * 300: "v"}, "again": (w,)}
    cpersist.dump(obj, tmp_path / "k.cp", protocol=protocol)
    recorded = _recorded(tmp_path / "k.cp")
    assert recorded is not None and len(recorded) == 7
    assert recorded == array_paths(_pickle_stream(tmp_path / "k.cp"))
    assert recorded[0] == "obj[?][0]" and recorded[6] == "obj[?]"


@pytest.mark.usefixtures("sections")
def test_paths_pass_gives_up_on_objects_beyond_its_budget(tmp_path):
    """The pass counts the children of containers, literals too, against a
    budget per array section: beyond it, nothing is recorded and listing
    walks the stream; within it, the paths recorded are the walk's; a path
    longer than the walk spells out records nothing either."""
    from cpersist.pickling.object_paths import CHILDREN_BASE, CHILDREN_PER_SECTION

    budget = CHILDREN_PER_SECTION * 2 + CHILDREN_BASE
    arrays = {"a": np.arange(3.0), "b": np.arange(4.0)}
    for n_literals, within in [(budget - 4, True), (budget - 3, False)]:
        # Children: the root's 2, "config"'s n_literals + 1 and "more"'s 1.
        literals = {f"k{i}": i for i in range(n_literals)} | {"more": [arrays["b"]]}
        obj = {"a": arrays["a"], "config": literals}
        cpersist.dump(obj, tmp_path / "c.cp")
        recorded = _recorded(tmp_path / "c.cp")
        walked = array_paths(_pickle_stream(tmp_path / "c.cp"))
        assert walked == {0: "obj['a']", 1: "obj['config']['more'][0]"}
        assert recorded == (walked if within else None)
        with cpersist.open(tmp_path / "c.cp") as f:
            assert list(f.arrays) == list(walked.values())
    # A list of literals alone beyond the budget.
    cpersist.dump([np.arange(3.0)] + [0.5] * budget, tmp_path / "l.cp")
    assert _recorded(tmp_path / "l.cp") is None
    cpersist.dump([np.arange(3.0)] + [0.5] * (budget - 65), tmp_path / "l.cp")
    assert _recorded(tmp_path / "l.cp") == {0: "obj[0]"}
    # Paths of 4,096 characters and one more (the walk's "?").
    for length, kept in [(4096, True), (4097, False)]:
        key = "k" * 190
        depth, rest = divmod(length - len("obj"), len(repr(key)) + 2)
        obj = node = {}
        for _ in range(depth):
            node[key] = node = {}
        node["k" * (rest - 4)] = np.arange(3.0)
        cpersist.dump(obj, tmp_path / "d.cp")
        walked = array_paths(_pickle_stream(tmp_path / "d.cp"))
        assert (len(walked[0]) == length) if kept else (walked == {0: "?"})
        assert _recorded(tmp_path / "d.cp") == (walked if kept else None)


@pytest.mark.parametrize("edit", ["duplicate", "not a string", "missing", "too long"])
@pytest.mark.usefixtures("sections")
def test_forged_recorded_paths_fall_back_to_the_walk(tmp_path, edit):
    from ._forge import forge

    obj = {f"k{i}": np.arange(3.0) + i for i in range(70)}
    cpersist.dump(obj, tmp_path / "m.cp")

    def change(index):
        metas = [s["meta"] for s in index["sections"] if s["meta"].get("kind") == "array"]
        if edit == "duplicate":
            metas[1]["path"] = metas[0]["path"]
        elif edit == "not a string":
            metas[5]["path"] = 5
        elif edit == "missing":
            del metas[-1]["path"]
        else:
            metas[2]["path"] = "x" * 5000

    (tmp_path / "f.cp").write_bytes(forge((tmp_path / "m.cp").read_bytes(), change))
    assert _recorded(tmp_path / "f.cp") is None
    with cpersist.open(tmp_path / "f.cp") as f:
        assert list(f.arrays) == [f"obj[{k!r}]" for k in obj]


@settings(max_examples=300)
@given(st.binary(max_size=300))
@example(b"\x8c\x02\x00\x80")  # bad UTF-8 in a string the quick path decodes itself
def test_walk_decodes_any_bytes_as_its_reference(data):
    _same_walk(data)
    _same_walk(b"\x80\x05\x95" + data)


def test_walk_decodes_damaged_streams_as_its_reference(tmp_path):
    path = tmp_path / "d.cp"
    cpersist.dump(_every_kind_of_array() | {"m": Model(), "l": [1, "x", None, 2**70, 1.5],
                                            "k": {"\udcff": 1, "long": "y" * 300}},
                  path, compress=3)
    stream = _pickle_stream(path)
    _same_walk(stream)
    rng = np.random.default_rng(1)
    for _ in range(400):
        damaged = bytearray(stream[:int(rng.integers(1, len(stream) + 1))])
        for pos in rng.integers(0, len(damaged), size=2):
            damaged[pos] = int(rng.integers(0, 256))
        _same_walk(damaged)


def test_a_state_copied_by_many_builds_is_counted_as_it_is_copied():
    # BUILD copies a dict state's entries into its object: the state itself
    # as the state must end, and a memoized state of many entries named by
    # BUILD after BUILD, a few opcodes each, must meet max_objects at once.
    itself = (b"\x80\x02}" + pickle.SHORT_BINUNICODE + b"\x01a]s" + pickle.DUP
              + pickle.BUILD + b".")
    assert walk(itself).error is None
    state = b"}q\x00(" + b"".join(pickle.SHORT_BINUNICODE + bytes([len(k)]) + k.encode() + b"]"
                                  for k in (f"k{i}" for i in range(1000))) + b"u"
    builds = (b"}h\x00b" * 3000)  # a new dict, the memoized state, BUILD
    flood = b"\x80\x02" + state + b"0" + builds + b"."
    with pytest.raises(cpersist.LimitExceededError, match="max_objects"):
        walk(flood, cpersist.Limits(max_objects=100_000))
