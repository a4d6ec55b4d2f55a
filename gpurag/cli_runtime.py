"""The runtime a command line builds (shared by ``gpurag`` and its sub-commands, below both)."""

from __future__ import annotations

import argparse


def make_runtime(args: argparse.Namespace):
    """The one runtime of this command: device and progress from the environment and
    ``--quiet``, LLM settings from ``GPURAG_LLM_*`` and the ``--llm-*`` options."""
    from gpurag.llm.cli import config_from_args
    from gpurag.runtime import Runtime

    return Runtime.create(progress=False if getattr(args, "quiet", False) else None,
                          llm=config_from_args(args))
