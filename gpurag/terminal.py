"""Printing untrusted text (corpus, questions, file names, model answers) to a terminal.

Control characters (ANSI escapes, carriage returns, backspaces, C1 codes) and Unicode direction
overrides could rewrite or hide what the terminal shows; :func:`safe` prints them as visible
escapes (``\\x1b``). JSON output is left exact: JSON escapes what it must itself.
"""

from __future__ import annotations

import logging

_CODES = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0),
          0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CODES}
_TABLE = {c: v for c, v in _ESCAPES.items() if c != ord("\t")}  # a tab is plain whitespace
_TABLE_LINES = {c: v for c, v in _TABLE.items() if c != ord("\n")}


def safe(text: object, keep_newlines: bool = False) -> str:
    """``text`` with control and direction-override characters shown as escapes
    (newlines kept when ``keep_newlines``)."""
    return str(text).translate(_TABLE_LINES if keep_newlines else _TABLE)


class SafeFormatter(logging.Formatter):
    """A logging formatter whose messages (which may quote corpus data) are :func:`safe`."""

    def format(self, record: logging.LogRecord) -> str:
        return safe(super().format(record), keep_newlines=True)
