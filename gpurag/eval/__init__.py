"""Retrieval evaluation on multi-hop datasets (corpus.jsonl + questions.jsonl)."""
