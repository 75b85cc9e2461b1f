"""What ``cpersist info`` and ``cpersist verify`` print: a file's report
(:func:`cpersist.inspect`'s, with each array's ratio) rendered as text
tables, byte counts in human units, and the line of a verified file. The
command line (:mod:`cpersist.cli`) builds the reports and prints these.
"""

from .table import format_table


def human_size(n):
    """Bytes as a short string: ``'812 B'``, ``'4.2 KiB'``, ``'1.0 GiB'``."""
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _format_version(value):
    if isinstance(value, (list, tuple)):
        return ".".join(str(v) for v in value)
    if isinstance(value, dict):
        major, minor = value.get("major"), value.get("minor")
        if major is not None:
            return f"{major}.{minor}"
        return value.get("version", str(value))
    return str(value)


def _table(rows, headers, right=()):
    return format_table(headers, rows, right=right, gap="  ", indent="  ", rule=None).splitlines()


def _shape(shape):
    if not isinstance(shape, (list, tuple)):
        return "?"
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


#: Rows of the table of arrays printed whole; a longer one is summarised by
#: its first and last rows, so that the report of a model fits a screen.
MAX_ROWS = 30
_TAIL_ROWS = 5
#: Lines naming objects torch pickled itself, likewise.
_TORCH_PICKLED_ROWS = 10

#: What the codec column says of an array kept inside the pickle stream.
IN_STREAM = "in stream"


def _dtype_name(text):
    """A numpy ``dtype.str`` as users name the dtype: ``'float32'``, with the
    byte order only when it is not the machine's; other text as it is."""
    import numpy as np

    if text == "?":  # unknown, not numpy's code of bool
        return text
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError):
        return str(text)
    if dtype.fields is not None or dtype.kind in "USV":
        return str(text)  # '<U5' says more than 'str160'
    if dtype.isnative:
        return dtype.name
    return f"{dtype.name} ({'big' if dtype.byteorder == '>' else 'little'}-endian)"


def _codec_label(entry):
    codec = entry.get("codec")
    if codec is None:
        return "raw"
    level = entry.get("level")
    return f"{codec}:{level}" if level is not None else str(codec)


def _numel(shape):
    if not isinstance(shape, (list, tuple)) or not all(
            type(n) is int and n >= 0 for n in shape):
        return None
    count = 1
    for n in shape:
        count *= n
    return count


def _itemsize(text):
    import numpy as np

    if text == "?":
        return None
    try:
        return np.dtype(text).itemsize
    except (TypeError, ValueError):
        return None


def _rows(info):
    """One row per place the object holds an array: ``[path, dtype, shape,
    size in memory, codec]``; a torch tensor by its own dtype and shape
    rather than its storage's, an array kept inside the pickle stream with
    :data:`IN_STREAM` for codec, one held at several places (tied weights)
    once more at each other place. Sections in file order, then the arrays
    in the stream."""
    views = {}
    for tensor in info.get("tensors") or []:
        views.setdefault(tensor.get("section"), []).append(tensor)
    rows = []

    def add(entry, row):
        # An object held at several places: a row at each, the others
        # saying which row they repeat.
        rows.append(row)
        rows.extend([other, *row[1:4], f"same as {row[0]}"] for other in entry.get("also", ()))

    for entry in info.get("arrays", []):
        codec = _codec_label(entry)
        tensors = views.get(entry.get("section"))
        if not tensors:
            add(entry, [entry.get("path", "?"), _dtype_name(entry.get("dtype", "?")),
                        _shape(entry.get("shape")), human_size(entry.get("raw_bytes")), codec])
            continue
        itemsize = _itemsize(entry.get("dtype"))
        for tensor in tensors:
            numel = _numel(tensor.get("shape"))
            dtype = tensor.get("dtype")
            add(tensor, [tensor.get("path", "?"),
                         f"torch.{dtype}" if isinstance(dtype, str) else "?",
                         _shape(tensor.get("shape")),
                         human_size(numel * itemsize if numel is not None and itemsize else None),
                         codec])
    for entry in info.get("inline_arrays") or []:
        add(entry, [entry.get("path", "?"), _dtype_name(entry.get("dtype", "?")),
                    _shape(entry.get("shape")), human_size(entry.get("raw_bytes")), IN_STREAM])
    return rows


def _count(n, one, many=None):
    return f"{n} {one if n == 1 else many or one + 's'}"


