"""The FastAPI app: routes, auth, limits, error mapping, lifespan (batcher, reload poller)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpurag import __version__
from gpurag.errors import ConfigError, GpuragError
from gpurag.serve.auth import KeyChecker
from gpurag.serve.batcher import MicroBatcher, OverloadedError
from gpurag.serve.config import ServeConfig
from gpurag.serve.holder import IndexHolder
from gpurag.serve.metrics import Metrics
from gpurag.serve.schemas import (
    ErrorResponse,
    QueryRequest,
    QueryResponse,
    ReloadResponse,
    StatusResponse,
)

log = logging.getLogger(__name__)
VERSION_HEADER = "X-Gpurag-Index-Version"


# Declared for the OpenAPI schema (generated clients then send the key); checked in require_key.
BEARER = HTTPBearer(auto_error=False, description="an API key from GPURAG_API_KEYS")
BearerCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


class ServeState:
    """Everything the routes share."""

    def __init__(self, holder: IndexHolder, config: ServeConfig, llm: Any = None) -> None:
        self.holder = holder
        self.config = config
        self.llm = llm
        self.metrics = Metrics()
        self.keys = KeyChecker(config.api_keys)
        self.batcher = MicroBatcher(
            lambda: holder.current, self.metrics, batching=config.batching,
            window_s=config.batch_window_ms / 1000, max_batch=config.max_batch,
            max_queue=config.max_queue)
        self.admin = ThreadPoolExecutor(1, thread_name_prefix="gpurag-reload")
        self.llm_pool = ThreadPoolExecutor(1, thread_name_prefix="gpurag-llm")
        self.draining = False
        self.poller: asyncio.Task | None = None
        self.note_version()

    def note_version(self) -> None:
        self.metrics.index_version = self.holder.current.version
        self.metrics.index_loaded_at = self.holder.current.loaded_at

    def public_message(self, exc: BaseException) -> str:
        """The error text a client may see: no server paths, never a traceback."""
        return str(exc).replace(str(self.holder.path), "<index>")

    async def reload(self, force: bool = False) -> tuple[bool, str]:
        loop = asyncio.get_running_loop()
        try:
            swapped, version = await loop.run_in_executor(self.admin, self.holder.reload, force)
        except Exception as exc:
            self.metrics.reload("failed")
            if self.holder.last_error != str(exc):
                log.warning("index reload failed, still serving %s: %s",
                            self.holder.current.version, exc)
            self.holder.last_error = str(exc)
            raise
        if swapped:
            self.metrics.reload("swapped")
            self.note_version()
        return swapped, version

    async def poll(self) -> None:
        """Reload whenever a new version is committed at the index path."""
        while True:
            await asyncio.sleep(self.config.reload_poll_s)
            if self.holder.changed():
                with contextlib.suppress(Exception):
                    await self.reload()


# -- ASGI middleware: body limit, request metrics --------------------------------------------
class BodyTooLargeError(HTTPException):
    """Raised while the body streams in; an HTTPException so the app answers 413 itself."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large(limit)["detail"])


class Guard:
    """Refuses bodies over the limit with 413 (by Content-Length, or while streaming) and
    records every request's route, status and latency."""

    def __init__(self, app: Any, state: ServeState, routes: set[str]) -> None:
        self.app = app
        self.state = state
        self.routes = routes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.state.config.max_body_bytes
        metrics = self.state.metrics
        route = scope["path"] if scope["path"] in self.routes else "other"
        t0 = time.perf_counter()
        status = 500
        started = False

        async def send_wrapper(message: dict) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        length = dict(scope.get("headers") or []).get(b"content-length")
        received = 0

        async def receive_wrapper() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLargeError(limit)
            return message

        metrics.in_flight += 1
        try:
            if length is not None and length.isdigit() and int(length) > limit:
                await _send_json(send_wrapper, 413, _too_large(limit))
            else:
                try:
                    await self.app(scope, receive_wrapper, send_wrapper)
                except BodyTooLargeError:
                    if not started:
                        await _send_json(send_wrapper, 413, _too_large(limit))
        finally:
            metrics.in_flight -= 1
            metrics.request(route, scope["method"], status, time.perf_counter() - t0)


