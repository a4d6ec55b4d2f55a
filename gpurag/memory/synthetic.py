"""Synthetic multi-session dialogues for tuning agent memory (no model, seeded templates).

Each conversation is two speakers over dated sessions. Facts about people (family, a
teacher or colleague reached through a pronoun chain), places (home address, a city moved to),
and events (told with relative dates: "yesterday", "last week") are scattered over sessions
between filler turns; some attributes are updated later in paraphrase ("We moved house! The
new address is ..."). Questions come in four kinds with their evidence turns as gold:

- ``single``: one fact ("What instrument does Maya play?");
- ``multi``: a chain over turns or sessions ("Where does Ana's daughter's violin teacher
  teach?", "Which hobby do Ana and Ben share?");
- ``temporal``: when an event happened (relative date resolved by the session date), or an
  attribute's value before its update;
- ``open``: a paraphrase needing an inference from a fact ("Would Ana enjoy a mountain trip?").

Passages are single turns, ``{"id": "c3:D2:5", "title": "c3 session 2", "text": "Time:
20230508_14:00\\nAna: ..."}`` (the LoCoMo dialogue-id style), questions the shared format.
``python -m gpurag.memory.synthetic OUT [--conversations N] [--seed S]`` writes both.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIRST = ["Ana", "Ben", "Carla", "Dev", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas",
         "Kavya", "Luca", "Mira", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara",
         "Uma", "Viktor", "Wen", "Yusuf", "Zoe", "Aria", "Bruno", "Chen", "Dalia", "Emil",
         "Farah", "Gideon", "Hana", "Ivo", "Jana", "Kofi", "Lila", "Mateo", "Nils", "Oona",
         "Pavel", "Rhea", "Soren", "Tomas", "Vera", "Willa", "Xavi", "Yara", "Zeno", "Amara"]
CHILD = ["Maya", "Noor", "Iris", "Lena", "Sofia", "Leo", "Theo", "Kai", "Milo", "Arlo"]
TEACHER = ["Okafor", "Lindqvist", "Moreau", "Tanaka", "Brennan", "Haddad", "Kowalski",
           "Esposito", "Nakamura", "Osei"]
SCHOOL = ["Westfield School", "Riverside Academy", "Oakmont Conservatory", "Hillcrest School",
          "Lakeview Music Hall", "Bramble Arts Centre", "Northgate Academy", "Elmwood School"]
INSTRUMENT = ["violin", "piano", "cello", "flute", "guitar", "drums", "trumpet", "harp"]
STREET = ["Oak Street", "Elm Road", "Maple Avenue", "Birch Lane", "Cedar Court", "Pine Way",
          "Willow Drive", "Aspen Place", "Linden Row", "Hawthorn Close"]
TOWN = ["Springfield", "Riverton", "Fairview", "Lakeside", "Millbrook", "Ashford", "Brookdale",
        "Clearwater", "Greenville", "Kingsport"]
CITY = ["Lisbon", "Montreal", "Osaka", "Nairobi", "Melbourne", "Denver", "Krakow", "Seville",
        "Bergen", "Valparaiso"]
JOB = [("nurse", "St. Mary's Hospital"), ("accountant", "Bright Ledger"),
       ("software engineer", "Nimbus Labs"), ("chef", "Copper Pot Bistro"),
       ("architect", "Arcline Studio"), ("librarian", "Central Library"),
       ("pharmacist", "Greenleaf Pharmacy"), ("teacher", "Summit High")]
PET = [("dog", "Biscuit"), ("cat", "Pepper"), ("parrot", "Kiwi"), ("rabbit", "Clover"),
       ("dog", "Rocket"), ("cat", "Mochi"), ("tortoise", "Sheldon"), ("dog", "Juniper")]
HOBBY = [("hiking", "I love hiking in the mountains on weekends.",
          "Would {p} enjoy a trip to a national park with trails?", "the outdoors"),
         ("painting", "I've been painting watercolours every evening.",
          "Would {p} like a gift of art supplies?", "art"),
         ("baking", "Baking sourdough bread is my favourite way to relax.",
          "Would {p} appreciate a cookbook about bread?", "cooking"),
         ("chess", "I play chess at the club every Thursday.",
          "Would {p} enjoy a strategy board game night?", "games"),
         ("swimming", "I swim laps at the pool before work.",
          "Would {p} like a membership at an aquatic centre?", "water sports"),
         ("gardening", "My tomatoes and roses are thriving in the garden.",
          "Would {p} value a set of pruning shears?", "plants"),
         ("birdwatching", "I spotted a heron on my birdwatching walk.",
          "Would {p} enjoy binoculars as a present?", "wildlife"),
         ("pottery", "I made a new bowl at my pottery class.",
          "Would {p} like a visit to a ceramics studio?", "crafts")]
EVENT = [("ran a half marathon", "in {city}", "run the half marathon"),
         ("adopted a {pet}", "from the shelter", "adopt the {pet}"),
         ("went to a jazz concert", "downtown", "go to the jazz concert"),
         ("started a pottery course", "at the community centre", "start the pottery course"),
         ("visited my grandmother", "in {town}", "visit the grandmother"),
         ("gave a talk at a conference", "in {city}", "give the conference talk"),
         ("went camping", "by the lake", "go camping"),
         ("passed my driving test", "on the first try", "pass the driving test")]
RELATIVE = [("yesterday", 1), ("two days ago", 2), ("last week", 7), ("three days ago", 3),
            ("last weekend", None), ("this morning", 0)]
FILLER = ["How have you been lately?", "That sounds wonderful!", "Oh really? Tell me more.",
          "Haha, that's so true.", "I hope the week treats you well.",
          "Thanks for asking, things are busy but good.", "Wow, I didn't expect that!",
          "Let's catch up again soon.", "I totally understand how you feel.",
          "That reminds me of something.", "Good luck with everything!", "Same here, honestly."]
STAMP = "%Y%m%d_%H:%M"


@dataclass
class Conversation:
    """The turns of one conversation, by session, and the questions asked about it."""

    cid: str
    turns: list[list[tuple[str, str]]] = field(default_factory=list)  # session -> (spk, text)
    dates: list[dt.datetime] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)

    def say(self, session: int, speaker: str, text: str) -> str:
        """Append a turn; returns its passage id."""
        self.turns[session].append((speaker, text))
        return f"{self.cid}:D{session + 1}:{len(self.turns[session])}"


def _weekend_before(day: dt.datetime) -> dt.datetime:
    back = (day.weekday() - 5) % 7 or 7  # the Saturday before
    return day - dt.timedelta(days=back)


def conversation(cid: str, rng: random.Random, n_sessions: int,
                 speakers: tuple[str, str]) -> Conversation:
    """One two-speaker conversation with its questions."""
    a, b = speakers
    conv = Conversation(cid)
    day = dt.datetime(2023, 1, 1) + dt.timedelta(days=rng.randrange(0, 300))
    for _ in range(n_sessions):
        day = day + dt.timedelta(days=rng.randrange(3, 25), hours=rng.randrange(0, 5))
        conv.dates.append(day.replace(hour=rng.choice((9, 11, 14, 17, 19)), minute=0))
        conv.turns.append([])
    # facts to tell, each (session, speaker, [(text, key)]) placed in sessions later
    plans: list[tuple[int, str, list[str], Any]] = []
    q: list[dict[str, Any]] = conv.questions

    def place(session: int, speaker: str, lines: list[str]) -> list[str]:
        ids = []
        for line in lines:
            if rng.random() < 0.5:  # the other speaker reacts between chain turns
                conv.say(session, b if speaker == a else a, rng.choice(FILLER))
            ids.append(conv.say(session, speaker, line))
        return ids

    sessions = list(range(n_sessions))
    for person in (a, b):
        other = b if person == a else a
        # pronoun / possessive chain: my daughter X plays Y / her teacher is Mr. T / he teaches at S
        child, teacher, school, instr = (rng.choice(CHILD), rng.choice(TEACHER),
                                         rng.choice(SCHOOL), rng.choice(INSTRUMENT))
        kid = rng.choice(("daughter", "son"))
        pro, obj = ("Her", "she") if kid == "daughter" else ("His", "he")
        child = rng.choice(CHILD[:5] if kid == "daughter" else CHILD[5:])
        s = rng.choice(sessions[: max(1, n_sessions // 2)])
        plans.append((s, person, [
            f"My {kid} {child} started {instr} lessons this month.",
            f"{pro} teacher is Mr. {teacher}, {obj} adores him.",
            f"He teaches at {school} on weekdays."],
            lambda ids, p=person, c=child, k=kid, i=instr, sc=school, t=teacher: [
                {"question": f"What instrument does {p}'s {k} play?", "answer": i,
                 "gold_ids": ids[:1], "type": "single"},
                {"question": f"Where does {p}'s {k}'s {i} teacher teach?", "answer": sc,
                 "gold_ids": ids, "type": "multi"},
                {"question": f"What is the name of {c}'s {i} teacher?",
                 "answer": f"Mr. {t}", "gold_ids": ids[:2], "type": "single"}]))
        # address, later updated in paraphrase
        n1, n2 = rng.randrange(2, 99), rng.randrange(2, 99)
        st1, st2 = rng.sample(STREET, 2)
        town = rng.choice(TOWN)
        s1 = rng.choice(sessions[: max(1, n_sessions // 2)])
        s2 = rng.choice(sessions[n_sessions // 2 + 1:] or [n_sessions - 1])
        old = f"{n1} {st1}"
        new = f"{n2} {st2}"
        plans.append((s1, person, [f"My home address is {old}, {town}, if you want to send "
                                   "the invitation."], None))
        moved = rng.choice([f"We moved house! The new address is {new}.",
                            f"Big news: we relocated, you can find us at {new} now.",
                            f"We finally settled into our new place on {new}."])
        plans.append((s2, person, [moved], ("address", old, new)))
        # job (single) and pet (single, open)
        job, employer = rng.choice(JOB)
        plans.append((rng.choice(sessions), person,
                      [f"I work as a {job} at {employer}, the shifts are long."],
                      lambda ids, p=person, j=job, e=employer: [
                          {"question": f"What does {p} do for a living?", "answer": j,
                           "gold_ids": ids, "type": "single"},
                          {"question": f"Where is {p} employed?", "answer": e,
                           "gold_ids": ids, "type": "single"}]))
        kind, pet = rng.choice(PET)
        plans.append((rng.choice(sessions), person,
                      [f"Our {kind} {pet} chewed my slippers again."],
                      lambda ids, p=person, k=kind, n=pet: [
                          {"question": f"What is the name of {p}'s {k}?", "answer": n,
                           "gold_ids": ids, "type": "single"}]))
        # hobby: open-domain question, and a shared hobby (multi) below
        hobby = rng.choice(HOBBY)
        plans.append((rng.choice(sessions), person, [hobby[1]],
                      lambda ids, p=person, h=hobby: [
                          {"question": h[2].format(p=p), "answer": f"yes, {p} likes {h[0]}",
                           "gold_ids": ids, "type": "open"}]))
        # events with relative dates: temporal questions
        for event in rng.sample(EVENT, 2):
            what, where, ask = event
            kind2, _ = rng.choice(PET)
            where = where.format(city=rng.choice(CITY), town=rng.choice(TOWN))
            rel, back = rng.choice(RELATIVE)
            s = rng.choice(sessions)
            plans.append((s, person, [f"Guess what, {rel} I {what.format(pet=kind2)} {where}!"],
                          ("event", person, ask.format(pet=kind2), rel, back, s)))
        del other
    # shared hobby (multi): both speakers mention the same hobby in different sessions
    shared = rng.choice(HOBBY)
    sa, sb = rng.sample(sessions, 2)
    plans.append((sa, a, [f"Lately {shared[0]} has become my thing."], None))
    plans.append((sb, b, [f"You know what I picked up? {shared[0].capitalize()}!"],
                  ("shared", shared[0], sa)))

    rng.shuffle(plans)
    told: list[tuple[list[str], Any, str]] = []
    for s, speaker, lines, then in sorted(plans, key=lambda p: p[0]):
        for _ in range(rng.randrange(1, 3)):
            conv.say(s, rng.choice((a, b)), rng.choice(FILLER))
        told.append((place(s, speaker, lines), then, speaker))
    every = [i for ids, _, _ in told for i in ids]
    for ids, then, speaker in told:  # questions once every turn is placed
        if callable(then):
            q.extend(then(ids))
        elif isinstance(then, tuple) and then[0] == "address":
            _, old, new = then
            first = [i for i in every if old in _text(conv, i)]
            q.append({"question": f"What is {speaker}'s current home address?", "answer": new,
                      "gold_ids": ids, "type": "single"})
            q.append({"question": f"Where did {speaker} live before moving to {new}?",
                      "answer": old, "gold_ids": first[:1], "type": "temporal"})
        elif isinstance(then, tuple) and then[0] == "event":
            _, who, ask, rel, back, sess = then
            date = conv.dates[sess]
            when = (_weekend_before(date) if back is None else date - dt.timedelta(days=back))
            label = ("the weekend of " if back is None else "") + when.strftime("%d %B %Y")
            q.append({"question": f"When did {who} {ask}?", "answer": label, "gold_ids": ids,
                      "type": "temporal"})
        elif isinstance(then, tuple) and then[0] == "shared":
            first = [i for i in every if "has become my thing" in _text(conv, i)]
            q.append({"question": f"Which hobby do {a} and {b} have in common?",
                      "answer": then[1], "gold_ids": first[:1] + ids, "type": "multi"})
    for s in sessions:
        if not conv.turns[s]:
            conv.say(s, a, rng.choice(FILLER))
        conv.say(s, b, rng.choice(FILLER))
    return conv


def _text(conv: Conversation, pid: str) -> str:
    _, d, t = pid.split(":")
    return conv.turns[int(d[1:]) - 1][int(t) - 1][1]


def generate(n_conversations: int = 10, seed: int = 0, n_sessions: int = 10
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(corpus rows, question rows)`` in the shared evaluation format."""
    rng = random.Random(seed)
    corpus: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    if 2 * n_conversations > len(FIRST):
        raise ValueError(f"at most {len(FIRST) // 2} conversations (unique speakers)")
    names = rng.sample(FIRST, 2 * n_conversations)  # every conversation its own speakers
    for c in range(n_conversations):
        conv = conversation(f"c{c}", rng, n_sessions, (names[2 * c], names[2 * c + 1]))
        for s, turns in enumerate(conv.turns):
            stamp = conv.dates[s].strftime(STAMP)
            for t, (speaker, text) in enumerate(turns, start=1):
                corpus.append({"id": f"{conv.cid}:D{s + 1}:{t}",
                               "title": f"{conv.cid} session {s + 1}",
                               "text": f"Time: {stamp}\n{speaker}: {text}"})
        for item in conv.questions:
            questions.append({"id": str(len(questions)), "question": item["question"],
                              "answer": item["answer"], "answer_aliases": [],
                              "gold_ids": item["gold_ids"], "type": item["type"],
                              "hops": len(item["gold_ids"])})
    return corpus, questions


def write(folder: str | Path, n_conversations: int = 10, seed: int = 0) -> Path:
    """Write ``corpus.jsonl`` and ``questions.jsonl`` into ``folder``."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    corpus, questions = generate(n_conversations, seed)
    for name, rows in (("corpus.jsonl", corpus), ("questions.jsonl", questions)):
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--conversations", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = write(args.out, args.conversations, args.seed)
    print(f"wrote {out}/corpus.jsonl and questions.jsonl")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
