"""Record logs: files that grow by one record per append, read back in
order or by number (``docs/growing.rst``)."""
