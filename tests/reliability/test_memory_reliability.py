"""Issue 28, memory items: damaged records are kept aside, never dropped (2); search output is
escaped (18); a second writer waits for the lock (19); re-adding a corpus adds only what is
missing (20)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from gpurag.cli import main
from gpurag.errors import IndexBusyError
from gpurag.memory import Memory
from gpurag.memory.corpus import corpus_traces

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["Alice Park met Bob Stone in Oslo.", "Bob Stone moved to Bergen.",
         "Carol Reed teaches violin at Westfield School."]


def _memory(path: Path) -> None:
    with Memory.create(path) as mem:
        mem.add_many([{"text": t, "session": "s", "turn": i, "time": 100 + i}
                      for i, t in enumerate(TEXTS)])


def _damage_last_line(path: Path, old: bytes, new: bytes) -> bytes:
    data = (path / "log.jsonl").read_bytes()
    lines = data.split(b"\n")
    assert old in lines[-2]
    lines[-2] = lines[-2].replace(old, new, 1)
    (path / "log.jsonl").write_bytes(b"\n".join(lines))
    return lines[-2]


@pytest.mark.parametrize("old,new", [(b"Westfield", b"Wastfield"),  # still JSON: the CRC
                                     (b'"text"', b'"t\xffxt"')])  # no longer a record
def test_damaged_last_complete_record_is_reported_quarantined_never_dropped(tmp_path, old, new,
                                                                            capsys):
    path = tmp_path / "mem"
    _memory(path)
    damaged = _damage_last_line(path, old, new)
    size = (path / "log.jsonl").stat().st_size

    with Memory.open(path, readonly=True) as mem:  # reported on a read-only open
        info = mem.info()
        assert info["traces"] == 3 and info["damaged_traces"] == 1
        assert info["damaged"][0]["id"] == 2 and info["damaged"][0]["line"] == 3
        hits = mem.search("Who teaches violin at Westfield School?", k=3).hits
        assert 2 not in [h.id for h in hits]  # a placeholder is never returned
    assert main(["memory", "info", str(path)]) == 0
    assert "damaged_traces    1" in capsys.readouterr().out

    with Memory.open(path) as mem:  # a writable open keeps it and quarantines a copy
        assert mem.add("Dana Wu joined the choir.", session="s", turn=3, time=104) == 3
    data = (path / "log.jsonl").read_bytes()
    assert damaged + b"\n" in data and len(data) > size  # still on disk, nothing cut
    quarantined = [json.loads(x) for x in (path / "quarantine.jsonl").read_bytes().splitlines()]
    assert len(quarantined) == 1
    assert base64.b64decode(quarantined[0]["raw"]) == damaged
    assert quarantined[0]["line"] == 3 and quarantined[0]["id"] == 2

    with Memory.open(path) as mem:  # reopening neither duplicates the copy nor loses anything
        assert mem.texts[:2] == TEXTS[:2] and mem.texts[3] == "Dana Wu joined the choir."
        assert mem.info()["damaged_traces"] == 1
        assert mem.search("Who joined the choir?", k=1).hits[0].id == 3
    assert len((path / "quarantine.jsonl").read_bytes().splitlines()) == 1


def test_a_newline_inside_a_record_keeps_later_ids_aligned(tmp_path):
    path = tmp_path / "mem"
    _memory(path)
    with Memory.open(path) as mem:
        mem.add("Dana Wu joined the choir.", session="s", turn=3, time=104)
    data = (path / "log.jsonl").read_bytes()
    (path / "log.jsonl").write_bytes(data.replace(b"moved to", b"moved\nto", 1))
    with Memory.open(path) as mem:
        assert len(mem) == 4
        assert mem.texts[0] == TEXTS[0] and mem.texts[2] == TEXTS[2]
        assert mem.texts[3] == "Dana Wu joined the choir."
        assert [d.id for d in mem.log.damaged] == [1, 1]


def test_torn_tail_is_cut_but_kept_in_quarantine(tmp_path):
    path = tmp_path / "mem"
    _memory(path)
    with open(path / "log.jsonl", "ab") as fh:
        fh.write(b'{"id": 3, "text": "half a rec')
    with Memory.open(path) as mem:
        assert len(mem) == 3 and mem.info()["damaged_traces"] == 0
    (q,) = [json.loads(x) for x in (path / "quarantine.jsonl").read_bytes().splitlines()]
    assert base64.b64decode(q["raw"]) == b'{"id": 3, "text": "half a rec'
    assert "torn" in q["reason"]


def test_memory_search_escapes_terminal_control_characters(tmp_path, capsys):
    path = tmp_path / "mem"
    with Memory.create(path) as mem:
        mem.add("Alice Park likes \x1b[2J\x1b]0;pwned\x07 tea in Oslo.", session="s\x1b[31m",
                turn=0, time=1)
    assert main(["memory", "search", str(path), "What does Alice Park like?", "-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J" in out and "s\\x1b[31m/0" in out


WAITER = textwrap.dedent("""
    import sys
    from gpurag.cli import main
    print("ready", flush=True)
    sys.exit(main(["memory", "add", sys.argv[1], "Erin Cho visited Tromso.", "--session", "w",
                   "--turn", "0", "--time", "2026-04-01T10:00:00"]))
