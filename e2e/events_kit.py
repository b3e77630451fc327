"""A CloudEvents receiver on localhost for the events e2e stories (e2e/test_events.py,
e2e/test_delayed_preemption.py); the `receiver` and `sinks` fixtures are in conftest.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MakeSink = Callable[[str, dict[str, Any]], str]
"""`sinks(url, extra_spec) -> name`: an EventSink to `url`, deleted after the test."""


class Receiver:
    """A CloudEvents receiver on 127.0.0.1 that can go down (stop listening) and come back."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.port = 0

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.events.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return None

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def ids(self) -> list[str]:
        with self.lock:
            return [e["id"] for e in self.events]

    def first_seen(self) -> list[str]:
        """Ids in order of first arrival (what a receiver keeps after de-duplication)."""
        return list(dict.fromkeys(self.ids()))
