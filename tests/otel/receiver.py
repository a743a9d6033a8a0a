#!/usr/bin/env python3
"""A real OTLP/HTTP trace receiver for tests/it/otel.rs.

Decodes each POST /v1/traces body as an ExportTraceServiceRequest with the
official OpenTelemetry proto definitions (PyPI opentelemetry-proto) and keeps
the spans. GET /spans answers them as a JSON list; GET /raw answers every
request body received, concatenated, for content checks. A body that does
not decode is answered 400 and counted in GET /errors.

Usage: receiver.py [--delay SECONDS]  (prints "PORT <n>" once listening on
127.0.0.1; --delay makes every export wait, a slow collector).
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

LOCK = threading.Lock()
SPANS = []
RAW = bytearray()
ERRORS = []


def value(v):
    """An AnyValue as plain JSON."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def decode(body):
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append({
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start_unix_nano": span.start_time_unix_nano,
                    "end_unix_nano": span.end_time_unix_nano,
                    "attributes": attributes(span.attributes),
                    "status_code": span.status.code,
                    "flags": span.flags,
                    "scope": scope_spans.scope.name,
                    "resource": resource,
                })
    return spans


class Handler(BaseHTTPRequestHandler):
    delay = 0.0

    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.delay:
            time.sleep(self.delay)
        problem = None
        if self.path != "/v1/traces":
            problem = "path " + self.path
        elif self.headers.get("content-type") != "application/x-protobuf":
            problem = "content-type " + str(self.headers.get("content-type"))
        else:
            try:
                spans = decode(body)
            except DecodeError as e:
                problem = "decode: " + str(e)
        with LOCK:
            RAW.extend(body)
            if problem:
                ERRORS.append(problem)
            else:
                for span in spans:
                    span["headers"] = sorted(self.headers.keys())
                SPANS.extend(spans)
        if problem:
            self.answer(400, problem.encode(), "text/plain")
        else:
            response = trace_service_pb2.ExportTraceServiceResponse()
            self.answer(200, response.SerializeToString(), "application/x-protobuf")

    def do_GET(self):
        with LOCK:
            if self.path == "/spans":
                self.answer(200, json.dumps(SPANS).encode(), "application/json")
            elif self.path == "/raw":
                self.answer(200, bytes(RAW), "application/octet-stream")
            elif self.path == "/errors":
                self.answer(200, json.dumps(ERRORS).encode(), "application/json")
            else:
                self.answer(404, b"", "text/plain")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    Handler.delay = args.delay
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print("PORT", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
