#!/usr/bin/env python3
"""compressing_upstream.py: an OpenAI-style upstream that compresses its
answers with CODING whenever the client accepts it, as OpenAI's API and
its CDN do with brotli, and other providers with zstd, for
tests/it/clients.rs: `br` with Google's encoder (the `brotli` package),
`zstd` with Facebook's (the `zstandard` package).

Usage: compressing_upstream.py CODING (prints the port it listens on, on
127.0.0.1)

POST /v1/chat/completions (its body by length or chunked) answers
`max_tokens` words: streamed (SSE, one
chat chunk per word, the compressor flushed after each, a few milliseconds
apart, then the usage chunk if asked and `[DONE]`), or whole (one JSON
body). GET /v1/models lists one model; GET /stats says how many answers
went out compressed. It serves
until its stdin closes or it is killed.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import brotli
import zstandard

CODING = sys.argv[1] if len(sys.argv) > 1 else "br"
STATS = {"compressed": 0}
LOCK = threading.Lock()


def words(n):
    return [f" word{i}" for i in range(n)]


def accepted_codings(header):
    """The codings an `Accept-Encoding` value accepts (not those at q=0)."""
    accepted = set()
    for item in header.split(","):
        name, *params = [p.strip() for p in item.split(";")]
        q = next((p[2:] for p in params if p.startswith("q=")), "1")
        if name and float(q or 0) > 0:
            accepted.add(name.lower())
    return accepted


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            return self.answer(200, body, "application/json", None)
        if self.path != "/stats":
            return self.answer(404, b"{}", "application/json", None)
        with LOCK:
            body = json.dumps(STATS).encode()
        self.answer(200, body, "application/json", None)

    def body(self):
        """The request body, by its length or chunked."""
        if "chunked" not in (self.headers.get("transfer-encoding") or ""):
            return self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return body
            body += self.rfile.read(size)
            self.rfile.readline()

    def do_POST(self):
        request = json.loads(self.body() or b"{}")
        accepted = self.headers.get("accept-encoding") or ""
        br = CODING in accepted_codings(accepted)
        if br:
            with LOCK:
                STATS["compressed"] += 1
        n = int(request.get("max_tokens") or 8)
        usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
        if not request.get("stream"):
            body = json.dumps({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": request.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(words(n))},
                             "finish_reason": "length"}],
                "usage": usage,
            }).encode()
            return self.answer(200, whole(body) if br else body, "application/json", br)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        if br:
            self.send_header("content-encoding", CODING)
        self.end_headers()
        compressor = Stream() if br else None

        def send(data):
            if compressor is not None:
                data = compressor.flushed(data)
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
            self.send_header("content-encoding", CODING)
        self.end_headers()
        self.wfile.write(body)


def whole(body):
    """`body` compressed whole."""
    if CODING == "zstd":
        return zstandard.ZstdCompressor().compress(body)
    return brotli.compress(body)


class Stream:
    """A streaming server's compressor, flushed after each event."""

    def __init__(self):
        if CODING == "zstd":
            self.zstd = zstandard.ZstdCompressor(level=3).compressobj()
        else:
            self.br = brotli.Compressor(quality=4, lgwin=22)

    def flushed(self, data):
        if CODING == "zstd":
            return self.zstd.compress(data) + self.zstd.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        return self.br.process(data) + self.br.flush()

    def finish(self):
        if CODING == "zstd":
            return self.zstd.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)
        return self.br.finish()


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()


if __name__ == "__main__":
    main()
