"""A fault-injecting HTTP proxy in front of the S3 server, run as its own process:

    python -m chaos.s3proxy --port 0 --upstream http://127.0.0.1:9000 --seed 7 --ready FILE

Faults, each with a rate set at run time (``POST /__chaos__/config`` with JSON):

* ``error``: answer 503 SlowDown (or 500 InternalError) without forwarding;
* ``slow``: wait ``slow_ms`` before forwarding;
* ``drop``: read part of a PUT's body, then close the connection (an upload cut off);
* ``lost_reply``: forward a PUT (the object is stored), then close the connection
  without answering: the client must retry and must not create a duplicate.

``GET /__chaos__/stats`` answers how many requests and faults of each kind it saw.
Only loopback addresses are proxied (the upstream is the test's own S3 server).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate"}
DEFAULT_CONFIG = {"error": 0.0, "slow": 0.0, "slow_ms": [100, 1500], "drop": 0.0, "lost_reply": 0.0}


class Faults:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.config: dict[str, Any] = dict(DEFAULT_CONFIG)
        self.stats: Counter[str] = Counter()

    def choose(self, method: str) -> tuple[str | None, float]:
        with self.lock:
            self.stats[f"requests_{method}"] += 1
            c = self.config
            draw = self.rng.random()
            kinds = [("error", c["error"]), ("slow", c["slow"])]
            if method == "PUT":
                kinds += [("drop", c["drop"]), ("lost_reply", c["lost_reply"])]
            for kind, rate in kinds:
                if draw < rate:
                    self.stats[kind] += 1
                    delay = self.rng.uniform(*c["slow_ms"]) / 1000 if kind == "slow" else 0.0
                    return kind, delay
                draw -= rate
            return None, 0.0


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    faults: Faults
    upstream: tuple[str, int]

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _control(self) -> bool:
        if not self.path.startswith("/__chaos__/"):
            return False
        if self.path == "/__chaos__/config" and self.command == "POST":
            update = json.loads(self._body() or b"{}")
            with self.faults.lock:
                self.faults.config.update(update)
            payload = json.dumps(self.faults.config).encode()
        else:
            with self.faults.lock:
                payload = json.dumps(dict(self.faults.stats)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        return True

    def _handle(self) -> None:
        if self._control():
            return
        kind, delay = self.faults.choose(self.command)
        if kind == "drop":
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length // 2)
            self.close_connection = True
            self.connection.shutdown(2)
            return
        body = self._body()
        if kind == "error":
            code, name = (503, "SlowDown") if random.random() < 0.7 else (500, "InternalError")
            payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{name}</Code>'
                       f"<Message>injected by the chaos proxy</Message></Error>").encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if kind == "slow":
            time.sleep(delay)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            status, reason, reply_headers = response.status, response.reason, response.getheaders()
        finally:
            conn.close()
        if kind == "lost_reply":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.send_response(status, reason)
        for name, value in reply_headers:
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        length = dict((k.lower(), v) for k, v in reply_headers).get("content-length")
        self.send_header("Content-Length", length if self.command == "HEAD" and length else str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def serve(port: int, upstream: str, seed: int, ready: Path | None) -> None:
    target = urlsplit(upstream)
    if target.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("the chaos proxy only forwards to a loopback S3 server")
    Proxy.faults = Faults(seed)
    Proxy.upstream = (target.hostname, target.port or 80)
    server = ThreadingHTTPServer(("127.0.0.1", port), Proxy)
    server.daemon_threads = True
    if ready is not None:
        tmp = ready.with_suffix(".tmp")
        tmp.write_text(str(server.server_address[1]))
        tmp.replace(ready)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ready", type=Path, help="write the listening port here once ready")
    args = parser.parse_args()
    serve(args.port, args.upstream, args.seed, args.ready)


if __name__ == "__main__":
    main()
