"""LLM side of gpurag: OpenAI-compatible client with cache, vLLM launcher, prompts, answers.

Everything that talks to a model goes through ``LLMClient`` in batches; see ``client.py``.
"""

from __future__ import annotations

from gpurag.llm.cache import ResponseCache, cache_key
from gpurag.llm.client import ChatRequest, ChatResult, LLMClient, LLMError, Usage
from gpurag.llm.config import LLMConfig
from gpurag.llm.jsonrepair import JSONRepairError, parse_json, repair_json

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
