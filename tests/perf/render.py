#!/usr/bin/env python3
"""render.py: overhead.sh's (r): fills tokenclock's /metrics with 32 models on every endpoint and outcome, then times scrapes.

Usage: render.py PROXY_URL METRICS_URL PROXY_PID OUT_JSON [SCRAPES]

Every model (m00..m31) is sent to every API path the simulator speaks, each
plainly (ok), with x-sim-fault status=500 (http_error), abort=2
(upstream_error) and malformed, and once left by the client after its head
(client_cancelled); then SCRAPES (default 20) scrapes of /metrics, one
after the other. Reports the wall time of each scrape as the client saw it
(p50, max), the proxy's CPU time per scrape (utime+stime over all of them),
the series (sample lines) and the bytes of the exposition. Talks to
127.0.0.1 only.
"""
import concurrent.futures
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse

MODELS = [f"m{i:02d}" for i in range(32)]
PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
         "/generate_stream", "/api/chat", "/completion"]
FAULTS = [None, "status=500", "abort=2", "malformed"]


def body(path, model):
    if path in ("/generate_stream",):
        return {"inputs": "hello", "parameters": {"max_new_tokens": 8}, "stream": True}
    if path in ("/v1/completions", "/completion"):
        return {"model": model, "prompt": "hello", "max_tokens": 8, "stream": True}
    if path == "/v1/responses":
        return {"model": model, "input": "hello", "stream": True}
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": True}


def send(target, path, model, fault, leave):
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    headers = {"content-type": "application/json", "x-sim-schedule": "ttft_ms=1,gap_ms=1,tokens=8"}
    if fault:
        headers["x-sim-fault"] = fault
    if leave:
        headers["x-sim-schedule"] = "ttft_ms=1,gap_ms=200,tokens=8"
    try:
        conn.request("POST", path, json.dumps(body(path, model)), headers)
        response = conn.getresponse()
        if not leave:
            try:
                response.read()
            except (http.client.HTTPException, OSError):
                pass  # a cut stream (abort) is expected
    finally:
        conn.close()


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main():
    proxy, metrics, pid, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    scrapes = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    target = urllib.parse.urlsplit(proxy)
    jobs = [(p, m, f, False) for p in PATHS for m in MODELS for f in FAULTS]
    jobs += [(p, m, None, True) for p in PATHS for m in MODELS]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda j: send(target, *j), jobs))
    time.sleep(1)  # the client-left requests finish on the proxy
    m = urllib.parse.urlsplit(metrics)
    walls, size, series = [], 0, 0
    before = cpu_ticks(pid)
    for _ in range(scrapes):
        conn = http.client.HTTPConnection(m.hostname, m.port, timeout=60)
        start = time.perf_counter()
        conn.request("GET", "/metrics")
        text = conn.getresponse().read()
        walls.append((time.perf_counter() - start) * 1e3)
        conn.close()
        size = len(text)
        series = sum(1 for line in text.split(b"\n") if line and not line.startswith(b"#"))
    ticks = cpu_ticks(pid) - before
    result = {
        "requests": len(jobs), "scrapes": scrapes, "series": series, "bytes": size,
        "scrape_ms_p50": statistics.median(walls), "scrape_ms_max": max(walls),
        "cpu_ms_per_scrape": ticks / os.sysconf("SC_CLK_TCK") * 1e3 / scrapes,
    }
    with open(out, "w") as f:
        json.dump(result, f)
    print(f"overhead: (r) {series} series, {size / 1e6:.1f} MB: scrape p50 {result['scrape_ms_p50']:.1f} ms, "
          f"max {result['scrape_ms_max']:.1f} ms, proxy CPU {result['cpu_ms_per_scrape']:.1f} ms per scrape",
          file=sys.stderr)


if __name__ == "__main__":
    main()
