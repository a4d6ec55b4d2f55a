"""The ``memory`` mode of ``gpurag eval`` and ``gpurag memory eval`` on a tiny chat dataset."""

from __future__ import annotations

import json

from gpurag.cli import main

SESSIONS = {
    "20260101_0900": ("20260101_09:00", ["LiHua: Wolfgang, shall we watch Star Wars tonight?",
                                         "Wolfgang: Yes! Meet me at Cinema Nova at eight."]),
    "20260105_1200": ("20260105_12:00", ["AdamSmith: The basement renovation starts Monday.",
                                         "LiHua: Great, I will clear my guitar from there."]),
    "20260110_1800": ("20260110_18:00", ["Yuriko: My bakery Sweet Crumb opens in March.",
                                         "LiHua: I will bring Wolfgang to the opening."]),
    "20260120_1000": ("20260120_10:00", ["JenniferMoore: The yoga class moved to Fridays.",
                                         "LiHua: Thanks Jennifer, Friday works for me."]),
}
QUESTIONS = [
    ("1", "Where did Wolfgang want to meet Li Hua to watch Star Wars?", ["20260101_0900"]),
    ("2", "What does Li Hua keep in the basement that Adam Smith renovates?", ["20260105_1200"]),
    ("3", "What is the name of Yuriko's bakery?", ["20260110_1800"]),
    ("4", "When is Jennifer Moore's yoga class now?", ["20260120_1000"]),
    ("5", "Did Li Hua bring Wolfgang to a bakery opening after they watched Star Wars?",
     ["20260101_0900", "20260110_1800"]),
    ("6", "What colour is Adam Smith's car?", []),
]


def _dataset(root):
    root.mkdir()
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for sid, (stamp, lines) in SESSIONS.items():
            text = "\n".join([f"Time: {stamp}", *lines])
            fh.write(json.dumps({"id": sid, "title": "week1", "text": text}) + "\n")
    with open(root / "questions.jsonl", "w", encoding="utf-8") as fh:
        for qid, q, gold in QUESTIONS:
            fh.write(json.dumps({"id": qid, "question": q, "answer": "", "gold_ids": gold,
                                 "type": "Multi" if len(gold) > 1 else "Single",
                                 "hops": len(gold)}) + "\n")
    return root


def test_memory_mode_in_gpurag_eval(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    ds = _dataset(tmp_path / "chat")
    out = tmp_path / "res.json"
    rc = main(["-q", "eval", str(ds), "--modes", "bm25,memory", "--index",
               str(tmp_path / "idx"), "--json", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert "memory" in result["modes"], result["unavailable"]
    assert result["modes"]["memory"]["all_gold@8"] == 1.0
    assert result["modes"]["memory"]["recall@2"] >= 0.75
    assert (tmp_path / "idx.memory" / "memory.json").exists()  # kept beside the index


def test_memory_eval_command_reports_cv_and_abstention(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    ds = _dataset(tmp_path / "chat")
    out = tmp_path / "cv.json"
    rc = main(["-q", "memory", "eval", str(ds), "--memory", str(tmp_path / "mem"), "--folds",
               "2", "--json", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["cross_validation"]["folds"] == 2
    assert 0 <= result["cross_validation"]["cv"]["recall@5"] <= 1
    assert result["abstention"]["n_unanswerable"] == 1
    assert "abstention" in capsys.readouterr().out
