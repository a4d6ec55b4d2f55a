"""One question (or document id) a line means a line ends at "\\n" only (issue 28, item 4).

``str.splitlines`` also ends a line at U+2028, U+2029, \\x0b, \\x0c, \\x1c-\\x1e and \\x85: one
question holding such a character became two and every later answer moved down by one.
"""

from __future__ import annotations

import pytest

from gpurag.cli import read_questions
from gpurag.pipeline.incremental import read_ids_file

SEPARATORS = ["\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_questions_file_splits_on_newlines_only(tmp_path, sep, newline):
    path = tmp_path / "questions.txt"
    lines = [f"Who founded{sep}Kestrel Dynamics?", "", "Where is Varnholt?", "  "]
    path.write_text(newline.join(lines) + newline, encoding="utf-8", newline="")
    assert read_questions(str(path)) == [f"Who founded{sep}Kestrel Dynamics?",
                                         "Where is Varnholt?"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_ids_file_splits_on_newlines_only(tmp_path, sep):
    path = tmp_path / "ids.txt"
    path.write_text(f"doc{sep}1\r\ndoc2\n\n", encoding="utf-8", newline="")
    assert read_ids_file(path) == [f"doc{sep}1", "doc2"]
