"""The judge over HTTP: a FastAPI app in front of a ``JudgePool`` (docs/service.md).

    POST /v1/evaluate   {"task": SRC, "candidate": SRC, "backward": null, "profile": null, "sanitize": null}  -> the verdict's JSON
    POST /v1/batch      {"items": [<evaluate body>, ...]}  -> {"results": [{"verdict": ...} | {"error": ...}, ...]}
    GET  /v1/health     -> queue, GPUs, warm judges

Every request, health included, needs ``Authorization: Bearer <token>`` (401 without; the
check runs before routing and before the body is read). A body over the limit is 413 before it
is parsed; malformed JSON is 400; a body that is not a request is 422 with what is wrong; a task
that does not import is 422 with the judge's message; a full queue is 503 with Retry-After, and
nothing of that request was taken. Judging runs in the pool's threads, never on the event loop.
There is no /docs or /openapi.json: nothing is served without the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from kernelfix.base.version import __version__
from kernelfix.library.judge_pool import Busy, JudgePool, JudgeRequest, Outcome, TooMany
from kernelfix.serve.auth import authorized

GPU_HEADER = "X-Kernelfix-Gpu"
DEFAULT_MAX_BODY = 4 << 20
DEFAULT_MAX_BATCH = 64
# A body over the limit is read and dropped up to this size before the 413 goes out (a client that sends
# its whole body before reading the answer would otherwise meet a reset connection); past it, cut off.
_DRAIN_LIMIT = 64 << 20


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[JudgeRequest] = Field(min_length=1, description="judged concurrently; admitted together or not at all")


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, **extra}, status_code=status, headers=headers)


def create_app(
    pool: JudgePool,
    *,
    token: str,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    max_batch: int = DEFAULT_MAX_BATCH,
    close_pool: bool = True,
):
    """The ASGI app (FastAPI inside the token and body-size guard). ``close_pool``: close the pool when the
    server shuts down (after the requests under way have their answers)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        if close_pool:
            await asyncio.to_thread(pool.close)

    app = FastAPI(
        title="kernelfix judge", version=__version__, docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )

    def submit(items: list[JudgeRequest]):
        try:
            return pool.submit(items)  # admission only: a lock held for microseconds
        except Busy as e:
            raise _Refused(error(503, "busy", str(e), headers={"Retry-After": str(e.retry_after_s)})) from None
        except TooMany as e:
            raise _Refused(error(422, "batch_too_large", str(e))) from None

    @app.post("/v1/evaluate")
    async def evaluate(req: JudgeRequest) -> Response:
        (future,) = submit([req])
        out: Outcome = await asyncio.wrap_future(future)
        headers = {GPU_HEADER: out.gpu} if out.gpu is not None else None
        if out.error is not None:
            return error(out.error.status, out.error.code, out.error.message, headers=headers)
        assert out.verdict is not None
        return Response(out.verdict.model_dump_json(), media_type="application/json", headers=headers)

    @app.post("/v1/batch")
    async def batch(req: BatchRequest) -> Response:
        if len(req.items) > max_batch:
            return error(
                422,
                "batch_too_large",
                f"{len(req.items)} items in one batch; this server takes at most {max_batch}: split it",
            )
        futures = submit(req.items)
        outs: list[Outcome] = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        body = '{"results":[' + ",".join(o.model_dump_json(exclude_none=True) for o in outs) + "]}"
        return Response(body, media_type="application/json")

    @app.get("/v1/health")
    async def health() -> Response:
        stats = pool.stats().model_dump()
        return JSONResponse(
            {"status": "ok", "version": __version__, "max_batch": max_batch, "max_body_bytes": max_body_bytes, **stats}
        )

    @app.exception_handler(_Refused)
    async def refused(request: Request, exc: _Refused) -> JSONResponse:
        return exc.response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()
        ]
        if any(p["type"] == "json_invalid" for p in problems):
            return error(
                400, "malformed_json", "the body is not valid JSON: " + "; ".join(p["msg"] for p in problems)[:500]
            )
        text = "; ".join(f"{'.'.join(str(x) for x in p['loc'])}: {p['msg']}" for p in problems)
        if any(p["loc"] == ["body"] for p in problems):
            text = "the body must be a JSON object, sent with Content-Type: application/json (" + text + ")"
        return error(422, "invalid_request", text[:2000], detail=problems[:20])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error(exc.status_code, code, str(exc.detail))

    return Guard(app, token=token, max_body_bytes=max_body_bytes)


class _Refused(Exception):
    def __init__(self, response: JSONResponse):
        self.response = response


class Guard:
    """Pure ASGI, in front of everything: the bearer token, then the body's size, before any route,
    body parsing or model validation runs."""

    def __init__(self, app, *, token: str, max_body_bytes: int):
        self.app = app
        self.token = token.encode()
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # lifespan
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if not authorized(headers.get(b"authorization"), self.token):
            await _drain(receive, 1 << 20)
            return await _send_json(
                send,
                401,
                {"error": "unauthorized", "message": "send Authorization: Bearer <token> (the server's token file)"},
                [(b"www-authenticate", b'Bearer realm="kernelfix"')],
            )
        too_large = {
            "error": "too_large",
            "message": f"the body is over this server's limit of {self.max_body_bytes} bytes (--max-body-mb)",
        }
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await _drain(receive, _DRAIN_LIMIT)
            return await _send_json(send, 413, too_large)
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                if message.get("more_body"):
                    await _drain(receive, _DRAIN_LIMIT)
                return await _send_json(send, 413, too_large)
            if not message.get("more_body"):
                break
        delivered = False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # the disconnect, when the app waits for one

        await self.app(scope, replay, send)


async def _drain(receive, limit: int) -> None:
    """Read and drop the rest of a body we will not use, up to ``limit`` bytes."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body"):
            return


async def _send_json(send, status: int, payload: dict, extra_headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra_headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
