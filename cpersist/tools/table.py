"""Plain-text tables: the one renderer of ``cpersist info``/``verify``, the
bundled benchmark and the maintainers' tools.

Cells are rendered with ``str``; numbers are formatted by the caller, which
knows their unit. Each column is as wide as its widest cell (header
included); the last column is never padded, so no line ends in spaces.
"""

__all__ = ["format_table"]


def format_table(header, rows, *, right=(), gap=" ", indent="", rule="-"):
    """Render rows under a header as aligned text.

    Parameters
    ----------
    header : sequence or None
        Column titles; None: rows alone (no header, no rule), as many
        columns as the longest row.
    rows : iterable of sequence
        Cells, one sequence per row. A row shorter than the header (e.g. a
        name followed by ``"failed: reason"``) is aligned up to its last cell,
        which runs free without widening any column.
    right : iterable of int, optional
        Indexes of right-aligned columns (numbers); the others align left.
    gap : str, optional
        Between two columns.
    indent : str, optional
        Before every line.
    rule : {"-", "=", None}, optional
        ``"-"``: a line of dashes under the header; ``"="``: an
        reStructuredText simple table (rules of ``=`` per column above and
        below the header and at the end); None: no rule.

    Returns
    -------
    str
        The lines, joined by newlines.

    Examples
    --------
    >>> print(format_table(["name", "MB"], [["a", "1.5"], ["bb", "10.0"]], right=[1]))
    name   MB
    ---------
    a     1.5
    bb   10.0
    """
    rows = [[str(c) for c in row] for row in rows]
    titled = header is not None
    header = [str(h) for h in header] if titled else [""] * max(map(len, rows), default=0)
    right = set(right)
    widths = [len(h) for h in header]
    for row in rows:
        full = len(row) == len(header)
        for i, cell in enumerate(row[:len(header)]):
            if full or i < len(row) - 1:
                widths[i] = max(widths[i], len(cell))

    def line(cells):
        out = []
        for i, cell in enumerate(cells):
            last = i == len(cells) - 1
            if last and (len(cells) < len(header) or i not in right):
                out.append(cell)
            elif i in right:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell.ljust(widths[i]))
        return (indent + gap.join(out)).rstrip()

    body = [line(row) for row in rows]
    if not titled:
        return "\n".join(body)
    if rule == "=":
        border = indent + gap.join("=" * w for w in widths)
        return "\n".join([border, line(header), border] + body + [border])
    head = line(header)
    if rule:
        return "\n".join([head, indent + rule * (len(head) - len(indent))] + body)
    return "\n".join([head] + body)
