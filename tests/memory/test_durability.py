"""An acknowledged append survives SIGKILL; a torn, unacknowledged write is cut off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from gpurag.memory import Memory

CHILD = textwrap.dedent("""
    import sys
    from gpurag.memory import Memory
    mem = Memory.create(sys.argv[1])
    i = 0
    while True:
        tid = mem.add(f"Trace number {i} by Alice Park about Oslo Market.", session=f"s{i % 3}",
                      turn=i, time=1000 + i)
        print(tid, flush=True)  # acknowledged: add returned
        i += 1
""")


def test_sigkill_after_acknowledged_append_loses_nothing(tmp_path):
    path = tmp_path / "mem"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                             env=env, text=True)
    acked = []
    try:
        while len(acked) < 5:
            line = child.stdout.readline()
            assert line, "the writer died before acknowledging 5 traces"
            acked.append(int(line))
        child.send_signal(signal.SIGKILL)  # right after an acknowledged append
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    with Memory.open(path) as mem:
        assert len(mem) >= len(acked)
        for tid in acked:
            assert mem.texts[tid] == f"Trace number {tid} by Alice Park about Oslo Market."
        last = acked[-1]
        assert mem.search(f"Trace number {last}", k=len(mem)).hits  # readable and searchable


def test_torn_unacknowledged_write_is_cut_off(tmp_path):
    path = tmp_path / "mem"
    with Memory.create(path) as mem:
        mem.add("Alice Park met Bob Stone.", session="a", turn=0, time=1)
    with open(path / "log.jsonl", "ab") as fh:
        fh.write(b'{"id": 1, "text": "half a rec')
    with open(path / "vectors.f32", "ab") as fh:
        fh.write(b"\0" * 384 * 4)
    with Memory.open(path) as mem:
        assert len(mem) == 1
        assert mem.add("Bob Stone met Carol Reed.", session="a", turn=1, time=2) == 1
    with Memory.open(path) as mem:
        assert mem.texts == ["Alice Park met Bob Stone.", "Bob Stone met Carol Reed."]
