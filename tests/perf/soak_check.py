#!/usr/bin/env python3
"""soak_check.py: the scrapes and checks of soak.sh.

    soak_check.py scrape URL FILE        the metrics page at URL into FILE
    soak_check.py check DIR N CONC OUT RSS
                                         compares DIR's samples (see soak.sh),
                                         prints a table, writes OUT (JSON),
                                         exits 1 if a check fails (the RSS
                                         check only when RSS is "fail")
"""

import json
import re
import sys
import urllib.request
from collections import Counter

# The endpoint label of each path the soak sends to.
ENDPOINTS = {
    "/v1/chat/completions": "openai_chat",
    "/v1/completions": "openai_completions",
    "/v1/responses": "openai_responses",
    "/v1/messages": "anthropic",
    "/api/chat": "ollama",
    "/api/generate": "ollama",
    # TGI's and SGLang's; the simulator answers it as SGLang does, its
    # error statuses too (an `error` object), so every request is SGLang's.
    "/generate": "sglang",
    "/generate_stream": "tgi",
    "/completion": "llamacpp",
    "/v1/audio/transcriptions": "openai_audio",
    "/v1/embeddings": "openai_embeddings",
    "/api/embed": "ollama_embed",
    "/v1/rerank": "rerank",
    "/classify": "pooling",
    # TEI's, read from its head.
    "/embed": "tei",
}
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
RSS_SLACK = 0.10


def scrape(url, path):
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    with open(path, "w") as f:
        f.write(text)


def samples(path):
    """(name, labels dict, value) for each sample line of a metrics page."""
    out = []
    with open(path) as f:
        for line in f:
            m = SAMPLE.match(line.strip())
            if m and not line.startswith("#"):
                out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def sums(path):
    """The counts soak.sh compares, from one scrape."""
    by = Counter()
    for name, labels, value in samples(path):
        if name == "tokenclock_requests_total":
            by["requests"] += value
            by["endpoint:" + labels.get("endpoint", "")] += value
            by["outcome:" + labels.get("outcome", "")] += value
            by["code:" + labels.get("code", "")] += value
        elif name == "tokenclock_request_duration_seconds_count":
            by["e2e_count"] += value
        elif name == "tokenclock_requests_in_flight":
            by["in_flight"] += value
    return by


def client_side(summary):
    """What the load generator saw: per endpoint, ok, and errors by kind."""
    by = Counter()
    for w in summary["workloads"]:
        path = next((p for p in w["name"].split(" ") if p.startswith("/")), "/v1/chat/completions")
        by["endpoint:" + ENDPOINTS[path]] += w["requests"]
    return by


def read(path):
    with open(path) as f:
        return f.read().strip()


def check(tmp, requests, concurrency, out, rss_mode):
    summary = json.load(open(f"{tmp}/soak.json"))
    total = summary["total"]
    warm, end = sums(f"{tmp}/warm.metrics"), sums(f"{tmp}/end.metrics")
    delta = {k: end[k] - warm[k] for k in set(end) | set(warm) if k != "in_flight"}
    kinds = summary.get("errors_by_kind", {})
    client = client_side(summary)
    rss = {"warm": int(read(f"{tmp}/warm.rss")), "end": int(read(f"{tmp}/end.rss"))}
    fds = {"warm": int(read(f"{tmp}/warm.fds")), "end": int(read(f"{tmp}/end.fds"))}
    endpoints = sorted(k for k in set(client) | {k for k in delta if k.startswith("endpoint:")} if delta.get(k, 0) or client.get(k, 0))
    checks = [
        ("client finished every request", total["requests"] == requests and total["cancelled"] == 0,
         f'{total["requests"]} of {requests}, {total["cancelled"]} cancelled'),
        ("requests_total counted each once", delta.get("requests", 0) == total["requests"],
         f'{delta.get("requests", 0):.0f} vs {total["requests"]}'),
        ("E2E histogram _count counted each once", delta.get("e2e_count", 0) == total["requests"],
         f'{delta.get("e2e_count", 0):.0f} vs {total["requests"]}'),
        ("ok outcomes match the client's", delta.get("outcome:ok", 0) == total["ok"],
         f'{delta.get("outcome:ok", 0):.0f} vs {total["ok"]}'),
        ("429 and 500 codes match the client's",
         all(delta.get(f"code:{c}", 0) == kinds.get(f"http_{c}", 0) for c in (429, 500)),
         ", ".join(f'{c}: {delta.get(f"code:{c}", 0):.0f} vs {kinds.get(f"http_{c}", 0)}' for c in (429, 500))),
        ("each endpoint counted its own",
         all(delta.get(k, 0) == client.get(k, 0) for k in endpoints),
         ", ".join(f'{k[9:]} {delta.get(k, 0):.0f}/{client.get(k, 0)}' for k in endpoints)),
        ("nothing left in flight", end["in_flight"] == 0, f'{end["in_flight"]:.0f}'),
        # The simulator fails streams only after their heads (and 429s and
        # 500s are heads), so a request that failed without one lost what
        # the upstream sent: over HTTP/2, a stream cut right behind its
        # head once reached the client as a bare RST_STREAM.
        ("every head reached the client", kinds.get("request", 0) == 0,
         f'{kinds.get("request", 0)} requests failed without a head'),
        # A leak check: RSS may fall (jemalloc hands back pages it no
        # longer uses), but not grow past the slack.
        (f"RSS at the end at most {RSS_SLACK:.0%} above after warm-up",
         rss["end"] <= (1 + RSS_SLACK) * rss["warm"],
         f'{rss["warm"]} KiB -> {rss["end"]} KiB'),
        ("no fd growth", fds["end"] <= fds["warm"], f'{fds["warm"]} -> {fds["end"]}'),
    ]
    result = {
        "requests": requests,
        "concurrency": concurrency,
        "elapsed_s": summary["elapsed_s"],
        "requests_per_s": summary["requests_per_s"],
        "events_per_s": summary["events_per_s"],
        "client": {"ok": total["ok"], "errors": total["errors"], "cancelled": total["cancelled"],
                   "errors_by_kind": kinds},
        "proxy": {k: v for k, v in sorted(delta.items())},
        "rss_kib": rss,
        "fds": fds,
        "checks": [{"check": name, "passed": ok, "figures": figures} for name, ok, figures in checks],
        "passed": all(ok for _, ok, _ in checks),
        "rss_check": rss_mode,
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f'soak: {requests} requests at concurrency {concurrency} in {summary["elapsed_s"]:.0f} s '
          f'({summary["requests_per_s"]:.0f} requests/s); client errors by kind: {kinds}')
    for name, ok, figures in checks:
        print(f'  {"ok  " if ok else "FAIL"} {name}: {figures}')
    print(f"soak: JSON written to {out}")
    enforced = [ok for name, ok, _ in checks if rss_mode == "fail" or not name.startswith("RSS")]
    if rss_mode != "fail":
        print("soak: the RSS check is reported only (--rss-warn-only)")
    return 0 if all(enforced) else 1


def main(argv):
    if len(argv) == 4 and argv[1] == "scrape":
        scrape(argv[2], argv[3])
        return 0
    if len(argv) == 7 and argv[1] == "check":
        return check(argv[2], int(argv[3]), int(argv[4]), argv[5], argv[6])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
