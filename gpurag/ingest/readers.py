"""Stream documents from a folder or file: .txt/.md, .jsonl(.gz) and Parquet here; PDF, HTML,
DOCX, reStructuredText and CSV through :mod:`gpurag.ingest.formats`. A file of any other
format is skipped and counted as ``unsupported format``.

Bad records (non-UTF-8, missing, empty or non-string text, broken JSON line, a document id
already used, unreadable file) are skipped with a message naming the file and line, and counted
in an :class:`IngestReport`; so are truncated or corrupt files (with the number of records read
before the damage) and dangling symbolic links in a source folder.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from gpurag.errors import InputError
from gpurag.ingest.documents import (
    Document,
    IngestReport,
    read_utf8_file,
    record_to_document,
)
from gpurag.ingest.formats import ReadOptions
from gpurag.ingest.gzcheck import damaged_member_start
from gpurag.ingest.scan import walk_folder

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)


def _suffix_kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    from gpurag.ingest.formats import format_for

    return "format" if format_for(path) is not None else None


def scan_inputs(source: str | Path, report: IngestReport | None = None,
                follow_outside_links: bool = False) -> tuple[list[Path], list[Path]]:
    """The input files under ``source`` (a file or a folder), in a stable order, and the
    dangling symbolic links found beside them. Files of an unsupported format are listed
    too (reading reports and counts them), unless none of a supported format is there. What
    the folder walk could not use (unreadable folders and entries, dangling links, link
    loops, links leading outside the folder: :mod:`gpurag.ingest.scan`) goes into
    ``report``."""
    src = Path(source)
    if not src.exists():
        if src.is_symlink():
            raise InputError(f"input not found: {src} is a dangling link to {_target(src)}")
        raise InputError(f"input not found: {src}")
    if src.is_file():
        if _suffix_kind(src) is None:
            from gpurag.ingest.formats import supported_names

            raise InputError(f"unsupported input file type: {src} (gpurag reads "
                             f"{supported_names()})")
        return [src], []
    scan = walk_folder(src, follow_outside_links)
    if report is not None:
        scan.report_to(report)
    files = scan.entries
    if not any(_suffix_kind(p) is not None for p in files):
        from gpurag.ingest.formats import supported_names

        notes = [f"{len(files)} files of other formats"] if files else []
        notes += [f"{n} {what}" for what, n in scan.problem_counts().items()]
        extra = f" ({', '.join(notes)})" if notes else ""
        raise InputError(f"no readable files under {src}{extra}: gpurag reads "
                         f"{supported_names()}")
    return files, scan.dangling


def list_input_files(source: str | Path, follow_outside_links: bool = False) -> list[Path]:
    """The readable input files under ``source`` (a file or a folder), in a stable order."""
    return scan_inputs(source, follow_outside_links=follow_outside_links)[0]


def _target(link: Path) -> str:
    try:
        return str(link.readlink())
    except OSError:
        return "?"


def _doc_id_for_path(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def _read_text_file(path: Path, root: Path, report: IngestReport) -> Iterator[Document]:
    text = read_utf8_file(path, report)
    if text is None:
        return
    if not text.strip():
        report.skip("empty text", str(path))
        return
    title, markup = path.stem, ""
    if path.suffix.lower() in (".md", ".markdown"):
        markup = "markdown"
        first = text.lstrip().splitlines()[0] if text.strip() else ""
        if first.startswith("#"):
            title = first.lstrip("#").strip() or title
    yield Document(_doc_id_for_path(path, root), title, text, str(path), str(path),
                   markup=markup)


def _read_jsonl(path: Path, root: Path, report: IngestReport) -> Iterator[Document]:
    gz = path.name.lower().endswith(".gz")
    opener = gzip.open if gz else open
    base = _doc_id_for_path(path, root)
    lineno = records = dropped = offset = 0
    trusted = None  # decompressed bytes before the first damaged gzip member
    try:
        if gz:
            trusted = damaged_member_start(path)
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                where = f"{path}:{lineno}"
                offset += len(raw)
                if trusted is not None and offset > trusted:  # from a member that fails
                    dropped += bool(raw.strip())
                    continue
                if not raw.strip():
                    continue
                records += 1
                try:
                    line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    report.skip("not UTF-8", where, f"byte {exc.start}")
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    report.skip("broken JSON", where, exc.msg)
                    continue
                except RecursionError:
                    report.skip("broken JSON", where, "nested too deeply to parse")
                    continue
                doc = record_to_document(record, where, f"{base}#{lineno}", str(path), report)
                if doc is not None:
                    yield doc
    except EOFError as exc:  # a compressed stream cut short
        report.warn("truncated file", str(path), f"{records} records read before the "
                    f"truncation after line {lineno}; the rest is lost ({exc})")
    except (OSError, zlib.error) as exc:
        if trusted is not None and dropped:
            report.skip("damaged gzip member", str(path),
                        f"{dropped} records from decompressed byte {trusted} on were dropped: "
                        f"their gzip member failed its check ({exc}); {records} records "
                        "before it were read; anything after it is lost", count=dropped)
        else:
            _damaged(report, path, records, f"line {lineno}", exc)


def _damaged(report: IngestReport, path: Path, records: int, at: str, exc: BaseException) -> None:
    """A file that failed part way: a warning if records were read before, else a skip."""
    if records:
        report.warn("corrupt file", str(path), f"{records} records read before the damage "
                    f"after {at}; the rest is lost ({exc})")
    else:
        report.skip("unreadable file", str(path), str(exc))


def _read_parquet(path: Path, root: Path, report: IngestReport,
                  options: ReadOptions | None = None) -> Iterator[Document]:
    import pyarrow.parquet as pq

    from gpurag.ingest.formats.tables import no_text_column, pick_columns

    options = options or ReadOptions()
    base = _doc_id_for_path(path, root)
    row = 0
    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        text_col, id_col, title_col = pick_columns(names, options)
        if text_col is None:
            no_text_column(report, path, names, options)
            return
        wanted = {text_col: "text", id_col: "id", title_col: "title"}
        wanted.pop(None, None)
        for batch in pf.iter_batches(batch_size=8192, columns=list(wanted)):
            batch = batch.rename_columns([wanted[n] for n in batch.schema.names])
            for record in batch.to_pylist():
                row += 1
                where = f"{path}:row {row}"
                doc = record_to_document(record, where, f"{base}#{row}", str(path), report)
                if doc is not None:
                    yield doc
    except Exception as exc:
        _damaged(report, path, row, f"row {row}", exc)


def iter_documents(source: str | Path, report: IngestReport | None = None,
                   follow_outside_links: bool = False, *,
                   options: ReadOptions | None = None,
                   on_file: Callable[[int], None] | None = None) -> Iterator[Document]:
    """Yield every good document under ``source``, streaming (no file is loaded whole except
    one-document files: text, PDF, HTML, DOCX). A document whose id was already used is
    skipped (the first one is kept); a link leading outside a source folder is skipped unless
    ``follow_outside_links``. ``options``: the text column of CSV and Parquet files."""
    from gpurag.ingest.formats import read_format, read_unsupported

    report = report if report is not None else IngestReport()
    options = options or ReadOptions()
    src = Path(source)
    root = src if src.is_dir() else src.parent
    readers = {"text": _read_text_file, "jsonl": _read_jsonl,
               "parquet": lambda p, r, rep: _read_parquet(p, r, rep, options),
               "format": lambda p, r, rep: read_format(p, r, rep, options),
               None: read_unsupported}
    files, _ = scan_inputs(src, report, follow_outside_links)
    seen: set[str] = set()
    for i, path in enumerate(files):
        if on_file is not None:
            on_file(i)
        report.files += 1
        for doc in readers[_suffix_kind(path)](path, root, report):
            if doc.doc_id in seen:
                report.skip("duplicate id", doc.where or doc.source,
                            f"id {doc.doc_id!r} was already used; the first document is kept")
                continue
            seen.add(doc.doc_id)
            report.documents += 1
            yield doc


def source_fingerprint(source: str | Path, follow_outside_links: bool = False) -> str:
    """What a resume must read again: each input file's name under ``source``, size and
    content digest. Content, not modification times: a corpus copied, restored or checked out
    again (new mtimes, same bytes) still resumes; one byte changed does not."""
    return fingerprint_of_files(source_files(source, follow_outside_links))


def source_files(source: str | Path, follow_outside_links: bool = False) -> list[list[str]]:
    """Each input file under ``source``, in reading order: ``[name, content digest]``."""
    src = Path(source)
    root = src if src.is_dir() else src.parent
    return [[_doc_id_for_path(path, root), file_digest(path)]
            for path in list_input_files(src, follow_outside_links)]


def fingerprint_of_files(files: list[list[str]]) -> str:
    """:func:`source_fingerprint` of the :func:`source_files` list ``files``."""
    h = hashlib.sha256()
    for name, digest in files:
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()[:16]


_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}
_MAX_DIGESTS = 100_000


def file_digest(path: Path, block: int = 1 << 20) -> str:
    """BLAKE2b of a file's bytes: one read pass (about 1 GB/s), remembered for the process's
    life per path, inode, size, mtime and ctime (any write changes the ctime, which no one can
    set back). A file that cannot be read gets a marker instead (ingest skips and reports it)."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    memo = (str(path.absolute()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if memo not in _DIGESTS:
        h = hashlib.blake2b(digest_size=16)
        try:
            with open(path, "rb") as fh:
                while chunk := fh.read(block):
                    h.update(chunk)
        except OSError as exc:
            return f"unreadable:{exc.errno}"
        if len(_DIGESTS) >= _MAX_DIGESTS:
            _DIGESTS.clear()
        _DIGESTS[memo] = f"{st.st_size}:{h.hexdigest()}"
    return _DIGESTS[memo]
