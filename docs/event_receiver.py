"""A minimal CloudEvents receiver for Sluice EventSinks (standard library only).

    python docs/event_receiver.py --port 8080

Answers 204 once an event is stored (here: appended to a JSON-lines file), so Sluice moves on;
any 5xx, 408 or 429 makes Sluice try the same event (or batch) again later. It keeps the ids it has seen,
because delivery is at least once: the same id can arrive twice (after a retry or a restart of
the events operator), and must then be acknowledged without being applied again.
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Lock


def make_server(port: int, out: Path, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """The receiver, bound but not serving yet (port 0: any free port)."""
    seen: set[str] = set()
    lock = Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                # A sink with batchSize > 1 sends a JSON array (CloudEvents batched mode).
                events = body if isinstance(body, list) else [body]
                ids = [str(event["id"]) for event in events]
            except (ValueError, KeyError, TypeError):
                self.send_response(400)  # malformed: retrying would not help
                self.end_headers()
                return
            with lock:
                for event_id, event in zip(ids, events, strict=True):
                    if event_id in seen:  # a duplicate is acknowledged, not applied twice
                        continue
                    with out.open("a") as f:
                        f.write(json.dumps(event) + "\n")
                    seen.add(event_id)
                    data = event.get("data")
                    data = data if isinstance(data, dict) else {}
                    print(
                        event.get("type"), data.get("namespace"), data.get("name"), data.get("seq")
                    )  # noqa: T201
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            return None

    return ThreadingHTTPServer((host, port), Handler)


def serve(port: int, out: Path) -> None:
    make_server(port, out).serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--out", type=Path, default=Path("events.jsonl"))
    args = parser.parse_args()
    serve(args.port, args.out)
