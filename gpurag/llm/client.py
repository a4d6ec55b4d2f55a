"""Async OpenAI-compatible chat client built to keep a batching server (vLLM) saturated.

Every request goes through one semaphore of ``config.concurrency`` slots, so callers may
launch as many coroutines as they like. Responses are looked up in and written to the
content-addressed cache first (a request already answered, on disk or in flight, is never
sent again). Only answers that pass the request's check (by default: JSON, when a schema was
asked for) are cached; a cached answer that fails it is dropped and asked again. Transient
failures (HTTP 408/409/425/429/5xx, connection errors, timeouts, broken responses) are
retried with exponential backoff and jitter. When the server stays unreachable the client
fails the rest of the run fast instead of retrying every request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Self, TypeVar

import httpx

from gpurag.errors import GpuragError
from gpurag.llm.cache import ResponseCache, cache_key
from gpurag.llm.config import LLMConfig
from gpurag.llm.jsonrepair import JSONRepairError, parse_json
from gpurag.llm.pool import ServerPool

log = logging.getLogger("gpurag.llm")

T = TypeVar("T")
R = TypeVar("R")

RETRIABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


@dataclass
class ChatRequest:
    """One chat completion. ``schema`` (a JSON Schema) asks for structured output.

    ``tag`` names the request in logs and errors (a chunk id, a question id).
    ``max_tokens``/``temperature`` ``None`` take the config's values.
    ``validate`` reads an answer and returns its parsed value (kept as ``ChatResult.parsed``)
    or raises ``ValueError``: the answer is then an ``LLMError`` of kind ``malformed`` and is
    never cached. Without it, a request with a ``schema`` must get a JSON object or array.
    """

    messages: list[dict[str, str]]
    schema: dict[str, Any] | None = None
    schema_name: str = "response"
    max_tokens: int | None = None
    temperature: float | None = None
    tag: str = ""
    validate: Callable[[ChatResult], Any] | None = field(default=None, repr=False,
                                                         compare=False)


@dataclass
class ChatResult:
    """The assistant's answer, its token usage, whether it came from the cache, and what the
    request's ``validate`` made of it (``parsed``)."""

    content: str
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    tag: str = ""
    parsed: Any = field(default=None, repr=False, compare=False)

    @property
    def truncated(self) -> bool:
        """The answer stopped at ``max_tokens``."""
        return self.finish_reason == "length"


