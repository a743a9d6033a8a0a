#!/usr/bin/env python3
"""brotli_upstream.py: an OpenAI-style upstream that compresses its answers
with brotli (Google's encoder, the `brotli` package) whenever the client
accepts `br`, as OpenAI's API and its CDN do, for tests/it/clients.rs.

Usage: brotli_upstream.py (prints the port it listens on, on 127.0.0.1)

POST /v1/chat/completions answers `max_tokens` words: streamed (SSE, one
chat chunk per word, the compressor flushed after each, a few milliseconds
apart, then the usage chunk if asked and `[DONE]`), or whole (one JSON
body). GET /stats says how many answers went out in brotli. It serves
until its stdin closes or it is killed.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import brotli

STATS = {"br": 0}
LOCK = threading.Lock()


def words(n):
    return [f" word{i}" for i in range(n)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path != "/stats":
            return self.answer(404, b"{}", "application/json", None)
        with LOCK:
            body = json.dumps(STATS).encode()
        self.answer(200, body, "application/json", None)

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        accepted = self.headers.get("accept-encoding") or ""
        br = "br" in [c.split(";")[0].strip() for c in accepted.split(",")]
        if br:
            with LOCK:
                STATS["br"] += 1
        n = int(request.get("max_tokens") or 8)
        usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
        if not request.get("stream"):
            body = json.dumps({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": request.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(words(n))},
                             "finish_reason": "length"}],
                "usage": usage,
            }).encode()
            return self.answer(200, brotli.compress(body) if br else body, "application/json", br)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        if br:
            self.send_header("content-encoding", "br")
        self.end_headers()
        compressor = brotli.Compressor(quality=4, lgwin=22) if br else None

        def send(data):
            if compressor is not None:
                data = compressor.process(data) + compressor.flush()
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        def chunk(delta, finish=None, usage=None):
            return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                    "model": request.get("model"),
                    "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
                    "usage": usage}

        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": w}) for w in words(n)]
        events.append(chunk({}, finish="length"))
        if (request.get("stream_options") or {}).get("include_usage"):
            events.append(chunk(None, usage=usage))
        for event in events:
            send(b"data: " + json.dumps(event).encode() + b"\n\n")
            time.sleep(0.005)
        send(b"data: [DONE]\n\n")
        end = compressor.finish() if compressor is not None else b""
        if end:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(end), end))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def answer(self, status, body, content_type, br):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        if br:
            self.send_header("content-encoding", "br")
        self.end_headers()
        self.wfile.write(body)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()


if __name__ == "__main__":
    main()
