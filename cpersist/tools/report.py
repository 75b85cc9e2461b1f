"""What ``cpersist info`` and ``cpersist verify`` print: a file's report
(:func:`cpersist.inspect`'s, with each array's ratio) rendered as text
tables, byte counts in human units, and the line of a verified file. The
command line (:mod:`cpersist.cli`) builds the reports and prints these.
"""

from .table import format_table


def _human(n):
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


def _tensor_lines(info):
    """``cpersist info``'s lines on torch tensors (see :mod:`cpersist.pickling.tensors`)."""
    lines = []
    tensors = info.get("tensors") or []
    if tensors:
        storages = len({t.get("section") for t in tensors})
        lines.append(f"torch tensors: {len(tensors)}, viewing {storages} stored storage(s)")
        rows = [[t.get("path", "?"), _shape(t.get("shape")), t.get("dtype", "?"),
                 t.get("section", "?"), t.get("offset", "?"), _shape(t.get("stride")),
                 t.get("kind", "?"), t.get("device") or "cpu"] for t in tensors]
        lines += _table(rows, ["path", "shape", "dtype", "storage", "offset", "strides",
                               "kind", "dumped from"], right=(3, 4))
    pickled = info.get("torch_pickled") or []
    if pickled:
        lines.append(f"objects pickled by torch itself (trusted loads only): {len(pickled)}")
        lines += [f"  {p.get('path', '?')}: {p.get('global', '?')}" for p in pickled]
    return lines


def format_info(info):
    """The human-readable text of ``cpersist info`` for a :func:`file_info` dict."""
    head = f"{info['file']}: cpersist format {_format_version(info.get('format'))}"
    if info.get("layout") == "tiny":
        head += f", tiny dump of {_human(info.get('file_bytes'))}"
    writer_info = info.get("info") if isinstance(info.get("info"), dict) else {}
    if writer_info.get("writer"):
        head += f", written by {writer_info['writer']}"
    if writer_info.get("converted_by"):
        head += f", converted by {writer_info['converted_by']}"
    lines = [head]
    arrays = info.get("arrays", [])
    stored_total = sum(a.get("stored_bytes") or 0 for a in arrays)
    raw_total = sum(a.get("raw_bytes") or 0 for a in arrays)
    lines.append(f"arrays: {len(arrays)} in sections, {_human(raw_total)} uncompressed, "
                 f"{_human(stored_total)} stored")
    if arrays:
        rows = []
        for a in arrays:
            ratio = a.get("ratio")
            rows.append([
                a.get("section", "?"), a.get("path", "?"), _shape(a.get("shape")),
                a.get("dtype", "?"), a.get("order", "?"), a.get("codec") or "raw",
                a.get("level") if a.get("level") is not None else "-",
                _human(a.get("stored_bytes")), _human(a.get("raw_bytes")),
                f"{ratio:.2f}" if ratio is not None else "-",
            ])
        lines += _table(rows, ["section", "path", "shape", "dtype", "order", "codec", "level",
                               "stored", "raw", "ratio"], right=(0, 6, 7, 8, 9))
    inline = info.get("inline_arrays") or []
    if inline:
        lines.append(f"small arrays inside the pickle stream: {len(inline)}")
        rows = [[a.get("path", "?"), _shape(a.get("shape")), a.get("dtype", "?"),
                 a.get("order", "?"), _human(a.get("raw_bytes"))] for a in inline]
        lines += _table(rows, ["path", "shape", "dtype", "order", "raw"], right=(4,))
    lines += _tensor_lines(info)
    pickle_info = info.get("pickle") or {}
    if pickle_info:
        lines.append(
            f"pickle stream: {_human(pickle_info.get('stored_bytes'))} stored, "
            f"{_human(pickle_info.get('raw_bytes'))} uncompressed, "
            f"protocol {pickle_info.get('protocol', '?')}"
        )
    needed = info.get("globals", [])
    lines.append(f"globals needed to load: {len(needed)}")
    lines += [f"  {g if isinstance(g, str) else '.'.join(map(str, g))}" for g in needed]
    if info.get("unresolved_globals"):
        lines.append(f"  + {info['unresolved_globals']} global(s) computed at load time "
                     f"(not named in the stream)")
    if info.get("extension_codes"):
        lines.append(f"  + copyreg extension codes {info['extension_codes']}")
    verdict = info.get("restricted_load")
    if verdict is not None:
        lines.append("restricted load (trusted=False): " + (
            "accepted" if verdict["accepted"] else f"refused ({verdict['refusal']})"))
    return "\n".join(lines)


def _json_default(value):
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
    verdict = result.get("restricted_load")
    if verdict is not None and not verdict["accepted"]:
        note += (f"; a restricted load (trusted=False) refuses it: {verdict['refusal']}")
    return (f"{path}: OK ({result['sections']} sections, {result['chunks']} chunks, "
            f"{_human(result['stored_bytes'])} checked){note}")


def _message(exc, path=None):
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
