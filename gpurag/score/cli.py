"""Placeholder until the scorer CLI lands."""


def add_score_commands(sub) -> None:
    return None
