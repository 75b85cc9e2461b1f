"""Run code in a fresh Python interpreter that imports this checkout's cpersist.

What a test can only see from a new process (what importing costs, what a
killed writer leaves, the command line as a user types it) runs through
these helpers: the interpreter running the tests, with this checkout first on
``PYTHONPATH`` (before any path the environment already has), so that the
child imports the same cpersist as the test, installed or not.

``run_code(code, *argv)`` runs ``python -c code argv...``, ``run_cli(*args)``
runs ``python -m cpersist args...``, ``run_python(*args)`` any other command
line, ``start_python(*args)`` starts one without waiting (a
``subprocess.Popen``). Output is captured as text and a child gets
``TIMEOUT`` seconds unless the call says otherwise; ``check=True`` fails the
test with the child's output when it exits non-zero.
"""

import os
import subprocess
import sys

#: The checkout's root: the directory holding ``cpersist/`` and ``tests/``.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Seconds a child may run before the test fails.
TIMEOUT = 300


def fresh_env(*paths, **variables):
    """``os.environ`` with ``ROOT`` then ``paths`` first on ``PYTHONPATH``,
    and ``variables`` set (a value of ``None`` removes the variable)."""
    env = dict(os.environ)
    search = [ROOT, *map(str, paths)]
    if env.get("PYTHONPATH"):
        search.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(search)
    for name, value in variables.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_python(*args, check=False, **kwargs):
    """``python args...`` in a fresh interpreter; a ``CompletedProcess``.

    Keyword arguments go to :func:`subprocess.run`; by default the output
    is captured as text, the child has :data:`fresh_env`'s environment and
    :data:`TIMEOUT` seconds.
    """
    kwargs.setdefault("capture_output", "stdout" not in kwargs and "stderr" not in kwargs)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", TIMEOUT)
    kwargs.setdefault("env", fresh_env())
    done = subprocess.run([sys.executable, *map(str, args)], **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"python {' '.join(map(str, args))[:200]} exited with "
                             f"{done.returncode}:\n{done.stdout or ''}\n{done.stderr or ''}")
    return done


def run_code(code, *argv, **kwargs):
    """``python -c code argv...``: see :func:`run_python`."""
    return run_python("-c", code, *argv, **kwargs)


def run_cli(*args, **kwargs):
    """``python -m cpersist args...``: see :func:`run_python`."""
    return run_python("-m", "cpersist", *args, **kwargs)


def start_python(*args, **kwargs):
    """``python args...`` started and not waited for: a ``subprocess.Popen``
    with :data:`fresh_env`'s environment unless ``env`` is given."""
    kwargs.setdefault("env", fresh_env())
    return subprocess.Popen([sys.executable, *map(str, args)], **kwargs)
