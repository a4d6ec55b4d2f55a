"""Questions embedded in a batch (sorted by token length, padded per length bucket) get the
vectors each gets alone, to the bit: the query path embeds a batch at once, and a question's
ranks must not depend on its batch-mates."""

from __future__ import annotations

import numpy as np

from gpurag.backends.embed import load_embedder
from gpurag.embed.onnx_minilm import LENGTH_RUN
from gpurag.embed.tokens import length_batches

QUESTIONS = [
    "Who wrote Hamlet?",
    "What is known about Paweł Zarzeczny: of the University of Warsaw. He started his",
    "Which was established first, Kestrel Dynamics Ltd. or Brask & Thorne Shipwrights?",
    "When?",
    "Did J. R. R. Tolkien's Hobbit outsell Back to the Future Part III, and by how many "
    "copies in the first ten years after its publication in the United Kingdom and abroad?",
    "Where are İstanbul Üniversitesi, İzmir Bay and Beyoncé Knowles?",
    "", "1981–82 Lancashire Combination", "a " * 300,
]


def test_a_batch_embeds_each_question_as_it_would_alone():
    embedder = load_embedder("onnx-minilm")
    texts = QUESTIONS * 2 + [q[: len(q) // 2] for q in QUESTIONS]
    alone = np.vstack([embedder.encode([t]) for t in texts])
    for batch_size in (64, 4, 7):  # one bucket, many buckets, the small-batch session
        got = embedder.encode(texts, batch_size=batch_size)
        assert got.dtype == np.float32
        assert np.array_equal(got, alone), batch_size
    shuffled = np.random.default_rng(0).permutation(len(texts))
    assert np.array_equal(embedder.encode([texts[i] for i in shuffled]), alone[shuffled])


def test_a_run_of_one_length_embeds_each_question_as_it_would_alone():
    """Ten questions of one token length and a longer one: with ``length_run`` 8 the run is
    its own unpadded batch, with 0 it is padded to the outlier; both give each text's vector
    alone."""
    embedder = load_embedder("onnx-minilm")
    texts = [f"Who wrote book number {i} of the series?" for i in range(10, 20)] + [
        "Which river flows through the old capital of the northern kingdom, and who built it?"]
    lengths = embedder.model_inputs(texts)[1]
    assert len(set(lengths[:-1].tolist())) == 1 and lengths[-1] > lengths[0]
    assert length_batches(np.sort(lengths), min_run=8) == [(0, 10), (10, 11)]  # run apart
    alone = np.vstack([embedder.encode([t]) for t in texts])
    order = np.random.default_rng(1).permutation(len(texts))
    try:
        for run in (8, 0):
            embedder.length_run = run
            got = embedder.encode([texts[i] for i in order])
            assert np.array_equal(got, alone[order]), run
    finally:
        embedder.length_run = LENGTH_RUN
