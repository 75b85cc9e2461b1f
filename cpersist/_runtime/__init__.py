"""The process-level services the rest of the package shares: thread pools and
the ordered pipeline, pausing the garbage collector, opening files and
streams, and resetting locks in a forked child.
"""
