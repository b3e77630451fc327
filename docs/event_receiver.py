"""A minimal CloudEvents receiver for Sluice EventSinks (standard library only).

    python docs/event_receiver.py --port 8080

Answers 204 once an event is stored (here: appended to a JSON-lines file), so Sluice moves on;
any 5xx, 408 or 429 makes Sluice try the same event again later. It keeps the ids it has seen,
because delivery is at least once: the same id can arrive twice (after a retry or a restart of
the events operator), and must then be acknowledged without being applied again.
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Lock


def serve(port: int, out: Path) -> None:
    seen: set[str] = set()
    lock = Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                event = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                event_id = str(event["id"])
            except (ValueError, KeyError):
                self.send_response(400)  # malformed: retrying would not help
                self.end_headers()
                return
            with lock:
                if event_id not in seen:  # a duplicate is acknowledged, not applied twice
                    with out.open("a") as f:
                        f.write(json.dumps(event) + "\n")
                    seen.add(event_id)
                    data = event.get("data", {})
                    print(event["type"], data.get("namespace"), data.get("job"), data.get("seq"))  # noqa: T201
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            return None

    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--out", type=Path, default=Path("events.jsonl"))
    args = parser.parse_args()
    serve(args.port, args.out)
