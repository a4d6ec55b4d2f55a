"""Conversation structure as signals (issue 31): a pronoun chain, a relative date resolved by
the session date, a paraphrased update superseding the old value, a neighbouring turn."""

from __future__ import annotations

import datetime as dt

import pytest

from gpurag.memory import Memory
from gpurag.memory.corpus import group_turns
from gpurag.memory.discourse import Discourse, resolve_dates

FILLER = ["Ben: How was your week?", "Ben: That sounds lovely.", "Ben: Haha, true.",
          "Ben: I went to the cinema.", "Ben: My car needs new tyres."]


def _t(day: int) -> str:
    return f"2023-05-{day:02d}T10:00:00"


@pytest.fixture()
def memory(tmp_path):
    mem = Memory.create(tmp_path / "mem")
    yield mem
    mem.close()


def test_pronoun_chain_reaches_the_turn_naming_the_school(memory):
    rows = ["Ana: My daughter Maya started violin lessons.", FILLER[0],
            "Ana: Her teacher is Mr. Okafor, she adores him.", FILLER[1],
            "Ana: He teaches at Westfield School on weekdays.", FILLER[2]]
    memory.add_many([{"text": t, "session": "s1", "turn": i, "time": _t(1)}
                     for i, t in enumerate(rows)])
    # distractors: other schools, other teachers, in other sessions
    memory.add_many([
        {"text": "Ben: Carla teaches at Riverside Academy.", "session": "s2", "turn": 0,
         "time": _t(2)},
        {"text": "Ben: My nephew Theo goes to Hillcrest School.", "session": "s2", "turn": 1,
         "time": _t(2)},
        {"text": "Ben: The violin shop near Hillcrest School closed.", "session": "s3",
         "turn": 0, "time": _t(3)}])
    # the school turn says only "He": the chain He -> Okafor -> Maya's teacher -> Ana's daughter
    assert memory._expansion[4].split() == ["Mr.", "Okafor", "teacher", "Maya", "daughter",
                                            "Ana"]
    okafor = memory.anchors("Mr. Okafor")
    assert set(okafor.tolist()) <= set(memory.vocab.canonical()[memory._tags[4]].tolist())
    res = memory.search("Where does Ana's daughter's violin teacher teach?", k=3)
    assert 4 in [h.id for h in res.hits][:2], [h.text for h in res.hits]
    without = Discourse()  # the same rule, stated on its own
    without.annotate("Ana: My son Leo plays chess.", "x", 0, 0.0, ["Ana", "Leo"])
    ann = without.annotate("Ana: His coach is Ms. Brandt.", "x", 1, 0.0, ["Ana", "Brandt"])
    assert ann.refs == ["Leo"] and without.chain("Brandt") == ["Brandt", "coach", "Leo", "son",
                                                             "Ana"]


def test_relative_dates_are_resolved_by_the_session_date(memory):
    when = dt.datetime(2023, 5, 8, 14, tzinfo=dt.UTC).timestamp()  # a Monday
    assert resolve_dates("yesterday I ran", when) == ["2023-05-07"]
    assert resolve_dates("three days ago and last week", when) == ["2023-05-05", "2023-05-01"]
    assert resolve_dates("last weekend", when) == ["2023-05-06"]
    assert resolve_dates("last Friday", when) == ["2023-05-05"]
    assert resolve_dates("last month", when) == ["2023-04"]
    memory.add_many([
        {"text": "Ana: Yesterday I ran a half marathon in Lisbon!", "session": "s1", "turn": 0,
         "time": "2023-05-08T14:00:00"},
        {"text": "Ana: I ran a half marathon in Porto last year, it was hot.", "session": "s0",
         "turn": 0, "time": "2022-09-01T10:00:00"},
        *({"text": t, "session": "s1", "turn": i + 1, "time": "2023-05-08T14:00:00"}
          for i, t in enumerate(FILLER))])
    res = memory.search("What did Ana do on 7 May 2023?", k=2)
    assert res.hits[0].id == 0 and res.hits[0].dates == ["2023-05-07"]