def _contents(info):
    """The line counting the arrays and tensors, their bytes in memory, the
    file's size and the ratio of the two."""
    arrays = info.get("arrays", [])
    tensors = info.get("tensors") or []
    inline = info.get("inline_arrays") or []
    storages = {t.get("section") for t in tensors}
    plain = sum(1 for a in arrays if a.get("section") not in storages)
    parts = []
    if plain + len(inline) or not tensors:
        kept = f" ({len(inline)} inside the pickle stream)" if inline else ""
        parts.append(_count(plain + len(inline), "array") + kept)
    if tensors:
        parts.append(_count(len(tensors), "torch tensor"))
    in_memory = (sum(a.get("raw_bytes") or 0 for a in arrays)
                 + sum(a.get("raw_bytes") or 0 for a in inline))
    size = info.get("file_bytes")
    ratio = f" (ratio {in_memory / size:.2f})" if size and in_memory else ""
    return (f"{' and '.join(parts)}: {human_size(in_memory)} in memory, {human_size(size)} "
            f"in the file{ratio}")


def _codecs(info):
    """The line saying how the sections are stored, with how many of each."""
    counts = {}
    for entry in info.get("arrays", []):
        label = _codec_label(entry)
        counts[label] = counts.get(label, 0) + 1
    if not counts:
        return []
    if len(counts) == 1:
        (label, n), = counts.items()
        return [f"codec: {label} ({_count(n, 'section')})"]
    listed = ", ".join(f"{label} ({n})" for label, n in
                       sorted(counts.items(), key=lambda item: -item[1]))
    return [f"codecs: {listed} sections"]


def _globals_lines(info, every):
    needed = info.get("globals", [])
    lines = [f"globals needed to load: {len(needed)}"]
    lines += [f"  {g if isinstance(g, str) else '.'.join(map(str, g))}" for g in needed]
    if info.get("unresolved_globals"):
        lines.append(f"  + {info['unresolved_globals']} global(s) computed at load time "
                     f"(not named in the stream)")
    if info.get("extension_codes"):
        lines.append(f"  + copyreg extension codes {info['extension_codes']}")
    pickled = info.get("torch_pickled") or []
    if pickled:
        lines.append(f"objects pickled by torch itself (trusted loads only): {len(pickled)}")
        shown = pickled if every or len(pickled) <= _TORCH_PICKLED_ROWS else (
            pickled[:_TORCH_PICKLED_ROWS - 1])
        lines += [f"  {p.get('path', '?')}: {p.get('global', '?')}" for p in shown]
        if len(shown) < len(pickled):
            lines.append(f"  ... {len(pickled) - len(shown)} more (--all lists them)")
    verdict = info.get("restricted_load")
    if verdict is not None:
        lines.append("restricted load (trusted=False): " + (
            "accepted" if verdict["accepted"] else f"refused ({verdict['refusal']})"))
    return lines


def _array_table(rows, every):
    """The table of arrays; without ``every``, a long one gives its first and
    last rows and says how many it leaves out."""
    if not rows:
        return []
    left = len(rows) - MAX_ROWS if not every and len(rows) > MAX_ROWS else 0
    if left:
        left += 1  # the line saying so takes the place of one more row
        head, tail = rows[:MAX_ROWS - _TAIL_ROWS - 1], rows[len(rows) - _TAIL_ROWS:]
        rows = head + [[f"... {left} more (--all lists every array, --details how each "
                        f"is stored)"]] + tail
    lines = _table(rows, ["path", "dtype", "shape", "size", "codec"], right=(3,))
    if any(row[-1] == IN_STREAM for row in rows):
        lines.append(f"  {IN_STREAM}: kept inside the pickle stream (load() reads it, "
                     f"FileHandle.arrays does not list it)")
    return lines


def _details(info):
    """``--details``: how each array is stored: its section (dtype as stored,
    order, codec, level, sizes, ratio), the views torch tensors make of their
    storages, and the arrays inside the pickle stream."""
    lines = []
    arrays = info.get("arrays", [])
    if arrays:
        lines.append(f"sections: {_count(len(arrays), 'array')}, "
                     f"{human_size(sum(a.get('raw_bytes') or 0 for a in arrays))} uncompressed, "
                     f"{human_size(sum(a.get('stored_bytes') or 0 for a in arrays))} stored")
        rows = []
        for a in arrays:
            ratio = a.get("ratio")
            rows.append([
                a.get("section", "?"), a.get("path", "?"), _shape(a.get("shape")),
                a.get("dtype", "?"), a.get("order", "?"), a.get("codec") or "raw",
                a.get("level") if a.get("level") is not None else "-",
                human_size(a.get("stored_bytes")), human_size(a.get("raw_bytes")),
                f"{ratio:.2f}" if ratio is not None else "-",
            ])
        lines += _table(rows, ["section", "path", "shape", "dtype", "order", "codec", "level",
                               "stored", "raw", "ratio"], right=(0, 6, 7, 8, 9))
    tensors = info.get("tensors") or []
    if tensors:
        storages = len({t.get("section") for t in tensors})
        lines.append(f"torch tensors: {len(tensors)}, viewing {storages} stored storage(s)")
        rows = [[t.get("path", "?"), _shape(t.get("shape")), t.get("dtype", "?"),
                 t.get("section", "?"), t.get("offset", "?"), _shape(t.get("stride")),
                 t.get("kind", "?"), t.get("device") or "cpu"] for t in tensors]
        lines += _table(rows, ["path", "shape", "dtype", "storage", "offset", "strides",
                               "kind", "dumped from"], right=(3, 4))
    inline = info.get("inline_arrays") or []
    blocks = info.get("buffer_blocks") or {}
    if blocks.get("count"):
        lines.append(f"buffer blocks: {blocks['count']}, holding {blocks['buffers']} small "
                     f"arrays' bytes, {human_size(blocks['raw_bytes'])} uncompressed, "
                     f"{human_size(blocks['stored_bytes'])} stored")
    if inline:
        lines.append(f"small arrays inside the pickle stream: {len(inline)}")
        rows = [[a.get("path", "?"), _shape(a.get("shape")), a.get("dtype", "?"),
                 a.get("order", "?"), human_size(a.get("raw_bytes"))] for a in inline]
        lines += _table(rows, ["path", "shape", "dtype", "order", "raw"], right=(4,))
    return lines


