#!/usr/bin/env python3
"""summarize.py: medians of overhead.sh's raw results; prints the table and writes the JSON.

Usage: summarize.py RESULTS_DIR OUT_JSON QUICK REPS [T_REPS]

T_REPS: the repetitions of (t), which has its own count (0 or absent: not run).

Below the medians it prints tokenclock's figures against nginx's paired by
repetition (the two ran back to back, so a busy spell of the shared machine
touches both): the median of the per-repetition ratios, a distribution-free
95% interval for it, and a verdict that says "not told apart" unless the
whole interval is on one side of 1.0. A median of a few runs swings by 20%
or more on this machine (the in-proxy delay most); the interval says how
much of a difference the runs can show.
"""
import json
import math
import os
import statistics
import sys

VIAS = ["direct", "tokenclock", "nginx"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def runs(results, scenario, via):
    """Every repetition's (summary, extra) for one scenario and via, in order."""
    out, rep = [], 1
    while True:
        summary = load(os.path.join(results, f"{scenario}-{via}-{rep}.json"))
        if summary is None:
            return out
        extra = load(os.path.join(results, f"{scenario}-{via}-{rep}.{ {'a': 'none', 'y': 'none', 't': 'trace', 'b': 'cpu', 'w': 'cpu', 'v': 'cpu', 'c': 'rss', 'e': 'rss', 'h': 'rss', 'f': 'rss', 'r': 'none', 'i': 'ir', 's': 'cpu'}[scenario]}.json"))
        out.append((summary, extra or {}))
        rep += 1


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def cpu_us_per_event(summary, extra):
    events = summary["total"]["events"]
    if not extra.get("clk_tck") or not events:
        return None
    return extra["cpu_ticks"] / extra["clk_tck"] * 1e6 / events


def calls_per_event(summary, extra, key):
    events = summary["total"]["events"]
    return extra[key] / events if key in extra and events else None


def rss_kib_per_stream(extra):
    if not extra.get("streams"):
        return None
    return (extra["rss_with_kib"] - extra["rss_before_kib"]) / extra["streams"]


def per_via(results):
    """Median figures per via, and every repetition's raw figures."""
    medians, raw, errors = {}, {}, {}
    for via in VIAS:
        a, y, t, b, w, v, c, e_, h, f, r, i, s_ = (runs(results, s, via) for s in "aytbwvcehfris")
        shares = [load(os.path.join(results, f"s-{via}-{rep}.share.json")) or {}
                  for rep in range(1, len(s_) + 1)]
        figures = {
            "delay_p50_us": [s["event_delay_us"]["p50"] for s, _ in a],
            "delay_p99_us": [s["event_delay_us"]["p99"] for s, _ in a],
            "y_delay_p50_us": [s["event_delay_us"]["p50"] for s, _ in y],
            "y_delay_p99_us": [s["event_delay_us"]["p99"] for s, _ in y],
            "in_proxy_p50_us": [e.get("in_proxy_delay_us_p50") for _, e in t],
            "in_proxy_p99_us": [e.get("in_proxy_delay_us_p99") for _, e in t],
            "frames_per_wakeup_p50": [e.get("frames_per_wakeup_p50") for _, e in t],
            "frames_per_wakeup_mean": [e.get("frames_per_wakeup_mean") for _, e in t],
            "first_frame_p50_us": [e.get("first_frame_us_p50") for _, e in t],
            "first_frame_p99_us": [e.get("first_frame_us_p99") for _, e in t],
            "first_to_read_p50_us": [e.get("first_frame_to_read_us_p50") for _, e in t],
            "first_read_to_write_p50_us": [e.get("first_frame_read_to_write_us_p50") for _, e in t],
            "next_frame_p50_us": [e.get("next_frame_us_p50") for _, e in t],
            "next_frame_p99_us": [e.get("next_frame_us_p99") for _, e in t],
            "traced_frames": [e.get("frames") for _, e in t],
            "traced_unpaired_reads": [e.get("unpaired_reads") for _, e in t],
            "events_per_s": [s["events_per_s"] for s, _ in b],
            "cpu_us_per_event": [cpu_us_per_event(s, e) for s, e in b] if via != "direct" else [],
            "reads_per_event": [calls_per_event(s, e, "reads") for s, e in b],
            "writes_per_event": [calls_per_event(s, e, "writes") for s, e in b],
            "waits_per_event": [calls_per_event(s, e, "waits") for s, e in b],
            "w_events_per_s": [s["events_per_s"] for s, _ in w],
            "w_cpu_us_per_event": [cpu_us_per_event(s, e) for s, e in w] if via != "direct" else [],
            "w_reads_per_event": [calls_per_event(s, e, "reads") for s, e in w],
            "w_writes_per_event": [calls_per_event(s, e, "writes") for s, e in w],
            "w_waits_per_event": [calls_per_event(s, e, "waits") for s, e in w],
            "v_events_per_s": [s["events_per_s"] for s, _ in v],
            "v_cpu_us_per_event": [cpu_us_per_event(s, e) for s, e in v] if via != "direct" else [],
            "v_reads_per_event": [calls_per_event(s, e, "reads") for s, e in v],
            "v_writes_per_event": [calls_per_event(s, e, "writes") for s, e in v],
            "rss_kib_per_stream": [rss_kib_per_stream(e) for _, e in c],
            "e_rss_kib_per_stream": [rss_kib_per_stream(x) for _, x in e_],
            "h_rss_kib_per_request": [rss_kib_per_stream(e) for _, e in h],
            "f_rss_kib_per_stream": [rss_kib_per_stream(e) for _, e in f],
            "s_events_per_s": [s["events_per_s"] for s, _ in s_],
            "s_ceiling_per_core": [s["events_per_s"] * 100 / sh["share_pct"]
                                   for (s, _), sh in zip(s_, shares) if sh.get("share_pct")],
            "s_cpu_us_per_event": [cpu_us_per_event(s, e) for s, e in s_],
            "s_throttled_periods": [sh.get("throttled_periods") for sh in shares],
            "s_reads_per_event": [calls_per_event(s, e, "reads") for s, e in s_],
            "s_writes_per_event": [calls_per_event(s, e, "writes") for s, e in s_],
            "ir_per_event": [e.get("paced", {}).get("ir_per_event") for _, e in i],
            "ir_per_event_piled": [e.get("piled", {}).get("ir_per_event") for _, e in i],
            "ir_per_short_request": [e.get("short_request", {}).get("ir_per_request") for _, e in i],
            "ir_per_whole_request": [e.get("whole_request", {}).get("ir_per_request") for _, e in i],
            "scrape_ms_p50": [s["scrape_ms_p50"] for s, _ in r],
            "scrape_cpu_ms": [s["cpu_ms_per_scrape"] for s, _ in r],
            "scrape_series": [s["series"] for s, _ in r],
        }
        errors[via] = sum(s["total"]["errors"] for s, _ in a + y + t + b + w + v + c + e_ + h + f + i + s_)
        raw[via] = figures
        medians[via] = {k: median(v) for k, v in figures.items()}
    return medians, raw, errors


def sub(x, y):
    return None if x is None or y is None else x - y


def ratio(x, y):
    return None if x is None or y in (None, 0) else x / y


def rows(m):
    d, t, n = m["direct"], m["tokenclock"], m["nginx"]
    added = {k: (sub(t[k], d[k]), sub(n[k], d[k]))
             for k in ("delay_p50_us", "delay_p99_us", "y_delay_p50_us", "y_delay_p99_us")}
    out = [("(a) event delay p50, us", d["delay_p50_us"], t["delay_p50_us"], n["delay_p50_us"]),
           ("(a) event delay p99, us", d["delay_p99_us"], t["delay_p99_us"], n["delay_p99_us"]),
           ("(a) added delay p50, us", None, *added["delay_p50_us"]),
           ("(a) added delay p99, us", None, *added["delay_p99_us"]),
           ("(y) event delay p50, h2c client, us", d["y_delay_p50_us"], t["y_delay_p50_us"],
            n["y_delay_p50_us"]),
           ("(y) event delay p99, h2c client, us", d["y_delay_p99_us"], t["y_delay_p99_us"],
            n["y_delay_p99_us"]),
           ("(y) added delay p50, us", None, *added["y_delay_p50_us"]),
           ("(y) added delay p99, us", None, *added["y_delay_p99_us"]),
           ("(t) in-proxy delay p50, us", None, t["in_proxy_p50_us"], n["in_proxy_p50_us"]),
           ("(t) in-proxy delay p99, us", None, t["in_proxy_p99_us"], n["in_proxy_p99_us"]),
           ("(t) frames per wake-up, mean", None, t["frames_per_wakeup_mean"], n["frames_per_wakeup_mean"]),
           ("(t) first frame of wake-up p50, us", None, t["first_frame_p50_us"], n["first_frame_p50_us"]),
           ("(t) first frame of wake-up p99, us", None, t["first_frame_p99_us"], n["first_frame_p99_us"]),
           ("(t) wake-up to 1st read p50, us", None, t["first_to_read_p50_us"], n["first_to_read_p50_us"]),
           ("(t) 1st read to write p50, us", None, t["first_read_to_write_p50_us"],
            n["first_read_to_write_p50_us"]),
           ("(t) next frame in wake-up p50, us", None, t["next_frame_p50_us"], n["next_frame_p50_us"]),
           ("(t) next frame in wake-up p99, us", None, t["next_frame_p99_us"], n["next_frame_p99_us"]),
           ("(b) events/s", d["events_per_s"], t["events_per_s"], n["events_per_s"]),
           ("(b) proxy CPU per event, us", None, t["cpu_us_per_event"], n["cpu_us_per_event"]),
           ("(b) proxy reads per event", None, t["reads_per_event"], n["reads_per_event"]),
           ("(b) proxy writes per event", None, t["writes_per_event"], n["writes_per_event"]),
           ("(b) proxy epoll waits per event", None, t["waits_per_event"], n["waits_per_event"]),
           ("(w) events/s", d["w_events_per_s"], t["w_events_per_s"], n["w_events_per_s"]),
           ("(w) proxy CPU per event, us", None, t["w_cpu_us_per_event"], n["w_cpu_us_per_event"]),
           ("(w) proxy reads per event", None, t["w_reads_per_event"], n["w_reads_per_event"]),
           ("(w) proxy writes per event", None, t["w_writes_per_event"], n["w_writes_per_event"]),
           ("(w) proxy epoll waits per event", None, t["w_waits_per_event"], n["w_waits_per_event"]),
           ("(v) events/s, h2c client", d["v_events_per_s"], t["v_events_per_s"], n["v_events_per_s"]),
           ("(v) proxy CPU per event, us", None, t["v_cpu_us_per_event"], n["v_cpu_us_per_event"]),
           ("(v) proxy reads per event", None, t["v_reads_per_event"], n["v_reads_per_event"]),
           ("(v) proxy writes per event", None, t["v_writes_per_event"], n["v_writes_per_event"]),
           ("(s) events/s at the CPU quota", None, t["s_events_per_s"], n["s_events_per_s"]),
           ("(s) per-core ceiling, events/s", None, t["s_ceiling_per_core"], n["s_ceiling_per_core"]),
           ("(s) proxy CPU per event, us", None, t["s_cpu_us_per_event"], n["s_cpu_us_per_event"]),
           ("(s) proxy reads per event", None, t["s_reads_per_event"], n["s_reads_per_event"]),
           ("(s) proxy writes per event", None, t["s_writes_per_event"], n["s_writes_per_event"]),
           ("(s) quota periods throttled", None, t["s_throttled_periods"], n["s_throttled_periods"]),
           ("(i) user instr./event, paced", None, t["ir_per_event"], n["ir_per_event"]),
           ("(i) user instr./event, piled up", None, t["ir_per_event_piled"], n["ir_per_event_piled"]),
           ("(i) user instr./short paced request", None, t["ir_per_short_request"],
            n["ir_per_short_request"]),
           ("(i) user instr./whole request", None, t["ir_per_whole_request"],
            n["ir_per_whole_request"]),
           ("(c) proxy RSS per idle stream, KiB", None, t["rss_kib_per_stream"], n["rss_kib_per_stream"]),
           ("(e) RSS per idle h2c stream, KiB", None, t["e_rss_kib_per_stream"],
            n["e_rss_kib_per_stream"]),
           ("(h) proxy RSS per held request, KiB", None, t["h_rss_kib_per_request"],
            n["h_rss_kib_per_request"]),
           ("(f) peak RSS per flowing stream, KiB", None, t["f_rss_kib_per_stream"],
            n["f_rss_kib_per_stream"]),
           ("(r) /metrics series", None, t["scrape_series"], None),
           ("(r) /metrics scrape p50, ms", None, t["scrape_ms_p50"], None),
           ("(r) proxy CPU per scrape, ms", None, t["scrape_cpu_ms"], None)]
    return [{"metric": name, "direct": dv, "tokenclock": tv, "nginx": nv,
             "tokenclock_over_nginx": ratio(tv, nv),
             "tokenclock_over_direct": ratio(tv, dv), "nginx_over_direct": ratio(nv, dv)}
            for name, dv, tv, nv in out]


# The figures paired by repetition: (key in per_via's figures, row name,
# whether tokenclock's being lower is better). Those with a target against
# nginx in issue #14, and the instructions that explain them.
PAIRED = [
    ("in_proxy_p50_us", "(t) in-proxy delay p50", True),
    ("in_proxy_p99_us", "(t) in-proxy delay p99", True),
    ("first_frame_p50_us", "(t) first frame of wake-up p50", True),
    ("first_to_read_p50_us", "(t) first frame: wake-up to read p50", True),
    ("first_read_to_write_p50_us", "(t) first frame: read to write p50", True),
    ("next_frame_p50_us", "(t) next frame in wake-up p50", True),
    ("y_delay_p50_us", "(y) event delay p50, h2c client", True),
    ("y_delay_p99_us", "(y) event delay p99, h2c client", True),
    ("cpu_us_per_event", "(b) proxy CPU per event", True),
    ("w_cpu_us_per_event", "(w) proxy CPU per event", True),
    ("v_cpu_us_per_event", "(v) proxy CPU per event, h2c", True),
    ("s_events_per_s", "(s) events/s at the CPU quota", False),
    ("ir_per_event", "(i) user instr./event, paced", True),
    ("ir_per_whole_request", "(i) user instr./whole request", True),
    ("rss_kib_per_stream", "(c) proxy RSS per idle stream", True),
    ("e_rss_kib_per_stream", "(e) proxy RSS per idle h2c stream", True),
    ("h_rss_kib_per_request", "(h) proxy RSS per held request", True),
    ("f_rss_kib_per_stream", "(f) peak RSS per flowing stream", True),
]

CONFIDENCE = 0.95


def binomial_cdf(k, n):
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def median_interval(values, confidence=CONFIDENCE):
    """A distribution-free interval for the median of `values` (i.i.d.):
    the k-th smallest and the k-th largest, k the largest rank for which
    P(Binomial(n, 1/2) <= k - 1) <= (1 - confidence) / 2, so the interval
    misses the median with probability at most 1 - confidence. Returns
    (low, high, coverage), or None when there are too few values for that
    confidence (fewer than 6 for 95%)."""
    n = len(values)
    values = sorted(values)
    k = 0
    while k + 1 <= n and binomial_cdf(k, n) <= (1 - confidence) / 2:
        k += 1
    if k == 0:
        return None
    return values[k - 1], values[n - k], 1 - 2 * binomial_cdf(k - 1, n)


def paired(raw):
    """tokenclock against nginx, repetition by repetition, for each figure
    in PAIRED both measured: the ratios' median, its interval and a verdict."""
    out = []
    for key, name, lower_is_better in PAIRED:
        pairs = [(t, n) for t, n in zip(raw["tokenclock"].get(key, []), raw["nginx"].get(key, []))
                 if t is not None and n]
        if not pairs:
            continue
        ratios = [t / n for t, n in pairs]
        interval = median_interval(ratios)
        if interval is None:
            verdict = f"too few pairs for a {CONFIDENCE:.0%} interval"
        elif interval[1] < 1:
            verdict = "tokenclock's lower" + (" (better)" if lower_is_better else " (worse)")
        elif interval[0] > 1:
            verdict = "tokenclock's higher" + (" (worse)" if lower_is_better else " (better)")
        else:
            verdict = "not told apart"
        out.append({"metric": name, "key": key, "pairs": len(ratios),
                    "median_ratio": statistics.median(ratios),
                    "low": interval[0] if interval else None,
                    "high": interval[1] if interval else None,
                    "coverage": interval[2] if interval else None,
                    "tokenclock_lower": sum(r < 1 for r in ratios),
                    "verdict": verdict, "ratios": ratios})
    return out


def fmt(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def main():
    results, out, quick, reps = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
    t_reps = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    medians, raw, errors = per_via(results)
    table = rows(medians)
    header = f"{'metric':<36} {'direct':>10} {'tokenclock':>11} {'nginx':>10} {'tc/nginx':>9} {'tc/direct':>10} {'nginx/direct':>13}"
    print(header)
    for r in table:
        if all(r[k] is None for k in VIAS):
            continue  # a scenario or a --trace figure this run did not measure
        n = 2 if any(w in r["metric"] for w in ("reads", "writes", "waits")) else 1
        print(f"{r['metric']:<36} {fmt(r['direct'], n):>10} {fmt(r['tokenclock'], n):>11} {fmt(r['nginx'], n):>10} "
              f"{fmt(r['tokenclock_over_nginx'], 2):>9} {fmt(r['tokenclock_over_direct'], 2):>10} {fmt(r['nginx_over_direct'], 2):>13}")
    by_via = ", ".join(f"{via} {n}" for via, n in errors.items())
    print(f"medians of {reps} repetition(s){f', (t) of {t_reps}' if t_reps else ''}{' (--quick)' if quick else ''}; "
          f"failed requests: {sum(errors.values())} ({by_via})")
    pairs = paired(raw)
    if pairs:
        print(f"\ntokenclock/nginx paired by repetition: median ratio, {CONFIDENCE:.0%} interval (distribution-free)")
        print(f"{'metric':<36} {'pairs':>5} {'median':>7} {'interval':>13} {'tc lower':>9}  verdict")
        for p in pairs:
            interval = "-" if p["low"] is None else f"{p['low']:.2f}-{p['high']:.2f}"
            print(f"{p['metric']:<36} {p['pairs']:>5} {p['median_ratio']:>7.2f} {interval:>13} "
                  f"{p['tokenclock_lower']:>4}/{p['pairs']:<4}  {p['verdict']}")
    with open(out, "w") as f:
        json.dump({"quick": quick, "repetitions": reps, "t_repetitions": t_reps, "failed_requests": sum(errors.values()),
                   "failed_requests_by_via": errors, "nproc": os.cpu_count(),
                   "table": table, "medians": medians, "runs": raw, "paired": pairs}, f, indent=2)


if __name__ == "__main__":
    main()
