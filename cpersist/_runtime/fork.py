"""Fresh locks and per-thread state in a child process made by ``os.fork``.

A fork copies only the thread that called it: a lock another thread held at
that moment stays held forever in the child, and pools and per-thread
contexts refer to threads the child does not have. Each module that keeps
such state at module level names it once here, with what makes it anew.
"""

import os


def renew_after_fork(owner, **factories):
    """In a forked child, set each ``name`` of ``owner`` to ``factory()``.

    Parameters
    ----------
    owner : dict or object
        A module's ``globals()``, or an object whose attributes are renewed.
    **factories : callable
        ``name=factory``: ``threading.Lock``, ``dict``, ``threading.local``...

    Examples
    --------
    >>> import threading
    >>> _lock = threading.Lock()
    >>> renew_after_fork(globals(), _lock=threading.Lock)
    """
    def renew():
        for name, factory in factories.items():
            if isinstance(owner, dict):
                owner[name] = factory()
            else:
                setattr(owner, name, factory())

    if hasattr(os, "register_at_fork"):  # Windows does not fork
        os.register_at_fork(after_in_child=renew)
