"""An OpenAI-compatible chat server for tests: streams recorded replies over real HTTP (SSE),
as vLLM or SGLang would, and can kill the client process at an exact point of a reply.

    server = StubLLM(replies)                 # reply i answers the request that carries i assistant messages
    server = StubLLM([["a", "b", "c"], ...])  # several requests at one depth (a search's round): the k-th to
                                              # arrive gets alternative k; a request with n=3 gets 3 of them
    server.delay_s["b"] = 0.5                 # seconds between the chunks of reply "b" (a slow reply)
    server.plan[1] = Action.KILL_MID_STREAM   # what to do when reply 1 is asked for next
    server.victim = proc.pid
    ... kernelfix optimize --model openai/stub --api-base server.url --api-key-env ...
    server.deliveries                         # (reply index, complete?) per request, in order

Killing from the server, between two chunks it has flushed, puts the kill in the middle of a
model reply without guessing at timings.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Action(enum.Enum):
    KILL_MID_STREAM = "kill_mid_stream"  # half of the reply's chunks are sent, then the kill


@dataclass
class Delivery:
    index: int
    complete: bool = False
    texts: tuple[str, ...] = ()  # the replies this request streamed (several with n=)
    n: int = 1


class StubLLM:
    def __init__(self, replies: list[str | list[str]], *, chunks: int = 12):
        self.replies = replies
        self.chunks = chunks
        self.plan: dict[int, Action] = {}  # consumed: each action applies to one request
        self.victim: int | None = None
        self.deliveries: list[Delivery] = []
        self.delay_s: dict[str, float] = {}
        self.killed = threading.Event()
        self._lock = threading.Lock()
        self._taken: dict[int, int] = {}  # depth -> alternatives handed out
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest's output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub._answer(self, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "StubLLM":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def completed(self) -> list[int]:
        """Reply indices delivered in full, in order."""
        return [d.index for d in self.deliveries if d.complete]

    def _kill(self) -> None:
        os.kill(self.victim, signal.SIGKILL)
        self.killed.set()

    def _texts(self, index: int, n: int) -> tuple[str, ...]:
        entry = self.replies[index]
        if isinstance(entry, str):
            return (entry,) * n
        first = self._taken.get(index, 0)
        self._taken[index] = first + n
        return tuple(entry[first : first + n])

    def _answer(self, h: BaseHTTPRequestHandler, body: dict) -> None:
        index = sum(m.get("role") == "assistant" for m in body["messages"])
        n = int(body.get("n") or 1)
        with self._lock:
            action = self.plan.pop(index, None)
            texts = self._texts(index, n)
            delivery = Delivery(index, texts=texts, n=n)
            self.deliveries.append(delivery)
        step = max(-(-len(t) // self.chunks) for t in texts)
        pieces = [[t[i : i + step] for i in range(0, len(t), step)] for t in texts]
        delay = max(self.delay_s.get(t, 0.0) for t in texts)
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Connection", "close")
            h.end_headers()
            for k in range(max(map(len, pieces))):
                if action is Action.KILL_MID_STREAM and k == len(pieces[0]) // 2:
                    self._kill()
                    return
                if delay:
                    time.sleep(delay)
                for c, mine in enumerate(pieces):
                    if k < len(mine):
                        self._event(
                            h,
                            {
                                "choices": [
                                    {
                                        "index": c,
                                        "delta": {"role": "assistant", "content": mine[k]},
                                        "finish_reason": None,
                                    }
                                ]
                            },
                        )
            self._event(h, {"choices": [{"index": c, "delta": {}, "finish_reason": "stop"} for c in range(len(texts))]})
            completion = sum(len(t) // 4 for t in texts)
            self._event(
                h,
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 100 + index,
                        "completion_tokens": completion,
                        "total_tokens": 100 + index + completion,
                    },
                },
            )
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return  # the client went away mid-reply (killed, or it stopped reading)
        delivery.complete = True

    @staticmethod
    def _event(h: BaseHTTPRequestHandler, payload: dict) -> None:
        chunk = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub", **payload}
        h.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        h.wfile.flush()
