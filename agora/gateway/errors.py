"""Errors in OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``).

Why one shape for everything, ours and upstream's: the official ``openai`` client maps the
status to its exception classes and reads ``error.message``, so a client sees the same kind of
error whether the gateway, its auth, or vLLM refused the request.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

INVALID = "invalid_request_error"


class GatewayError(Exception):
    """An error answered to the client in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        type_: str = INVALID,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        message, param = _sendable(message), None if param is None else _sendable(param)
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict:
        error = {"message": self.message, "type": self.type, "param": self.param}
        return {"error": {**error, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _sendable(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udb82`` escapes. Why: a JSON body may
    name a key with an unpaired ``\\ud800``-style escape, which Python decodes into a str
    that UTF-8 cannot encode, so a message naming that field would crash the error response
    itself (a 500 instead of the 422)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def validation_error(err: ValidationError, prefix: str = "") -> GatewayError:
    """A pydantic error as one 422 naming every bad field by its dotted path (``seats.1``);
    ``param`` is the first of them, as OpenAI names the one bad parameter."""
    problems = []
    for item in err.errors():
        path = ".".join(str(p) for p in (*([prefix] if prefix else []), *item["loc"]))
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{path}: {message}" if path else message)
    first = err.errors()[0]["loc"] if err.errors() else ()
    param = ".".join(str(p) for p in (*([prefix] if prefix else []), *first)) or None
    return GatewayError(422, "; ".join(problems), "invalid_body", param=param)


def add_error_handlers(app: FastAPI) -> None:
    """Every error leaves in OpenAI's shape, including Starlette's own 404/405 and FastAPI's
    request validation."""

    @app.exception_handler(GatewayError)
    async def _gateway_error(_: Request, err: GatewayError) -> JSONResponse:
        return err.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        gerr = GatewayError(err.status_code, str(err.detail), f"http_{err.status_code}")
        return JSONResponse(gerr.body(), status_code=err.status_code, headers=err.headers)

    @app.exception_handler(RedisError)
    async def _redis_down(_: Request, err: RedisError) -> JSONResponse:
        # Keys, rate limits, episodes and runs live in Redis: without it the gateway cannot
        # tell who may do what, so it refuses (503, retryable) rather than fail open.
        message = f"the gateway's Redis is unavailable ({type(err).__name__}: {err}); retry later"
        return GatewayError(503, message, "redis_unavailable", "server_error",
                            headers={"retry-after": "5"}).response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        problems = [
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()
        ]
        return GatewayError(422, "; ".join(problems), "invalid_request").response()
