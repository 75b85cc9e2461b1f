"""The process-level services the rest of the package shares: thread pools and
the work spread over them, pausing the garbage collector, opening files and
streams, writing to remote storage, and renewing locks in a forked child.
"""
