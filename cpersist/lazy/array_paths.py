"""The arrays of an open file by their paths in the object, and what a
missing path means (an array kept inside the pickle stream is no key)."""

from ..exceptions import ArrayNotFoundError


class ArrayPaths(dict):
    """:attr:`FileHandle.arrays`: a dict whose missing keys are explained.

    ``kept_in_stream`` is called on a missing key only: it gives the paths
    of the small arrays the file keeps inside its pickle stream, which are
    not keys but are what a user asking for one of them needs to hear about.
    """

    def __init__(self, kept_in_stream=list):
        super().__init__()
        self._kept_in_stream = kept_in_stream

    def __missing__(self, key):
        import difflib

        text = str(key)
        in_stream = self._kept_in_stream()
        for path in in_stream:
            if text == path or _names(path, text):
                raise ArrayNotFoundError(
                    f"no lazy array at {key!r}: {path} is a small array that the dump kept "
                    f"inside the pickle stream, not in a section of its own, and "
                    f"handle.arrays lists only the arrays in sections. Read it from the "
                    f"object: handle.load(lazy=True){path[len(_ROOT):]} (this reads the "
                    f"pickle stream, not the other arrays)", key, path)
        keys = list(self)
        exact = [k for k in keys if _names(k, text)]
        near = exact or difflib.get_close_matches(text, keys, n=3, cutoff=0.0)
        if not keys:
            listing = "the file stores no array in a section of its own"
        else:
            listing = "nearest: " + ", ".join(repr(k) for k in near[:3])
            if len(keys) > len(near[:3]):
                listing += f" ({len(keys)} arrays in all: list(handle.arrays))"
        if in_stream:
            listing += (f"; {len(in_stream)} small array(s) kept inside the pickle stream "
                        f"are not listed (cpersist info shows them)")
        raise ArrayNotFoundError(
            f"no array at {key!r}: keys are paths from the object, as cpersist info prints "
            f"them (e.g. \"obj['w']\" for obj['w'], \"obj.coef_\" for an attribute); {listing}",
            key)


#: How paths name the object itself.
_ROOT = "obj"


def _names(path, text):
    """Whether ``text`` is the last step of ``path``: ``'w'`` of ``"obj['w']"``."""
    return path.endswith((f"[{text!r}]", f".{text}", f"[{text}]"))


def placed(inline):
    """The paths of the arrays :func:`~cpersist.stream.paths.scan_arrays`
    found inside the stream, but those it could not place."""
    return [entry["path"] for entry in inline if entry["path"] != "?"]
