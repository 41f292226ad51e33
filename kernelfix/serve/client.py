"""A client for ``kernelfix serve``: verdicts from a judge on another machine (or another process).

    from kernelfix.serve.client import JudgeClient

    client = JudgeClient("http://127.0.0.1:8000")          # the token: the server's token file, or token=/token_file=
    verdict = client.evaluate("task.py", "candidate.py")   # paths are read here; text is sent as it is
    results = client.evaluate_many([("task.py", reply) for reply in replies])   # Outcomes: each a verdict or an error

A full server (503) is asked again after the Retry-After it gives, for up to ``busy_wait_s``;
a request the server refuses (4xx) raises ``ServeError`` with its message. A batch larger
than the server's ``max_batch`` goes in several requests, side by side.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from kernelfix.library.judge_pool import JudgeRequest, Outcome
from kernelfix.library.sources import CandidateKind, candidate_source, file_task_name, task_source
from kernelfix.serve.auth import client_token
from kernelfix.tools.verdict import Verdict

DEFAULT_URL = "http://127.0.0.1:8000"


class ServeError(Exception):
    """The server refused or failed a request: its status, code and message."""

    def __init__(self, status: int, code: str, message: str):
        self.status, self.code, self.message = status, code, message
        super().__init__(f"{status} {code}: {message}")


def request(
    task: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    *,
    kind: CandidateKind = "auto",
    backward: bool | None = None,
    profile: bool | None = None,
    task_name: str | None = None,
    sanitize: bool | None = None,
) -> JudgeRequest:
    """A request body from paths or text, read on this side (the server takes source text only). A task file's
    stem is sent as its ``task_name`` (unless one is given), so the verdict names the task as the file does."""
    text, filename = candidate_source(candidate, kind)
    return JudgeRequest(
        task=task_source(task),
        candidate=text,
        kind="reply" if not filename.endswith(".py") else "code",
        backward=backward,
        profile=profile,
        task_name=task_name or file_task_name(task),
        sanitize=sanitize,
    )


def _body(req: JudgeRequest) -> dict[str, Any]:
    """A request's JSON, fields left to the server's config (None) left out: a server of an earlier version,
    which forbids fields it does not know, still takes a request that sets none of its later ones."""
    return req.model_dump(mode="json", exclude_none=True)


class JudgeClient:
    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        timeout_s: float = 3600.0,
        busy_wait_s: float = 900.0,
        max_batch: int = 64,
    ):
        """``timeout_s``: one verdict may take this long (builds, a loaded queue); ``busy_wait_s``: how long
        to keep asking a full server; ``max_batch``: items per batch request (the server's own cap may be lower)."""
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {client_token(token, token_file)}"}
        self._timeout = httpx.Timeout(timeout_s, connect=30.0)
        self.busy_wait_s = busy_wait_s
        self.max_batch = max_batch
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=self._timeout)

    # ------------------------------------------------------------------ sync

    def health(self) -> dict[str, Any]:
        return self._json(self._send("GET", "/v1/health"))

    def evaluate(self, task: str | os.PathLike[str], candidate: str | os.PathLike[str], **options: Any) -> Verdict:
        """The verdict on ``candidate`` for ``task`` (each a path or text; options as ``request``). One request:
        when it gets no verdict (a task that does not import, a bad field), the call fails with ``ServeError``."""
        body = request(task, candidate, **options)
        return Verdict.model_validate(self._json(self._send("POST", "/v1/evaluate", _body(body))))

    def evaluate_requests(self, requests: Sequence[JudgeRequest]) -> list[Outcome]:
        """Outcomes in order (a verdict, or the error of that one item), in batches of ``max_batch`` sent side by side."""
        chunks = [list(requests[i : i + self.max_batch]) for i in range(0, len(requests), self.max_batch)]
        if len(chunks) <= 1:
            return self._batch(chunks[0]) if chunks else []
        with ThreadPoolExecutor(len(chunks)) as ex:
            return [o for part in ex.map(self._batch, chunks) for o in part]

    def evaluate_many(
        self, pairs: Sequence[tuple[str | os.PathLike[str], str | os.PathLike[str]]], **options: Any
    ) -> list[Outcome]:
        """An ``Outcome`` per (task, candidate), in order, not a ``Verdict``: a batch's items fail one by one (one
        item's broken task must not cost the others their verdicts), so each holds its ``verdict`` or its ``error``
        (code, status, message), with the GPU that judged it and its seconds."""
        return self.evaluate_requests([request(t, c, **options) for t, c in pairs])

    def _batch(self, items: list[JudgeRequest]) -> list[Outcome]:
        body = {"items": [_body(r) for r in items]}
        return [Outcome.model_validate(o) for o in self._json(self._send("POST", "/v1/batch", body))["results"]]

    def _send(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        deadline = time.monotonic() + self.busy_wait_s
        while True:
            r = self._http.request(method, path, json=body)
            wait = _busy_wait(r, deadline)
            if wait is None:
                return r
            time.sleep(wait)

    # ------------------------------------------------------------------ async

    async def aevaluate(
        self, task: str | os.PathLike[str], candidate: str | os.PathLike[str], **options: Any
    ) -> Verdict:
        body = request(task, candidate, **options)
        async with httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout) as http:
            return Verdict.model_validate(self._json(await self._asend(http, "POST", "/v1/evaluate", _body(body))))

    async def aevaluate_requests(self, requests: Sequence[JudgeRequest]) -> list[Outcome]:
        chunks = [list(requests[i : i + self.max_batch]) for i in range(0, len(requests), self.max_batch)]
        async with httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout) as http:

            async def one(items: list[JudgeRequest]) -> list[Outcome]:
                r = await self._asend(http, "POST", "/v1/batch", {"items": [_body(x) for x in items]})
                return [Outcome.model_validate(o) for o in self._json(r)["results"]]

            parts = await asyncio.gather(*(one(c) for c in chunks))
        return [o for part in parts for o in part]

    async def _asend(self, http: httpx.AsyncClient, method: str, path: str, body: dict | None = None) -> httpx.Response:
        deadline = time.monotonic() + self.busy_wait_s
        while True:
            r = await http.request(method, path, json=body)
            wait = _busy_wait(r, deadline)
            if wait is None:
                return r
            await asyncio.sleep(wait)

    # ------------------------------------------------------------------ common

    @staticmethod
    def _json(r: httpx.Response) -> Any:
        try:
            data = r.json()
        except ValueError:
            data = None
        if r.status_code >= 400:
            if isinstance(data, dict) and "error" in data:
                raise ServeError(r.status_code, str(data["error"]), str(data.get("message", "")))
            raise ServeError(r.status_code, "http_error", r.text[:500])
        return data

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "JudgeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _busy_wait(r: httpx.Response, deadline: float) -> float | None:
    """Seconds to wait before asking again (a 503 within the time allowed), else None."""
    if r.status_code != 503:
        return None
    try:
        after = float(r.headers.get("Retry-After", "5"))
    except ValueError:
        after = 5.0
    wait = after * (1 + 0.25 * random.random())  # jitter: many trainer ranks must not come back at once
    if time.monotonic() + wait > deadline:
        return None  # give up: the caller sees the 503 as a ServeError
    return wait


__all__ = ["DEFAULT_URL", "JudgeClient", "ServeError", "request"]
