"""A real webhook receiver for the notification tests: a stdlib HTTP server process.

Every request is appended to ``--out`` as one JSON line (when it arrived, method, path,
headers, body, and the status it was answered with) and flushed before the answer is
sent, so a test reading the file sees every request the server got.

Behaviour:

``--fail-first N``
    answer 500 to the first ``N`` attempts of each delivery (keyed by the
    ``Loch-Delivery-Id`` header; requests without one share a key);
``--fail-every K``
    with ``--fail-first``, only deliveries whose id is a multiple of ``K`` fail;
``--status CODE``
    answer ``CODE`` (for example 404) to every request instead of 200;
``--sleep SECONDS``
    sleep before answering (the request is recorded on arrival).

The server binds ``--port`` (0: any free port) on 127.0.0.1 and writes the port it got
to ``--port-file`` once it listens.

Usage: ``python receiver.py --out hits.jsonl --port-file port [--port 0] [...]``
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Receiver(ThreadingHTTPServer):
    """The server with its behaviour and its log."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, args: argparse.Namespace) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.args = args
        self.lock = threading.Lock()
        self.out = Path(args.out).open("a", encoding="utf-8")  # noqa: SIM115 - process-long
        self.seen: dict[str, int] = {}

    def answer(self, delivery: str) -> int:
        """The status to answer this attempt of ``delivery`` with."""
        with self.lock:
            n = self.seen.get(delivery, 0) + 1
            self.seen[delivery] = n
        chosen = not delivery.isdigit() or int(delivery) % self.args.fail_every == 0
        if n <= self.args.fail_first and chosen:
            return 500
        return int(self.args.status)

    def log_request_line(self, record: dict[str, object]) -> None:
        """Append one request to the log (flushed)."""
        line = json.dumps(record, separators=(",", ":"))
        with self.lock:
            self.out.write(line + "\n")
            self.out.flush()


class Handler(BaseHTTPRequestHandler):
    """Records the request, then answers as configured."""

    server: Receiver
    protocol_version = "HTTP/1.1"
    # one buffered write per answer, TCP_NODELAY: no Nagle / delayed-ACK stalls
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status = self.server.answer(self.headers.get("Loch-Delivery-Id", ""))
        self.server.log_request_line(
            {
                "at": time.time(),
                "method": self.command,
                "path": self.path,
                "headers": dict(self.headers.items()),
                "body": body.decode("utf-8", errors="replace"),
                "answered": status,
            }
        )
        if self.server.args.sleep:
            time.sleep(self.server.args.sleep)
        payload = b"{}"
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the caller gave up (timeout) and closed the connection

    do_POST = _handle
    do_PUT = _handle
    do_GET = _handle

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the JSON lines are the log."""


def main() -> None:
    """Parse the arguments and serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--fail-every", type=int, default=1)
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()
    server = Receiver(args.port, args)
    tmp = f"{args.port_file}.tmp"
    Path(tmp).write_text(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