""")


def test_second_concurrent_add_waits_for_the_lock(tmp_path):
    path = tmp_path / "mem"
    _memory(path)
    holder = Memory.open(path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", WAITER, str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        threading.Event().wait(0.5)  # the child reaches the lock while it is held
        holder.add("Frank Olsen sold the boat.", session="h", turn=0, time=400)
        holder.close()
        out, err = child.communicate(timeout=120)
    finally:
        holder.close()
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert "added 1 trace(s)" in out
    with Memory.open(path, readonly=True) as mem:
        assert mem.texts[-2:] == ["Frank Olsen sold the boat.", "Erin Cho visited Tromso."]


def test_lock_wait_is_bounded_by_the_timeout(tmp_path, capsys):
    path = tmp_path / "mem"
    _memory(path)
    with Memory.open(path):
        with pytest.raises(IndexBusyError, match=rf"pid {os.getpid()}.*after waiting 0.2 s"):
            Memory.open(path, lock_timeout=0.2)
        assert main(["memory", "add", str(path), "x", "--lock-timeout", "0"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "still open for writing" in err
    with Memory.open(path, lock_timeout=0) as mem:  # released: no wait needed
        assert len(mem) == 3


def _corpus(path: Path) -> Path:
    rows = []
    for d in range(6):
        turns = "\n".join(f"Person{d}: Session {d} line {t} about Alice Park and Oslo."
                          for t in range(5))
        rows.append({"id": f"2026040{d + 1}", "text": f"Time: 2026040{d + 1}_09:00\n{turns}"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_readding_a_corpus_after_a_kill_adds_only_what_is_missing(tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus.jsonl")
    traces = list(corpus_traces(corpus))
    path = tmp_path / "mem"
    with Memory.create(path) as mem:  # what a run killed after its first batches left behind
        mem.add_many(traces[:13])
    assert main(["memory", "add", str(path), "--corpus", str(corpus)]) == 0
    assert "added 17 trace(s)" in capsys.readouterr().out
    assert main(["memory", "add", str(path), "--corpus", str(corpus)]) == 0
    assert "added nothing, 30 already present" in capsys.readouterr().out
    with Memory.open(path, readonly=True) as mem:
        assert len(mem) == 30
        assert mem.texts == [t["text"] for t in traces]
        hits = mem.search("What did Person3 say in session 3 line 2?", k=3).hits
        assert len({h.text for h in hits}) == 3  # no trace three times


def test_explicit_keys_and_live_adds(tmp_path):
    path = tmp_path / "mem"
    with Memory.create(path) as mem:
        a = mem.add_many([{"text": "Gina Holt likes jazz.", "key": "msg-1"},
                          {"text": "Gina Holt likes jazz.", "key": "msg-2"}])
        assert a == [0, 1]  # same text, different keys: two traces
        assert mem.add_many([{"text": "changed text", "key": "msg-1"}]) == [0]
        # live adds without a session and time carry no key: saying a thing twice is kept
        assert mem.add("ok") == 2 and mem.add("ok") == 3
    with Memory.open(path) as mem:  # keys persist
        assert mem.add_many([{"text": "Gina Holt likes jazz.", "key": "msg-2"}]) == [1]
        assert len(mem) == 4


def test_time_given_as_epoch_seconds_text(tmp_path):
    from gpurag.memory.log import parse_time

    assert parse_time("500", "t") == 500.0 and parse_time("1700000000.5", "t") == 1700000000.5
    assert parse_time("20260408", "t") == parse_time("2026-04-08", "t")  # still a date
    with pytest.raises(Exception, match="not a number"):
        parse_time("nan", "t")