def _too_large(limit: int) -> dict:
    return {"detail": f"request body over the limit of {limit} bytes"}


async def _send_json(send: Any, status: int, body: dict) -> None:
    import json

    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


# -- the app ---------------------------------------------------------------------------------
def create_app(holder: IndexHolder, config: ServeConfig | None = None,
               llm: Any = None) -> FastAPI:
    """The service over the index ``holder`` serves; ``llm`` (an ``LLMClient``) enables
    ``/v1/answer``."""
    config = config or ServeConfig()
    state = ServeState(holder, config, llm)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.batcher.start()
        if config.reload_poll_s > 0:
            state.poller = asyncio.get_running_loop().create_task(state.poll())
        try:
            yield
        finally:
            state.draining = True
            if state.poller is not None:
                state.poller.cancel()
            await state.batcher.stop()
            state.admin.shutdown(wait=True)
            state.llm_pool.shutdown(wait=True)

    app = FastAPI(title="gpurag", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="GraphRAG retrieval over one index; concurrent requests are "
                  "micro-batched onto one query_batch call.")
    app.state.serve = state

    async def require_key(request: Request, _: BearerCredentials) -> None:
        if not state.keys.allows(request.headers.get("authorization")):
            raise HTTPException(401, "missing or invalid API key",
                                headers={"WWW-Authenticate": "Bearer"})

    auth = [Depends(require_key)]
    errors = {status: {"model": ErrorResponse} for status in (400, 401, 413, 503, 504)}

    # -- error mapping: JSON bodies, no tracebacks ---------------------------------------
    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errs):
            return JSONResponse({"detail": "malformed JSON body"}, status_code=400)
        detail = [{k: e[k] for k in ("loc", "msg", "type") if k in e} for e in errs]
        return JSONResponse({"detail": detail}, status_code=400)

    @app.exception_handler(Exception)
    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return JSONResponse({"detail": "internal server error (details in the server log)"},
                            status_code=500)

    def failure(exc: BaseException) -> JSONResponse:
        if isinstance(exc, OverloadedError):
            return JSONResponse({"detail": f"overloaded: {exc}; retry later"}, status_code=503,
                                headers={"Retry-After": str(config.retry_after_s)})
        if isinstance(exc, ConfigError):
            return JSONResponse({"detail": state.public_message(exc)}, status_code=400)
        if isinstance(exc, GpuragError):
            return JSONResponse({"detail": state.public_message(exc)}, status_code=400)
        log.error("query failed", exc_info=exc)
        return JSONResponse({"detail": "internal server error (details in the server log)"},
                            status_code=500)

    def check_limits(body: QueryRequest) -> list[str] | JSONResponse:
        if (body.question is None) == (body.questions is None):
            return JSONResponse({"detail": "give exactly one of 'question' or 'questions'"},
                                status_code=400)
        questions = body.question_list()
        most = min(config.max_questions, config.max_queue)  # more could never be queued
        if len(questions) > most:
            return JSONResponse({"detail": f"{len(questions)} questions: the limit is "
                                 f"{most} per request"}, status_code=413)
        longest = max(len(q) for q in questions)
        if longest > config.max_question_chars:
            return JSONResponse({"detail": f"a question of {longest} characters: the limit "
                                 f"is {config.max_question_chars}"}, status_code=413)
        if any(not q.strip() for q in questions):
            return JSONResponse({"detail": "empty question"}, status_code=400)
        if body.k is not None and body.k > config.max_k:
            return JSONResponse({"detail": f"k={body.k}: the limit is {config.max_k}"},
                                status_code=400)
        return questions

    async def retrieve(body: QueryRequest) -> tuple[str, list, Any] | JSONResponse:
        """``(version, results, the index that ranked them)`` or the error response."""
        questions = check_limits(body)
        if isinstance(questions, JSONResponse):
            return questions
        k = body.k if body.k is not None else state.holder.current.index.query_config.k
        try:
            future = state.batcher.submit(questions, k, body.mode, body.options())
        except OverloadedError as exc:
            return failure(exc)
        try:
            return await asyncio.wait_for(asyncio.shield(future), config.request_timeout_s)
        except TimeoutError:
            future.cancel()
            return JSONResponse({"detail": f"no answer within {config.request_timeout_s} s"},
                                status_code=504)
        except Exception as exc:
            return failure(exc)

    def respond(version: str, results: list) -> JSONResponse:
        return JSONResponse({"index_version": version,
                             "results": [r.to_dict() for r in results]},
                            headers={VERSION_HEADER: version})

    # -- routes ----------------------------------------------------------------------------
    @app.post("/v1/query", response_model=QueryResponse, dependencies=auth, responses=errors,
              summary="Retrieve passages for one question or a batch")
    async def query(body: QueryRequest) -> Any:
        outcome = await retrieve(body)
        if isinstance(outcome, JSONResponse):
            return outcome
        return respond(*outcome[:2])

    @app.post("/v1/answer", response_model=QueryResponse, dependencies=auth, responses=errors,
              summary="Retrieve, then answer with the configured LLM, citing passages")
    async def answer(body: QueryRequest) -> Any:
        if state.llm is None:
            return JSONResponse({"detail": "no LLM is configured: start `gpurag serve` with "
                                 "--llm-url or GPURAG_LLM_URL to enable /v1/answer"},
                                status_code=503)
        outcome = await retrieve(body)
        if isinstance(outcome, JSONResponse):
            return outcome
        # answer on the index that ranked: a reload meanwhile must not mix two versions
        version, results, index = outcome
        from gpurag.query.generate import answer_results, global_answers

        try:
            if body.mode == "global":  # lazy: only the ranked communities' reports
                await asyncio.get_running_loop().run_in_executor(
                    state.llm_pool, functools.partial(
                        global_answers, index, [r.question for r in results], state.llm,
                        level=body.level or 0, results=results))
            else:
                await asyncio.get_running_loop().run_in_executor(
                    state.llm_pool, answer_results, index, results, state.llm)
        except Exception as exc:
            return failure(exc)
        return respond(version, results)

    @app.get("/v1/info", dependencies=auth, summary="The index served, its version, backends")
    async def info() -> dict[str, Any]:
        from gpurag.info import environment_info

        served = state.holder.current
        manifest = served.index.info()
        manifest.pop("path", None)
        return {
            "index_version": served.version,
            "index_name": state.holder.path.name,
            "loaded_at": served.loaded_at,
            "index": manifest,
            "environment": environment_info(served.index.runtime),
            "serve": {
                "batching": config.batching, "batch_window_ms": config.batch_window_ms,
                "max_batch": config.max_batch, "max_queue": config.max_queue,
                "max_k": config.max_k, "max_questions": config.max_questions,
                "max_question_chars": config.max_question_chars,
                "request_timeout_s": config.request_timeout_s,
                "reload_poll_s": config.reload_poll_s, "answer": state.llm is not None,
            },
        }

    @app.post("/v1/admin/reload", response_model=ReloadResponse, dependencies=auth,
              summary="Serve the index committed at the path now (if it changed)")
    async def reload() -> Any:
        try:
            swapped, version = await state.reload()
        except Exception as exc:
            return JSONResponse({"detail": f"reload failed, still serving "
                                 f"{state.holder.current.version}: "
                                 f"{state.public_message(exc)}"}, status_code=409)
        return {"reloaded": swapped, "index_version": version}

    @app.get("/healthz", response_model=StatusResponse, summary="The process is up")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/readyz", response_model=StatusResponse,
             summary="An index is loaded and the server is not draining")
    async def readyz() -> Any:
        if state.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        return {"status": "ready", "index_version": state.holder.current.version}

    @app.get("/metrics", dependencies=auth, response_class=PlainTextResponse,
             summary="Prometheus metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(state.metrics.render(),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    from gpurag.serve.web import AccessLog, add_web_routes

    add_web_routes(app)  # the question page at /, /docs and /redoc (no CDN)
    routes = {r.path for r in app.routes if hasattr(r, "path")}
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=config.cors_origins,
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(Guard, state=state, routes=routes)
    from gpurag.serve.guards import ReadGuard

    app.add_middleware(ReadGuard, keys=state.keys, body_timeout_s=config.body_timeout_s)
    app.add_middleware(AccessLog)
    return app
