"""LLM side of gpurag: OpenAI-compatible client with cache, vLLM launcher, prompts, answers.

Everything that talks to a model goes through ``LLMClient`` in batches; see ``client.py``.

The names below load on first use, so ``gpurag`` commands that never talk to a model (the
command line imports :mod:`gpurag.llm.cli` to list its subcommands and options) do not load
the HTTP client (httpx, which also loads rich and click) or the JSON repair."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpurag.llm.cache import ResponseCache, cache_key
    from gpurag.llm.client import ChatRequest, ChatResult, LLMClient, LLMError, Usage
    from gpurag.llm.config import LLMConfig
    from gpurag.llm.jsonrepair import JSONRepairError, parse_json, repair_json

_WHERE = {"ResponseCache": "gpurag.llm.cache", "cache_key": "gpurag.llm.cache",
          "ChatRequest": "gpurag.llm.client", "ChatResult": "gpurag.llm.client",
          "LLMClient": "gpurag.llm.client", "LLMError": "gpurag.llm.client",
          "Usage": "gpurag.llm.client", "LLMConfig": "gpurag.llm.config",
          "JSONRepairError": "gpurag.llm.jsonrepair", "parse_json": "gpurag.llm.jsonrepair",
          "repair_json": "gpurag.llm.jsonrepair"}
__all__ = [
    "ChatRequest",
    "ChatResult",
    "JSONRepairError",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "ResponseCache",
    "Usage",
    "cache_key",
    "parse_json",
    "repair_json",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'gpurag.llm' has no attribute {name!r}")