@pytest.mark.parametrize("update", [
    "Ana: We moved house! The new address is 5 Elm Road.",
    "Ana: Big news, we relocated: you can find us at 5 Elm Road now.",
    "Ana: We finally settled into our new place on 5 Elm Road."])
def test_paraphrased_update_supersedes_and_the_old_value_stays_retrievable(memory, update):
    memory.add_many([
        {"text": "Ana: My home address is 12 Oak Street, Springfield, for the invitation.",
         "session": "s1", "turn": 0, "time": _t(1)},
        *({"text": t, "session": "s1", "turn": i + 1, "time": _t(1)}
          for i, t in enumerate(FILLER[:3])),
        {"text": update, "session": "s2", "turn": 0, "time": _t(20)},
        *({"text": t, "session": "s2", "turn": i + 1, "time": _t(20)}
          for i, t in enumerate(FILLER[3:]))])
    new = 4
    assert memory.search("What is Ana's home address?", k=3).hits[0].id == new
    assert memory.search("Where does Ana live now?", k=3).hits[0].id == new
    before = memory.search("Where did Ana live before she moved?", k=3).hits
    assert before[0].id == 0 and new in [h.id for h in before]  # old first, new still there


def test_neighbouring_turn_is_reached_as_context(tmp_path):
    rows = [("Ana: The lessons are on Tuesdays.", "s0", 0),  # same words, no context
            ("Ana: Maya practises the violin every evening.", "s1", 0),
            ("Ana: The lessons are on Tuesdays.", "s1", 1)]
    order = {}
    for weight in (0.0, 0.5):
        with Memory.create(tmp_path / f"m{weight}", neighbour=weight, discourse=False) as mem:
            mem.add_many([{"text": t, "session": s, "turn": i, "time": 1} for t, s, i in rows])
            hits = mem.search("When are the violin lessons?", k=3).hits  # no anchor entity
            order[weight] = [h.id for h in hits]
    assert order[0.5].index(2) < order[0.5].index(0), order
    assert order[0.0].index(0) < order[0.0].index(2), order  # without it: a tie, id order


def test_one_turn_passages_are_grouped_into_sessions():
    stamp = "Time: 20230508_14:00\n"
    traces = list(group_turns([
        ("c1:D1:1", stamp + "Ana: Hi!", 0), ("c1:D1:2", stamp + "Ben: Hello.", 1),
        ("c1:D2:1", "Time: 20230601_09:00\nAna: Back again.", 2),
        ("plain", "No time line here.", 3),
        ("conv-2_D1:1", "Ana: Hi!", 4), ("conv-2_D1:2", "Ben: Hello.", 5),
        ("conv-2_D2:1", "Ana: Again.", 6)]))
    assert [(t["session"], t["turn"], t.get("meta", {}).get("doc")) for t in traces] == [
        ("c1:D1", 1, "c1:D1:1"), ("c1:D1", 2, "c1:D1:2"), ("c1:D2", 1, "c1:D2:1"),
        ("plain", 0, None), ("conv-2_D1", 1, "conv-2_D1:1"), ("conv-2_D1", 2, "conv-2_D1:2"),
        ("conv-2_D2:1", 0, None)]  # unstamped and alone: its own passage


def test_an_attribute_question_reaches_the_claim_among_filler(memory):
    rows = ["Chen: Same here, honestly.", "Chen: Oh really? Tell me more.",
            "Chen: I work as a librarian at Central Library, the shifts are long.",
            "Chen: Haha, that's so true.", "Mira: I work as a chef at Copper Pot Bistro."]
    memory.add_many([{"text": t, "session": "s1", "turn": i, "time": _t(1)}
                     for i, t in enumerate(rows)])
    assert memory._claims[2] == [("chen", "job")] and memory._claims[4] == [("mira", "job")]
    assert memory.search("What does Chen do for a living?", k=2).hits[0].id == 2


