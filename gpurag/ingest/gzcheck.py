"""Which part of a gzip file can be trusted.

A gzip file is one or more members, each with a CRC-32 of its data checked only at the
member's end; by then ``gzip.open`` has returned all of that member's lines, possibly garbled.
:func:`damaged_member_start` decompresses the file once more, member by member, and says
where (in decompressed bytes) the first member that fails its CRC or its deflate stream
begins, so a reader can drop every record from there on. A member that merely ends early (a
truncated file) is not damaged: what it gave before the cut decompressed cleanly.
"""

from __future__ import annotations

import zlib
from pathlib import Path

BLOCK = 1 << 16  # input read and output held at a time: the check streams in flat memory
GZIP_WBITS = 31  # zlib: a gzip header and trailer, CRC-32 and size checked


def damaged_member_start(path: Path) -> int | None:
    """The decompressed offset where the first damaged member of ``path`` starts (None: all
    members verify, or the file is only truncated). ``OSError`` if it cannot be read."""
    start = total = 0
    d = zlib.decompressobj(GZIP_WBITS)
    with open(path, "rb") as fh:
        pending = b""
        while True:
            data = pending or fh.read(BLOCK)
            pending = b""
            if not data:
                return None  # end of file: complete, or truncated inside a member
            try:
                total += _inflate(d, data)
            except zlib.error:
                return start
            if d.eof:  # a member verified; what is left belongs to the next one
                rest = d.unused_data.lstrip(b"\0")  # padding between members is allowed
                start = total
                d = zlib.decompressobj(GZIP_WBITS)
                if rest:
                    pending = rest


def _inflate(d: zlib._Decompress, data: bytes) -> int:
    """Feed ``data`` to ``d`` and return how many bytes came out, holding at most
    :data:`BLOCK` of output at a time (a highly compressed block can inflate a hundredfold)."""
    produced = 0
    while True:
        out = len(d.decompress(data, BLOCK))
        produced += out
        data = d.unconsumed_tail
        if d.eof or (not data and out < BLOCK):
            return produced
