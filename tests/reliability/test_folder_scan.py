"""The folder scan loses nothing silently (issue 28, items 3 and 21, and the low items on
symbolic-link loops): an unreadable subfolder is reported and counted, a link loop is named as
one (not as a dangling link), and a link leading outside the source folder is refused and
reported unless explicitly allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpurag import Index
from gpurag.cli import _index_config, build_parser
from gpurag.config import IndexConfig
from gpurag.errors import InputError
from gpurag.ingest import IngestReport, iter_documents

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
TEXT = "The harbour of Varnholt was dredged in 1911 and again in 1954. " * 3

SCAN = """
import json, sys
from gpurag.errors import InputError
from gpurag.ingest import IngestReport, iter_documents
report = IngestReport()
try:
    ids = [d.doc_id for d in iter_documents(sys.argv[1], report)]
    error = None
except InputError as exc:
    ids, error = [], str(exc)
print(json.dumps({"ids": ids, "report": report.as_dict(), "error": error}))
"""


def _read(source, **kw) -> tuple[list[str], IngestReport]:
    report = IngestReport()
    return [d.doc_id for d in iter_documents(source, report, **kw)], report


@pytest.fixture
def shared_tmp():
    """A folder an unprivileged user can enter (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="gpurag-scan-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in path.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(path)


def _scan_unprivileged(folder: Path) -> dict:
    """iter_documents over ``folder`` as a user that permissions apply to (root reads every
    folder): in-process when not root, else in a subprocess as ``nobody``."""
    if os.geteuid() != 0:
        ids, report = [], IngestReport()
        try:
            ids, report = _read(folder)
            error = None
        except InputError as exc:
            error = str(exc)
        return {"ids": ids, "report": report.as_dict(), "error": error}
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop privileges")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                          sys.executable, "-c", SCAN, str(folder)],
                         capture_output=True, text=True, env=env, cwd="/")
    if res.returncode != 0:
        pytest.skip(f"cannot run as an unprivileged user: {res.stderr.strip()[-300:]}")
    return json.loads(res.stdout.splitlines()[-1])


def test_unreadable_subfolder_is_reported_and_counted(shared_tmp):
    corpus = shared_tmp / "corpus"
    (corpus / "open").mkdir(parents=True)
    (corpus / "locked").mkdir()
    (corpus / "open" / "a.txt").write_text(TEXT)
    (corpus / "locked" / "b.txt").write_text(TEXT)
    for p in (corpus, corpus / "open"):
        p.chmod(0o755)
    (corpus / "open" / "a.txt").chmod(0o644)
    (corpus / "locked").chmod(0o000)
    out = _scan_unprivileged(corpus)
    assert out["ids"] == ["open/a.txt"]
    assert out["report"]["skipped"] == {"unreadable folder": 1}
    problems = "\n".join(out["report"]["problems"])
    assert f"{corpus / 'locked'}: skipped (unreadable folder): Permission denied" in problems


def test_only_an_unreadable_subfolder_names_it_in_the_error(shared_tmp):
    corpus = shared_tmp / "corpus"
    (corpus / "locked").mkdir(parents=True)
    (corpus / "locked" / "b.txt").write_text(TEXT)
    corpus.chmod(0o755)
    (corpus / "locked").chmod(0o000)
    out = _scan_unprivileged(corpus)
    assert out["error"] is not None and "1 unreadable folders or entries" in out["error"]


def test_a_symlink_loop_is_reported_as_a_loop(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(TEXT)
    (corpus / "self.txt").symlink_to("self.txt")
    (corpus / "ping.txt").symlink_to("pong.txt")
    (corpus / "pong.txt").symlink_to("ping.txt")
    (corpus / "gone.txt").symlink_to("missing.txt")
    ids, report = _read(corpus)
    assert ids == ["a.txt"]
    assert report.warnings == {"symbolic-link loop": 3, "dangling link": 1}
    problems = "\n".join(report.problems)
    assert f"{corpus / 'self.txt'}: symbolic-link loop" in problems
    assert f"{corpus / 'gone.txt'}: dangling link" in problems


def _linked_corpus(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("The vault code of the Harrowmere boathouse is 4417. " * 3)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(TEXT)
    (corpus / "alias.txt").symlink_to("a.txt")  # inside the folder: read
    (corpus / "secret.txt").symlink_to(secret)
    (corpus / "up.txt").symlink_to("../outside/secret.txt")
    return corpus


def test_links_outside_the_folder_are_refused_by_default(tmp_path):
    corpus = _linked_corpus(tmp_path)
    ids, report = _read(corpus)
    assert ids == ["a.txt", "alias.txt"]
    assert report.skipped == {"link outside the folder": 2}
    problems = "\n".join(report.problems)
    assert f"{corpus / 'secret.txt'}: skipped (link outside the folder): points to " \
           f"{tmp_path / 'outside' / 'secret.txt'}" in problems
    assert "--follow-outside-links" in problems


def test_links_outside_the_folder_are_read_when_allowed(tmp_path):
    corpus = _linked_corpus(tmp_path)
    ids, report = _read(corpus, follow_outside_links=True)
    assert ids == ["a.txt", "alias.txt", "secret.txt", "up.txt"]
    assert not report.skipped


def test_the_command_line_flag_allows_outside_links(tmp_path):
    args = build_parser().parse_args(["index", str(tmp_path), "-o", str(tmp_path / "ix"),
                                      "--follow-outside-links"])
    assert _index_config(args).follow_outside_links is True
    args = build_parser().parse_args(["index", str(tmp_path), "-o", str(tmp_path / "ix")])
    assert _index_config(args).follow_outside_links is False


def test_an_outside_link_never_reaches_the_index(tmp_path):
    corpus = _linked_corpus(tmp_path)
    out = tmp_path / "index"
    with Index.build(corpus, out, config=IndexConfig(graph=False), show_progress=False) as ix:
        assert sorted(set(ix.chunks["doc_id"])) == ["a.txt"]  # alias.txt: duplicate chunks
        hits = ix.query("What is the vault code of the boathouse?", k=5, mode="dense")
        assert all("4417" not in p.text for p in hits.passages)
        assert ix.info()["extra"]["ingest"]["skipped"]["link outside the folder"] == 2