class LLMError(GpuragError):
    """A request that failed for good. ``kind``: http | timeout | connect | protocol |
    bad_response | malformed (an answer that fails its request's check; ``content`` holds it)
    | unavailable (the server stayed unreachable; the rest of the run fails fast).
    ``reason`` is a short label to group failures by ("HTTP 500", "timeout", "no choices",
    "malformed JSON", ...)."""

    def __init__(self, message: str, *, kind: str, status: int | None = None, tag: str = "",
                 retriable: bool = False, retry_after: float | None = None,
                 reason: str | None = None, content: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.tag = tag
        self.retriable = retriable
        self.retry_after = retry_after
        self.content = content
        self.reason = reason or _REASONS.get(kind, kind)
        if kind == "http" and reason is None:
            self.reason = f"HTTP {status}"

    def __repr__(self) -> str:
        return f"LLMError({self.kind!r}, status={self.status}, tag={self.tag!r}: {self})"


_REASONS = {"timeout": "timeout", "connect": "connection failed",
            "protocol": "broken connection", "bad_response": "bad response",
            "malformed": "malformed answer", "unavailable": "server unreachable"}


@dataclass
class Usage:
    """Counters of one client: network calls, cache hits, tokens, retries, errors."""

    requests: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    saved_prompt_tokens: int = 0
    saved_completion_tokens: int = 0
    retries: int = 0
    errors: int = 0
    dropped_cache_entries: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    network_s: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def snapshot(self) -> dict[str, float]:
        """Counters plus ``elapsed_s`` and token rates since ``started``."""
        out = asdict(self)
        elapsed = max(time.monotonic() - self.started, 1e-9)
        out.pop("started")
        out["elapsed_s"] = elapsed
        out["prompt_tokens_per_s"] = self.prompt_tokens / elapsed
        out["completion_tokens_per_s"] = self.completion_tokens / elapsed
        return out


class LLMClient:
    """Chat completions against ``config.url`` with caching, bounded concurrency and retries.

    Sync callers use ``complete_batch`` (or ``run`` for their own coroutine); async callers use
    ``acomplete``/``acomplete_batch`` and ``await client.aclose()`` at the end.
    ``transport`` replaces the network (tests); ``record`` keeps every payload sent in
    ``self.sent`` (the benchmark replays them).
    """

    def __init__(self, config: LLMConfig | None = None, *, cache: ResponseCache | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, record: bool = False) -> None:
        self.config = config or LLMConfig.from_env()
        if cache is None and self.config.cache_dir:
            cache = ResponseCache(self.config.cache_dir)
        self.cache = cache
        self.usage = Usage()
        self.model = self.config.model
        self.sent: list[dict[str, Any]] | None = [] if record else None
        self._transport = transport
        self._structured = "json_schema" if self.config.structured == "auto" else (
            self.config.structured)
        self._http: httpx.AsyncClient | None = None
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[str, asyncio.Future[ChatResult]] = {}
        self._model_lock: asyncio.Lock | None = None
        self._model_error: LLMError | None = None  # a failed discovery, raised again at once
        self._down: LLMError | None = None
        self.pool = ServerPool(self.config.urls)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (an extractor sent to cluster workers): settings, cache and pool, without
        this process's event-loop state."""
        state = dict(self.__dict__)
        state.update(_http=None, _sem=None, _loop=None, _model_lock=None, _pending={})
        return state

    @property
    def unavailable(self) -> LLMError | None:
        """The connection error that marked the server unreachable in this run, if any."""
        return self._down

    @property
    def structured_mode(self) -> str:
        """How schemas are sent now: json_schema, json_object or off (auto may have switched)."""
        return self._structured

    # -- session -------------------------------------------------------------------------
    def _ensure_session(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            cfg = self.config
            headers = {"Content-Type": "application/json"}
            if cfg.api_key:
                headers["Authorization"] = f"Bearer {cfg.api_key}"
            self._http = httpx.AsyncClient(  # each request names its server (self.pool)
                headers=headers,
                timeout=httpx.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s, pool=None),
                limits=httpx.Limits(max_connections=cfg.concurrency,
                                    max_keepalive_connections=cfg.concurrency),
                transport=self._transport,
            )
            self._sem = asyncio.Semaphore(cfg.concurrency)
            self._model_lock = asyncio.Lock()
            self._pending = {}
            self._loop = loop
        return self._http

    async def aclose(self) -> None:
        """Close the HTTP connections of the current event loop."""
        http, self._http, self._loop = self._http, None, None
        if http is not None:
            await http.aclose()

    def close(self) -> None:
        """Close the cache (HTTP sessions close at the end of each ``run``)."""
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sync entry points ---------------------------------------------------------------
    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn()`` on a fresh event loop with this client's session open.

        Ctrl-C cancels every in-flight request, closes the connections and re-raises
        ``KeyboardInterrupt``; responses received so far are already in the cache.
        """
        self._down = None

        async def main() -> T:
            try:
                return await fn()
            finally:
                await self.aclose()

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:  # called from async code (a notebook): use a loop of our own in a thread
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                return pool.submit(asyncio.run, main()).result()
        with asyncio.Runner() as runner:
            try:
                return runner.run(main())
            except KeyboardInterrupt:
                log.warning("interrupted: cancelled in-flight LLM requests (finished ones are "
                            "cached)")
                raise

    def complete_batch(self, requests: Sequence[ChatRequest],
                       on_result: Callable[[int, ChatResult | LLMError], None] | None = None,
                       ) -> list[ChatResult | LLMError]:
        """Answer a batch; each item is a ``ChatResult`` or the ``LLMError`` that ended it."""
        return self.run(lambda: self.acomplete_batch(requests, on_result))

    def complete(self, request: ChatRequest) -> ChatResult:
        """Answer one request (raises ``LLMError``)."""
        result = self.complete_batch([request])[0]
        if isinstance(result, LLMError):
            raise result
        return result

    def list_models(self) -> list[str]:
        """Model ids the server offers."""
        return self.run(self.amodels)

    # -- async API -----------------------------------------------------------------------
    async def amap(self, fn: Callable[[T], Awaitable[R]], items: Iterable[T],
                   concurrency: int | None = None) -> list[R]:
        """``[await fn(x) for x in items]`` with at most ``concurrency`` running at once."""
        items = list(items)
        results: list[Any] = [None] * len(items)
        width = min(concurrency or self.config.concurrency, len(items))
        position = iter(range(len(items)))

        async def worker() -> None:
            for i in position:
                results[i] = await fn(items[i])

        async with asyncio.TaskGroup() as group:
            for _ in range(width):
                group.create_task(worker())
        return results

    async def acomplete_batch(self, requests: Sequence[ChatRequest],
                              on_result: Callable[[int, ChatResult | LLMError], None] | None = None,
                              ) -> list[ChatResult | LLMError]:
        """Async ``complete_batch``: cached answers return at once, the rest go out in
        parallel (``config.concurrency`` in flight)."""

        async def one(i: int) -> ChatResult | LLMError:
            try:
                result: ChatResult | LLMError = await self.acomplete(requests[i])
            except LLMError as exc:
                result = exc
            if on_result is not None:
                on_result(i, result)
            return result

        return await self.amap(one, range(len(requests)), self.config.concurrency * 2)

    async def amodels(self) -> list[str]:
        """Model ids from ``/v1/models``: one call, bounded by the request timeout, no
        retries (a server that hangs or answers junk there is an error, not a wait)."""
        data = await self._send("GET", "/models", None, "models", retries=0)
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise LLMError(f"{self.config.url}/models did not answer a model list "
                           f"(expected {{\"data\": [{{\"id\": ...}}]}}, got "
                           f"{str(data)[:80]!r})", kind="bad_response", tag="models",
                           reason="no model list")
        return [str(m["id"]) for m in items if isinstance(m, dict) and "id" in m]

    async def aresolve_model(self) -> str:
        """The configured model name, or the server's first model."""
        if self.model:
            return self.model
        if self._model_error is not None:
            raise self._model_error
        self._ensure_session()
        assert self._model_lock is not None
        async with self._model_lock:
            if self._model_error is not None:
                raise self._model_error
            if not self.model:
                try:
                    models = await self.amodels()
                    if not models:
                        raise LLMError("the server lists no models", kind="bad_response",
                                       reason="no models")
                except LLMError as exc:  # once: every later request fails at once with it
                    self._model_error = LLMError(
                        f"cannot find out which model to use from {self.config.url}/models "
                        f"({exc}); name one with --llm-model or GPURAG_LLM_MODEL",
                        kind="unavailable", tag="models", reason="model discovery failed")
                    raise self._model_error from exc
                self.model = models[0]
        return self.model

    def request_key(self, request: ChatRequest, model: str) -> str:
        """The cache key of a request (model + messages + everything that shapes the answer)."""
        return cache_key(model, request.messages, self._params(request))

    async def acomplete(self, request: ChatRequest) -> ChatResult:
        """Answer one request: cache, then in-flight twin, then the server."""
        self._ensure_session()
        model = await self.aresolve_model()
        key = self.request_key(request, model)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                result = _result(hit, cached=True, tag=request.tag)
                try:
                    result.parsed = _validated(request, result)
                except LLMError as exc:  # written before answers were checked: ask again
                    log.info("dropping a malformed cached answer for %s: %s",
                             request.tag or "?", exc)
                    self.cache.delete(key)
                    self.usage.dropped_cache_entries += 1
                else:
                    self.usage.cache_hits += 1
                    self._count_saved(hit)
                    return result
        twin = self._pending.get(key)
        if twin is not None:
            self.usage.deduplicated += 1
            done = await asyncio.shield(twin)
            return dataclasses.replace(done, cached=True, tag=request.tag,
                                       parsed=copy.deepcopy(done.parsed))
        future: asyncio.Future[ChatResult] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            data = await self._send("POST", "/chat/completions", (request, model), request.tag)
            stored = _stored(data, request.tag)
            self.usage.requests += 1
            self.usage.prompt_tokens += stored["usage"]["prompt_tokens"]
            self.usage.completion_tokens += stored["usage"]["completion_tokens"]
            result = _result(stored, cached=False, tag=request.tag)
            result.parsed = _validated(request, result)
            if self.cache is not None:
                self.cache.put(key, stored)
            future.set_result(result)
            return result
        except BaseException as exc:
            if isinstance(exc, LLMError):
                self.usage.errors += 1
                # unavailable: reported once by the caller; malformed: by the caller, which
                # knows what the answer was for
                level = (logging.DEBUG if exc.kind in ("unavailable", "malformed")
                         else logging.WARNING)
                log.log(level, "LLM request %s failed: %s", request.tag or "?", exc)
            if isinstance(exc, Exception):
                future.set_exception(exc)
                future.exception()  # mark retrieved: twins re-raise it themselves
            else:
                future.cancel()
            raise
        finally:
            self._pending.pop(key, None)

    # -- internals -----------------------------------------------------------------------
    def _params(self, request: ChatRequest) -> dict[str, Any]:
        cfg = self.config
        params: dict[str, Any] = {
            "temperature": cfg.temperature if request.temperature is None else request.temperature,
            "max_tokens": cfg.max_tokens if request.max_tokens is None else request.max_tokens,
        }
        if cfg.seed is not None:
            params["seed"] = cfg.seed
        if request.schema is not None and cfg.structured != "off":
            params["schema"] = request.schema
        if cfg.extra_body:
            params["extra_body"] = cfg.extra_body
        return params

    def _payload(self, request: ChatRequest, model: str) -> dict[str, Any]:
        params = self._params(request)
        payload: dict[str, Any] = {"model": model, "messages": request.messages}
        payload.update(copy.deepcopy(self.config.extra_body))
        payload["temperature"] = params["temperature"]
        payload["max_tokens"] = params["max_tokens"]
        if "seed" in params:
            payload["seed"] = params["seed"]
        schema = params.get("schema")
        if schema is not None:
            if self._structured == "json_schema":
                payload["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": request.schema_name, "schema": schema},
                }
            elif self._structured == "json_object":
                payload["response_format"] = {"type": "json_object", "schema": schema}
        return payload

    async def _send(self, method: str, path: str, body: tuple[ChatRequest, str] | None,
                    tag: str, retries: int | None = None) -> dict[str, Any]:
        """One HTTP call with retries (``retries``, default the config's); returns the decoded
        JSON body."""
        http = self._ensure_session()
        assert self._sem is not None
        cfg = self.config
        attempt = 0
        while True:
            if self._down is not None:
                raise LLMError(f"server unavailable: {self._down}", kind="unavailable", tag=tag)
            payload = self._payload(*body) if body is not None else None
            mode = self._structured
            err: LLMError
            async with self._sem:
                server = self.pool.pick()
                url = server.url + path
                self.usage.in_flight += 1
                self.usage.peak_in_flight = max(self.usage.peak_in_flight, self.usage.in_flight)
                t0 = time.monotonic()
                try:
                    async with asyncio.timeout(cfg.timeout_s):
                        if payload is not None:
                            response = await http.post(url, json=payload)
                        else:
                            response = await http.get(url)
                    err = self._check(response, tag)
                    if err is None:
                        data = response.json()
                        self.pool.answered(server)
                        if self.sent is not None and payload is not None:
                            self.sent.append(payload)
                        return data
                except TimeoutError:
                    err = LLMError(f"no answer within {cfg.timeout_s:g}s", kind="timeout",
                                   tag=tag, retriable=True)
                except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                    err = LLMError(f"cannot connect to {server.url}: {exc}", kind="connect",
                                   tag=tag, retriable=True)
                except httpx.TransportError as exc:
                    err = LLMError(f"{type(exc).__name__}: {exc}", kind="protocol", tag=tag,
                                   retriable=True)
                except ValueError as exc:  # a 200 whose body is not JSON
                    err = LLMError(f"undecodable response: {exc}", kind="bad_response", tag=tag,
                                   retriable=True, reason="body not JSON")
                finally:
                    self.pool.release(server)
                    self.usage.in_flight -= 1
                    self.usage.network_s += time.monotonic() - t0
            if err.kind in ("connect", "protocol") and len(self.pool) > 1:
                if self.pool.take_out(server):  # dead or dropping connections: tried later
                    log.warning("LLM server %s taken out of the pool for now: %s",
                                server.url, err)
                if self.pool.any_up():
                    if err.kind == "protocol":
                        attempt += 1  # the request itself may be at fault: counted
                        if attempt > cfg.max_retries:
                            raise err
                    continue  # another server takes it at once
            if (err.kind == "http" and body is not None and mode == "json_schema"
                    and cfg.structured == "auto" and _rejects_format(err)):
                if self._structured == "json_schema":
                    log.info("server rejected response_format json_schema; using json_object "
                             "with schema")
                    self._structured = "json_object"
                continue
            if not err.retriable or attempt >= (cfg.max_retries if retries is None else retries):
                if err.kind == "connect":
                    self._down = err
                raise err
            attempt += 1
            self.usage.retries += 1
            delay = min(cfg.backoff_max_s, cfg.backoff_s * 2 ** (attempt - 1))
            delay *= random.uniform(0.5, 1.0)
            if err.retry_after is not None:
                delay = max(delay, min(err.retry_after, cfg.backoff_max_s))
            log.debug("retrying %s in %.2fs after %r", tag or path, delay, err)
            await asyncio.sleep(delay)

    @staticmethod
    def _check(response: httpx.Response, tag: str) -> LLMError | None:
        if response.status_code == 200:
            return None
        retry_after = None
        header = response.headers.get("retry-after")
        if header:
            try:
                retry_after = float(header)
            except ValueError:
                retry_after = None
        return LLMError(
            f"HTTP {response.status_code}: {response.text[:500]}",
            kind="http",
            status=response.status_code,
            tag=tag,
            retriable=response.status_code in RETRIABLE_STATUS,
            retry_after=retry_after,
        )

    def _count_saved(self, stored: dict[str, Any]) -> None:
        usage = stored.get("usage", {})
        self.usage.saved_prompt_tokens += int(usage.get("prompt_tokens", 0))
        self.usage.saved_completion_tokens += int(usage.get("completion_tokens", 0))


