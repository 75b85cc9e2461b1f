"""What a change to a growing file's array becomes: the rows, replacement or
assigned value checked against the array as the last commit describes it,
the stored bytes an index selects, and the chunk table of the index entry
with new chunks spliced in or added (the placed layout of format 2.4)."""

import json

import numpy as np

from ..container.layout import RECORD_SIZE, extended_text, verbatim

#: A chunk of the placed layout in an index entry's chunk table.
PLACED_ROW = "[%d,%d,%d,%d,%d]"


def stored_layout(writer, number):
    """``(dtype, shape, order, nbytes)`` of section ``number`` as the last
    commit describes it."""
    from ..pickling.arrays import parse_description

    layout = writer._layouts.get(number)
    if layout is None:
        layout = writer._layouts[number] = parse_description(writer._sections[number]["meta"])
    return layout


def checked_rows(name, path, rows, dtype, shape, order):
    """``rows`` as an array to append to the array ``shape`` of ``dtype``
    stored in ``order``: the same dtype (or one of the same kind, converted),
    the same shape but along the growing axis, contiguous in that order."""
    rows = np.asarray(rows)
    if rows.dtype != dtype:
        if rows.dtype == object or not np.can_cast(rows.dtype, dtype, "same_kind"):
            raise TypeError(f"{name}: cannot append {rows.dtype} rows to {path}, an array "
                            f"of {dtype} (only one of the same kind, such as float64 to "
                            f"float32, is converted)")
        rows = rows.astype(dtype)
    if not shape:
        raise ValueError(f"{name}: {path} is a 0-d array, which has no rows to append to")
    if order == "F":
        ok = rows.ndim == len(shape) and rows.shape[:-1] == tuple(shape[:-1])
        rows = np.asfortranarray(rows)
        axis = f"its last axis (it is stored in F order): ({', '.join(map(str, shape[:-1]))}, n)"
    else:
        ok = rows.ndim == len(shape) and rows.shape[1:] == tuple(shape[1:])
        rows = np.ascontiguousarray(rows)
        axis = f"its first axis: (n, {', '.join(map(str, shape[1:]))})" if len(shape) > 1 \
            else "its first axis: (n,)"
    if not ok:
        raise ValueError(f"{name}: cannot append rows of shape {rows.shape} to {path} of shape "
                         f"{tuple(shape)}; rows are appended along {axis}")
    return rows


def checked_replacement(name, path, array):
    """``array`` as it can be stored in place of the array at ``path``."""
    if not isinstance(array, np.ndarray) or type(array) is not np.ndarray:
        array = np.asarray(array) if not isinstance(array, np.ndarray) else array
        if type(array) is not np.ndarray:
            raise TypeError(f"{name}: {path} can be replaced by a plain numpy array only, "
                            f"not {type(array).__name__}")
    if array.dtype.hasobject:
        raise TypeError(f"{name}: {path} cannot be replaced by an array of Python objects, "
                        f"which is pickled, not stored as a section")
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        array = np.ascontiguousarray(array)
    return array


def is_basic_index(part):
    return (part is None or part is Ellipsis or isinstance(part, slice)
            or (isinstance(part, (int, np.integer)) and not isinstance(part, (bool, np.bool_))))


def selected_part(name, path, dtype, shape, order, index):
    """Where ``array[index]`` lies in the array's stored bytes: ``(offset of
    its first element, its shape, its strides, lo, hi)``, ``lo:hi`` the
    bytes from its lowest element to the end of its highest (equal when it
    selects nothing)."""
    parts = index if isinstance(index, tuple) else (index,)
    if not all(is_basic_index(part) for part in parts):
        raise TypeError(f"{name}: cannot assign to {path}[{index!r}]: only basic indices "
                        f"(integers, slices, ..., None) are assigned to; read, change and "
                        f"replace the array for others")
    if Ellipsis not in parts:
        parts = parts + (Ellipsis,)  # a view, even for one element
    itemsize = dtype.itemsize
    strides, step = [0] * len(shape), itemsize
    for axis in (range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape))):
        strides[axis] = step
        step *= shape[axis]
    # The array's geometry without its bytes: indexing computes the view
    # and touches no memory.
    whole = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=tuple(shape),
                                            strides=tuple(strides))
    try:
        view = whole[parts]
    except IndexError as exc:
        raise IndexError(f"{name}: cannot assign to {path}[{index!r}] of shape "
                         f"{tuple(shape)}: {exc}") from None
    offset = view.__array_interface__["data"][0] - whole.__array_interface__["data"][0]
    if view.size == 0:
        return offset, view.shape, view.strides, 0, 0
    lo = offset + sum((n - 1) * s for n, s in zip(view.shape, view.strides) if s < 0)
    hi = offset + sum((n - 1) * s for n, s in zip(view.shape, view.strides) if s > 0) + itemsize
    return offset, view.shape, view.strides, lo, hi


def checked_value(name, path, value, dtype, shape):
    """``value`` checked as numpy would assign it to a part of ``shape`` of
    an array of ``dtype``, converting only within a kind."""
    probe = np.empty(0, dtype)
    if not isinstance(value, (bool, int, float, complex)):
        value = np.asarray(value)
        if value.dtype.hasobject:
            raise TypeError(f"{name}: cannot assign Python objects to {path}, an array of "
                            f"{dtype}")
        try:
            np.copyto(probe, value.ravel()[:0], casting="same_kind")
        except TypeError:
            raise TypeError(f"{name}: cannot assign {value.dtype} values to {path}, an array "
                            f"of {dtype} (only values of the same kind, such as float64 to "
                            f"float32, are converted)") from None
    else:
        try:
            np.copyto(np.empty(1, dtype), value, casting="same_kind")
        except (TypeError, OverflowError) as exc:
            raise TypeError(f"{name}: cannot assign {value!r} to {path}, an array of {dtype}: "
                            f"{exc}") from None
    try:
        if np.broadcast_shapes(np.shape(value), shape) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"{name}: cannot assign a value of shape {np.shape(value)} to a part "
                         f"of {path} of shape {shape}") from None
    return value