def test_synthetic_dialogues_are_consistent_and_seeded():
    from gpurag.memory.synthetic import generate

    corpus, questions = generate(3, seed=5)
    assert (corpus, questions) == generate(3, seed=5)
    ids = {r["id"] for r in corpus}
    assert {q["type"] for q in questions} == {"single", "multi", "temporal", "open"}
    assert all(q["gold_ids"] and set(q["gold_ids"]) <= ids for q in questions)
    assert all(r["text"].startswith("Time: ") for r in corpus)
    speakers = [{r["text"].split("\n")[1].split(":")[0] for r in corpus
                 if r["id"].startswith(f"c{c}:")} for c in range(3)]
    assert all(len(s) == 2 for s in speakers) and not speakers[0] & speakers[1]


def test_an_open_after_compaction_reads_the_discourse_and_continues_its_chains(tmp_path):
    from gpurag.memory import derived
    from gpurag.memory.snapshot import read_snapshot

    rows = ["Ana: My daughter Maya started violin lessons.",
            "Ana: I moved house yesterday, my address is 3 Pine Lane.", FILLER[0],
            "Ana: Her teacher is Mr. Okafor, she adores him."]
    with Memory.create(tmp_path / "mem") as mem:
        mem.add_many([{"text": t, "session": "s1", "turn": i, "time": _t(4)}
                      for i, t in enumerate(rows)])
        mem.compact()
        before = (list(mem._expansion), dict(mem._claims), dict(mem._dates),
                  [list(t) for t in mem._tags])
    assert before[1] and before[2]  # a claim and a resolved date to carry over
    _, folder = read_snapshot(tmp_path / "mem" / "compact")
    assert (folder / derived.TABLE).exists()
    with Memory.open(tmp_path / "mem") as mem:
        assert (mem._expansion, mem._claims, mem._dates,
                [list(t) for t in mem._tags]) == before
        assert mem._claim_index == {c: [i] for i, cs in before[1].items() for c in cs}
        # the pronoun of a turn appended after the open reaches the chain read before it
        mem.add("Ana: He teaches at Westfield School.", session="s1", turn=4, time=_t(4))
        assert mem._expansion[4].split()[:3] == ["Mr.", "Okafor", "teacher"]


def _state(mem):
    return (list(mem._expansion), dict(mem._claims), dict(mem._dates), dict(mem._refs),
            list(mem._read), [list(t) for t in mem._tags], list(mem._raw_n),
            mem._discourse.state())


@pytest.mark.parametrize("later", [
    "Ben: Carla Diaz joined the choir.",  # a new name no earlier turn holds: rules not rerun
    "Ben: Okafor Mensah is his full name.",  # "Okafor" now an alias: earlier names change
])
def test_compaction_keeps_the_rules_results_only_when_they_would_read_the_same(tmp_path, later):
    rows = ["Ana: My daughter Maya started violin lessons.",
            "Ana: Her teacher is Okafor, she adores him.",
            "Ana: He teaches at Westfield School, I moved house yesterday.", later]
    with Memory.create(tmp_path / "mem") as mem:
        mem.add_many([{"text": t, "session": "s1", "turn": i, "time": _t(6)}
                      for i, t in enumerate(rows[:3])])
        mem.add(rows[3], session="s1", turn=3, time=_t(6))
        from gpurag.memory import derived

        raws = [mem.vocab.tag(t) for t in mem.texts]
        kept = derived.unchanged(mem._read, mem.texts, mem.vocab.canonical(),
                                 mem.vocab.surfaces, raws)
        assert kept == ("Carla" in later)
        mem.compact()
        fast = _state(mem)
        mem._read = []  # forces the rules to run over every trace again
        mem.compact()
        assert _state(mem) == fast
