"""``gpurag serve``: an HTTP query service over one index.

FastAPI on uvicorn. FastAPI was chosen over bare Starlette because the service must publish an
OpenAPI schema that generated clients can use: FastAPI derives it from the same pydantic models
that validate requests, so schema and behaviour cannot drift apart, while Starlette would need a
hand-written schema. FastAPI is actively maintained (frequent releases, tracks Starlette and
pydantic 2) and adds little on top of Starlette, which it is built on.

Modules: :mod:`config` (settings), :mod:`auth` (bearer keys), :mod:`batcher` (micro-batching
onto one ``Index.query_batch``), :mod:`holder` (the served index and hot reload),
:mod:`metrics` (Prometheus text), :mod:`schemas` (request/response models), :mod:`app` (routes),
:mod:`cli` (the ``serve`` subcommand).
"""

from gpurag.serve.config import ServeConfig

__all__ = ["ServeConfig", "create_app"]


def create_app(*args, **kwargs):
    """Build the ASGI app (see :func:`gpurag.serve.app.create_app`)."""
    from gpurag.serve.app import create_app as _create_app

    return _create_app(*args, **kwargs)