def as_rows(data, shape, order):
    """The elements ``data`` (1-d, stored order) as whole rows of the
    array's slowest axis, where they are: chunked by whole rows, as every
    other chunk of the array is."""
    if len(shape) < 2:
        return data
    other = int(np.prod(shape[1:] if order == "C" else shape[:-1]))
    if other == 0 or data.size % other:
        return data
    if order == "C":
        return data.reshape((-1,) + tuple(shape[1:]))
    return data.reshape(tuple(shape[:-1]) + (-1,), order="F")


def spliced_entry(old, rows, first, last, added):
    """The index entry of the section ``old`` (its chunks ``rows``, placed)
    with its chunks ``first`` to ``last`` replaced by the chunks of the
    section ``added``: the placed layout, each chunk at its own offset."""
    new_rows = placed_rows(added)
    table = rows[:first] + new_rows + rows[last + 1:]
    meta = dict(old["meta"])
    meta.pop("rows_per_chunk", None)  # chunks of another size may be spliced in
    spliced = {
        "offset": table[0][4],
        "raw_size": old["raw_size"],
        "stored_size": sum(row[0] for row in table),
        "codec": old["codec"],
        "typesize": old["typesize"],
        "chunks": "[" + ",".join(PLACED_ROW % tuple(row) for row in table) + "]",
        "meta": meta,
        "layout": "placed",
    }
    if "pieces" in old or "pieces" in added:
        fields = pieces_fields(old, len(rows))
        fields = fields[:first] + pieces_fields(added, len(new_rows)) + fields[last + 1:]
        spliced["piece_size"] = old.get("piece_size") or added["piece_size"]
        spliced["pieces"] = ",".join(fields)
    return spliced


def placed_rows(entry):
    """The chunk table of the section ``entry`` (an index's dict) with each
    chunk's offset: ``[stored, raw, checksum, flag, offset]`` lists."""
    table = json.loads(entry["chunks"])
    layout = entry.get("layout", "run")
    if layout == "placed":
        return table
    gap = RECORD_SIZE if layout == "records" else 0
    position = entry["offset"]
    rows = []
    for length, raw_length, digest, flag in table:
        rows.append([length, raw_length, digest, flag, position])
        position += length + gap
    return rows


def pieces_fields(entry, n):
    text = entry.get("pieces")
    return [""] * n if text is None else text.split(",")


def pieces_text(entry, n):
    """The ``pieces`` text of the section ``entry`` of ``n`` chunks: its
    own, or the empty fields of chunks without piece checksums."""
    text = entry.get("pieces")
    return "," * (n - 1) if text is None else text


def verbatim_entry(entry):
    """The index entry ``entry`` with its chunk table and piece checksums
    as :class:`~cpersist.container.layout.VerbatimText` where they are
    (checked once; the entries of later commits extend them as they are)."""
    if all(type(entry.get(key)) is not str for key in ("chunks", "pieces")):
        return entry
    entry = dict(entry)
    for key in ("chunks", "pieces"):
        if key in entry:
            entry[key] = verbatim(entry[key])
    return entry


def joined_entry(old, added):
    """The index entry of the section ``old`` followed by the chunks of the
    section ``added`` (written after it, elsewhere in the file): the placed
    layout, each chunk at its own offset."""
    old_n = len(json.loads(old["chunks"])) if old.get("layout") != "placed" else None
    added_rows = placed_rows(added)
    added_text = ",".join(PLACED_ROW % tuple(row) for row in added_rows)
    if old.get("layout") == "placed":
        # Its text extended, not parsed and written again: an append costs
        # the same however many chunks the array has.
        text = old["chunks"]
        old_n = None if text.find("[", 1) >= 0 else 0  # some chunks, not counted
        chunks = extended_text(text, ("," if old_n is None else "") + added_text + "]", cut=1)
    else:
        old_rows = placed_rows(old)
        chunks = "[" + ",".join(PLACED_ROW % tuple(row) for row in old_rows + added_rows) + "]"
    if old_n == 0:
        merged = dict(added)
        merged["layout"] = "placed"
        merged["chunks"] = "[" + added_text + "]"
        return merged
    merged = {
        "offset": old["offset"],
        "raw_size": old["raw_size"] + added["raw_size"],
        "stored_size": old["stored_size"] + added["stored_size"],
        "codec": old["codec"],
        "typesize": old["typesize"],
        "chunks": chunks,
        "meta": old["meta"],
        "layout": "placed",
    }
    if "pieces" in old or "pieces" in added:
        # The fields of the old chunks, then of the added ones: the old text
        # extended, as the chunk table's.
        merged["piece_size"] = old.get("piece_size") or added["piece_size"]
        text = old.get("pieces")
        if text is None:
            text = pieces_text(old, old["chunks"].count("[") - 1 if old_n is None else old_n)
        merged["pieces"] = extended_text(text, "," + pieces_text(added, len(added_rows))) \
            if added_rows else text
    return merged