def format_info(info, *, every=False, details=False):
    """The human-readable text of ``cpersist info`` for a :func:`file_info` dict.

    A header (format, writer, the arrays' bytes in memory and on disk, the
    codecs, the pickle stream and the globals a load imports), then one row
    per array or tensor: its path, dtype, shape, size and codec. Past
    :data:`MAX_ROWS` rows the table is summarised unless ``every``;
    ``details`` lists every row too, and adds how each array is stored.
    """
    if info.get("layout") in ("record log", "dumps"):
        from ..recordlog.tools import format_log_info

        return format_log_info(info)
    head = f"{info['file']}: cpersist format {_format_version(info.get('format'))}"
    if info.get("layout") == "tiny":
        head += f", tiny dump of {human_size(info.get('file_bytes'))}"
    writer_info = info.get("info") if isinstance(info.get("info"), dict) else {}
    if writer_info.get("writer"):
        head += f", written by {writer_info['writer']}"
    if writer_info.get("converted_by"):
        head += f", converted by {writer_info['converted_by']}"
    lines = [head, _contents(info)] + _codecs(info)
    if info.get("layout") == "growing":
        lines.append(_growing_line(info))
    pickle_info = info.get("pickle") or {}
    if pickle_info:
        lines.append(
            f"pickle stream: {human_size(pickle_info.get('stored_bytes'))} stored, "
            f"{human_size(pickle_info.get('raw_bytes'))} uncompressed, "
            f"protocol {pickle_info.get('protocol', '?')}"
        )
    lines += _globals_lines(info, every or details)
    lines += _array_table(_rows(info), every or details)
    if details:
        lines += _details(info)
    return "\n".join(lines)


def _growing_line(info):
    """What ``cpersist info`` says of a growing file's commits and space."""
    line = (f"growing file: {info['committed_bytes']:,} bytes committed, "
            f"{info['reclaimable_bytes']:,} of them superseded (`cpersist compact` "
            f"reclaims them)")
    if info.get("torn_bytes"):
        line += (f"; torn tail: {info['torn_bytes']:,} bytes after the last commit (a "
                 f"change cut short, or in progress; the next change cuts it off)")
    return line


def json_default(value):
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def format_verified(path, result, resealed):
    """The line ``cpersist verify`` prints for a file that passed."""
    note = ""
    if result["unchecked"]:
        numbers = ", ".join(map(str, result["unchecked"]))
        note = (f"; raw array sections {numbers} were changed through a writable map "
                f"(mmap_mode='r+') and cannot be checked: "
                + ("their new checksums are stored (resealed)" if resealed
                   else "'cpersist verify --reseal' stores their new checksums"))
    if result.get("layout") in ("record log", "dumps"):
        from ..recordlog.tools import torn_note

        note += f"; {result['records']} records" + torn_note(result)
    verdict = result.get("restricted_load")
    if verdict is not None and not verdict["accepted"]:
        note += (f"; a restricted load (trusted=False) refuses it: {verdict['refusal']}")
    return (f"{path}: OK ({result['sections']} sections, {result['chunks']} chunks, "
            f"{human_size(result['stored_bytes'])} checked){note}")


def error_line(exc, path=None):
    """One line for ``exc``, naming the file: its own ``filename``, else
    ``path`` unless the message starts with a name already."""
    text = str(exc)
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror}"
    elif isinstance(exc, OSError) and exc.strerror:
        text = f"{path}: {exc.strerror}" if path else exc.strerror
    elif path and isinstance(exc, OSError) and not text.startswith(str(path)):
        text = f"{path}: {text}"
    return text
