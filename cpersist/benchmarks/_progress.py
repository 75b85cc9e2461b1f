"""Progress bar: tqdm when installed, else a silent stand-in."""


class _Silent:
    """The part of tqdm's interface the benchmark uses, doing nothing."""

    def update(self, n=1):
        pass

    def set_postfix_str(self, s="", refresh=True):
        pass

    def close(self):
        pass


#: A bar whose steps are estimated costs, not counts: only the percentage and
#: the elapsed and remaining time mean something to a reader.
_WEIGHTED_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {elapsed} elapsed, ~{remaining} left {postfix}"


def progress_bar(total, desc="", disable=False, weighted=False):
    """A tqdm bar counting to ``total``, or a no-op one.

    With ``weighted``, ``total`` and the updates are estimated costs, and the
    bar shows the percentage done and the time left rather than counts.
    """
    if disable:
        return _Silent()
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is in the [bench] extra; the benchmark runs without it
        return _Silent()
    if weighted:
        return tqdm(total=total, desc=desc, dynamic_ncols=True, bar_format=_WEIGHTED_FORMAT)
    return tqdm(total=total, desc=desc, unit="run", dynamic_ncols=True)
