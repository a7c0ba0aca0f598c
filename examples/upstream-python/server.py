#!/usr/bin/env python3
"""A minimal order service in Python (standard library only) to put behind
"idem proxy". Like examples/upstream-node/server.js it knows nothing about
idempotency: every POST /orders it receives is one execution, counted.

    python3 server.py [port]          (default 9000; 0 picks a free port)

POST /orders answers 201 {"order_id", "execution", "idempotency_key", ...};
the header X-Upstream-Fail: 500 makes it answer 500 (still counted).
GET /count answers {"executions": N, "by_key": {...}}.
The first line on standard output is "listening on http://HOST:PORT".
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
executions = 0
by_key = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send_json(self, status, obj, headers=None):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/count":
            with lock:
                self.send_json(200, {"executions": executions, "by_key": dict(by_key)})
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        global executions
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/orders":
            self.send_json(404, {"error": "not found"})
            return
        try:
            order = json.loads(raw or b"{}")
        except ValueError:
            self.send_json(400, {"error": "body is not JSON"})
            return
        key = self.headers.get("Idempotency-Key", "")
        with lock:  # the effect: counted as soon as the request is accepted
            executions += 1
            n = executions
            by_key[key] = by_key.get(key, 0) + 1
        fail = self.headers.get("X-Upstream-Fail")
        if fail:
            self.send_json(int(fail) if fail.isdigit() else 500, {"error": "upstream failure requested", "execution": n})
            return
        self.send_json(201, {"order_id": "ord_%d" % n, "execution": n, "idempotency_key": key,
                             "tenant": self.headers.get("X-Tenant-ID", ""), "order": order},
                       {"Location": "/orders/ord_%d" % n})

    def log_message(self, fmt, *args):
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    host, port = srv.server_address[:2]
    print("listening on http://%s:%d" % (host, port), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
