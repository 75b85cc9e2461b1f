"""Growing object files (format 2.4): an object whose arrays grow by rows,
or are replaced, one commit at a time, without rewriting what is stored
(``docs/growing.rst``, ``docs/format.rst``)."""
