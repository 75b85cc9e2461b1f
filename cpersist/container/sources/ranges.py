"""Byte ranges planned into requests: neighbours merged into one request
when reading the gap costs less than a round trip, long runs cut into
requests fetched concurrently. Pure arithmetic on ``(offset, length)`` pairs.
"""

#: Ranges closer than this are fetched by one request covering the gap too:
#: reading a gap costs less than a round trip.
MERGE_GAP = 1 << 20
#: Largest merged request: larger merged ranges are cut into requests of this
#: size, fetched concurrently.
REQUEST_SIZE = 16 << 20


def merge_ranges(ranges, gap=MERGE_GAP, limit=REQUEST_SIZE):
    """Requests covering ``(offset, length)`` ranges, neighbours merged.

    Returns ``(requests, places)``: ``requests`` is a list of ``(start,
    end)`` byte spans, ``places[i]`` is ``(request number, offset in it)``
    of range ``i``. Ranges are merged when they are at most ``gap`` bytes
    apart and the merged span stays within ``limit`` bytes (a range larger
    than ``limit`` gets a request of its own).
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    requests = []
    places = [None] * len(ranges)
    for i in order:
        offset, length = ranges[i]
        end = offset + length
        if requests:
            start, last_end = requests[-1]
            if offset - last_end <= gap and max(end, last_end) - start <= limit:
                requests[-1] = (start, max(end, last_end))
                places[i] = (len(requests) - 1, offset - start)
                continue
        requests.append((offset, end))
        places[i] = (len(requests) - 1, 0)
    return requests, places


def split_batches(ranges, size):
    """``ranges`` cut into consecutive lists of about ``size`` bytes."""
    batches = [[]]
    total = 0
    for offset, length in ranges:
        if total and total + length > size:
            batches.append([])
            total = 0
        batches[-1].append((offset, length))
        total += length
    return batches


def one_span(ranges):
    """``(start, end)`` of ``ranges`` if they are in order, none empty, each
    at most :data:`MERGE_GAP` after the one before; else None."""
    if not ranges:
        return None
    start = end = ranges[0][0]
    for offset, length in ranges:
        if not length or offset < end or offset - end > MERGE_GAP:
            return None
        end = offset + length
    return start, end
