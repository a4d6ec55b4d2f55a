"""Markdown and reStructuredText: the file's text is kept as written (what a passage shows
and what its char spans point into), and its markup is stripped from what is embedded
(:func:`strip_markup`) and from passage previews (:func:`preview_text`).

Stripping works on any fragment of a document (a chunk), so it is line-based: headings,
emphasis, links, images, inline code, fences, block quotes, tables, directives and roles.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from gpurag.ingest.documents import Document, IngestReport, read_utf8_file
from gpurag.ingest.formats import ReadOptions
from gpurag.ingest.formats.common import file_document

MARKUPS = ("markdown", "rst")

_MD_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.M), r) for p, r in (
        (r"^ {0,3}(```|~~~).*$", ""),                    # code fences
        (r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$", r"\1"),    # ATX headings
        (r"^ {0,3}(=+|-+)[ \t]*$", ""),                  # setext underlines, rules
        (r"^ {0,3}(\*[ \t]*){3,}$", ""),                 # *** rules
        (r"^ {0,3}>[ \t]?", ""),                         # block quotes
        (r"^ {0,3}\|?[ \t]*:?-{3,}:?[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$", ""),  # table rules
        (r"!\[([^\]]*)\]\([^)]*\)", r"\1"),              # images: alt text
        (r"\[([^\]]+)\]\([^)]*\)", r"\1"),               # links: their text
        (r"\[([^\]]+)\]\[[^\]]*\]", r"\1"),              # reference links
        (r"^ {0,3}\[[^\]]+\]:\s+\S+.*$", ""),            # link definitions
        (r"`{1,3}([^`\n]+)`{1,3}", r"\1"),               # inline code
        (r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", r"\2"),       # strong
        (r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])", r"\1"),  # emphasis
        (r"(?<![\w_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\w_])", r"\1"),
        (r"~~(?=\S)(.+?)(?<=\S)~~", r"\1"),              # strikethrough
        (r"</?[A-Za-z][^>\n]*>", ""),                    # inline HTML tags
        (r"^[ \t]*\|[ \t]*|[ \t]*\|[ \t]*$", ""),        # table row edges
        (r"[ \t]+\|[ \t]+", " | "),
    ))

_RST_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.M), r) for p, r in (
        (r"^([=\-`:'\"~^_*+#<>.])\1{2,}[ \t]*$", ""),    # section over/underlines
        (r"^\.\. _[^:]+:.*$", ""),                       # link targets
        (r"^\.\. \|[^|]+\| .*$", ""),                    # substitution definitions
        (r"^\.\. [\w:-]+::[ \t]*(.*)$", r"\1"),          # directives: keep their argument
        (r"^\.\.( .*)?$", ""),                           # comments
        (r"^[ \t]+:[\w -]+:.*$", ""),                    # directive options
        (r"`([^`<\n]+?)\s*<[^>\n]+>`__?", r"\1"),        # `text <url>`_
        (r":[\w:+-]+:`([^`<\n]+?)\s*<[^>\n]+>`", r"\1"),  # :role:`text <target>`
        (r":[\w:+-]+:`([^`\n]+)`", r"\1"),               # :role:`text`
        (r"``([^`\n]+)``", r"\1"),                       # inline literals
        (r"`([^`\n]+)`_{0,2}", r"\1"),                   # `refs`_ and `interpreted`
        (r"\*\*(?=\S)(.+?)(?<=\S)\*\*", r"\1"),          # strong
        (r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])", r"\1"),  # emphasis
        (r"\|([\w -]+)\|", r"\1"),                       # substitution references
        (r"::[ \t]*$", ":"),                             # literal block markers
    ))

_BLANK_RUNS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def strip_markup(text: str, markup: str) -> str:
    """``text`` (a whole document or any chunk of one) without its Markdown (``markdown``)
    or reStructuredText (``rst``) markup; any other ``markup`` returns it unchanged."""
    rules = {"markdown": _MD_RULES, "rst": _RST_RULES}.get(markup)
    if rules is None:
        return text
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    return _BLANK_RUNS.sub("\n\n", text).strip()


def markup_of(doc_id_or_path: str) -> str:
    """The markup of a file by its suffix: ``markdown``, ``rst`` or ''."""
    name = doc_id_or_path.lower()
    if name.endswith((".md", ".markdown")):
        return "markdown"
    if name.endswith((".rst", ".rest")):
        return "rst"
    return ""


def preview_text(title: str, text: str, markup: str | None = None) -> str:
    """A passage as a preview shows it: without markup (detected when ``markup`` is None)
    and without a first line that only repeats the title."""
    if markup is None:
        markup = "markdown" if looks_like_markdown(text) else ""
    plain = strip_markup(text, markup) if markup else text.strip()
    first, _, rest = plain.partition("\n")
    if title and first.strip().strip("#").strip().casefold() == title.strip().casefold():
        plain = rest.strip()
    return plain


_MD_SIGNS = re.compile(r"^ {0,3}#{1,6} \S|\*\*\S|\]\(|^ {0,3}```|^ {0,3}> ", re.M)


def looks_like_markdown(text: str) -> bool:
    """Whether ``text`` shows Markdown markup (a heading, strong text, a link or a fence)."""
    return _MD_SIGNS.search(text) is not None


def rst_title(text: str) -> str:
    """The first section title of a reStructuredText document ('' when it has none)."""
    lines = text.split("\n")
    for i in range(len(lines) - 1):
        line, under = lines[i].strip(), lines[i + 1].strip()
        if (line and under and len(set(under)) == 1 and under[0] in "=-`:'\"~^_*+#<>."
                and len(under) >= len(line) and not re.fullmatch(r"(.)\1*", line)):
            return line
    return ""


def read_rst(path: Path, root: Path, report: IngestReport, options: ReadOptions
             ) -> Iterator[Document]:
    """A reStructuredText file as written (UTF-8), titled by its first section title."""
    text = read_utf8_file(path, report)
    if text is None:
        return
    doc = file_document(path, root, report, rst_title(text), text, ".rst", markup="rst")
    if doc is not None:
        yield doc