def _rejects_format(err: LLMError) -> bool:
    text = str(err)
    return err.status in (400, 422, 500) and ("response_format" in text or "json_schema" in text)


def _stored(data: dict[str, Any], tag: str) -> dict[str, Any]:
    """The cacheable part of a chat completion response."""
    try:
        choice = data["choices"][0]
        content = choice["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise LLMError(f"response without choices[0].message: {str(data)[:200]}",
                       kind="bad_response", tag=tag, reason="no choices") from exc
    usage = data.get("usage") or {}
    return {
        "content": content,
        "finish_reason": choice.get("finish_reason") or "",
        "usage": {
            "prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "completion_tokens": int(usage.get("completion_tokens") or 0),
        },
    }


def _json_answer(result: ChatResult) -> Any:
    """The default check of a schema-constrained answer: a JSON object or array."""
    value, _ = parse_json(result.content, keep_partial=not result.truncated)
    if not isinstance(value, dict | list):
        raise JSONRepairError(f"not a JSON object or array: {result.content[:80]!r}")
    return value


def _validated(request: ChatRequest, result: ChatResult) -> Any:
    """``request.validate(result)`` (or the default check); raises ``LLMError`` (malformed)."""
    check = request.validate
    if check is None:
        if request.schema is None:
            return None
        check = _json_answer
    try:
        return check(result)
    except ValueError as exc:
        bad_json = isinstance(exc, JSONRepairError) or isinstance(exc.__cause__, JSONRepairError)
        raise LLMError(f"malformed answer: {exc}", kind="malformed", tag=request.tag,
                       reason="malformed JSON" if bad_json else "answer off schema",
                       content=result.content) from exc


def _result(stored: dict[str, Any], *, cached: bool, tag: str) -> ChatResult:
    usage = stored.get("usage", {})
    return ChatResult(
        content=stored.get("content", ""),
        finish_reason=stored.get("finish_reason", ""),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        completion_tokens=int(usage.get("completion_tokens", 0)),
        cached=cached,
        tag=tag,
    )

