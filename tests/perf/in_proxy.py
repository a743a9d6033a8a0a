#!/usr/bin/env python3
"""in_proxy.py: how long a proxy holds each frame it forwards, from a
`perf script --ns -F tid,time,event,trace` dump of its syscall tracepoints
(times in microseconds, kept to the nanosecond `--ns` prints; without it
perf prints whole microseconds, coarse for parts of a few).

Usage: in_proxy.py SCRIPT_TXT LABEL OUT_JSON

Per thread, a read that returned bytes is a frame coming in, and the next
write that returned bytes (first in, first out) is that frame going out: in
scenario (a) one event each way, as a proxy that neither buffers nor merges
events forwards them. A frame's in-proxy delay runs from the return of the
epoll_wait that last reported readiness before its read (when the proxy
learnt of it) to the return of its write: the wait behind the other frames
of the same wake-up, plus its own processing. Left out: the kernel's
wake-up latency, and the time a frame that arrived while the proxy was busy
sat in its socket until the next epoll_wait. A wake-up is an epoll_wait
that returned ready descriptors; frames per wake-up says how bursty the
traffic was.

The delay splits into what the proxy spends and what the traffic's bursts
make a frame wait, so that two proxies can be told apart when their bursts
differ (they do from run to run: the simulator and the client share a
core). A wake-up's first frame waits behind no other frame: its delay is
the proxy's wake-up path and one frame's processing ("first frame"). Each
further frame of the wake-up is written some time after the one before it:
one more frame's processing ("next frame", write to write). A frame at
position k of its wake-up waits roughly first frame + k x next frame.
The first frame is split once more at its read: from the wake-up to the
read's return is the proxy's way to the socket (its event loop, the
descent to the socket), from there to the write's return the frame's own
path.
"""
import json
import re
import sys
from collections import namedtuple

# An epoll_wait that took longer than this slept: the thread was idle.
BLOCKED_US = 20.0

LINE = re.compile(r"^\s*(\d+)\s+([\d.]+):\s+syscalls:sys_(enter|exit)_(\w+):\s*(.*)$")
READS = {"read", "readv", "recvfrom", "recvmsg"}
WRITES = {"write", "writev", "sendto", "sendmsg"}
WAITS = {"epoll_wait", "epoll_pwait", "epoll_pwait2"}


def parse(path):
    """(tid, time in us, syscall, return value or None on entry) per line."""
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            tid, t, kind, name, rest = m.groups()
            ret = None
            if kind == "exit":
                try:
                    ret = int(rest.strip(), 16)
                except ValueError:
                    continue
                if ret >= 1 << 63:
                    ret -= 1 << 64
            yield int(tid), round(float(t) * 1e6, 3), name, ret


# One forwarded frame: its in-proxy delay (us), its position in the wake-up
# that wrote it (0 for the first), the time since the write before it in
# that wake-up (us; None for the first), and the part of its delay before
# its read returned (us: for the first frame of a wake-up, the proxy's way
# from the wake-up to the socket; the rest is its read-to-write path).
Frame = namedtuple("Frame", "delay position since_previous to_read")


def frames(events):
    """Every frame forwarded (a Frame each), frame counts per wake-up, and
    reads never written before the thread slept (not paired, left out)."""
    threads, out, per_wakeup, unpaired = {}, [], [], 0
    for tid, t, name, ret in events:
        s = threads.setdefault(tid, {"entered": None, "woke": None, "pending": [], "count": 0, "last": None})
        if ret is None:
            if name in WAITS:
                s["entered"] = t
            continue
        if name in WAITS:
            if s["entered"] is not None and t - s["entered"] > BLOCKED_US:
                # The thread slept: whatever it read and did not write is
                # not a forwarded frame (a request head, the end of a body).
                unpaired += len(s["pending"])
                s["pending"] = []
            if ret > 0:
                if s["woke"] is not None:
                    per_wakeup.append(s["count"])
                s["woke"], s["count"], s["last"] = t, 0, None
        elif ret <= 0:
            continue
        elif name in READS and s["woke"] is not None:
            s["pending"].append((s["woke"], t))
        elif name in WRITES and s["pending"]:
            gap = None if s["last"] is None else t - s["last"]
            woke, read = s["pending"].pop(0)
            out.append(Frame(t - woke, s["count"], gap, read - woke))
            s["count"] += 1
            s["last"] = t
    return out, [n for n in per_wakeup if n], unpaired


def pct(values, p):
    if not values:
        return None
    values = sorted(values)
    rank = max(1, -(-p * len(values) // 100))
    return values[int(rank) - 1]


def summarize(frames_, per_wakeup, unpaired):
    delays = [f.delay for f in frames_]
    first = [f.delay for f in frames_ if f.position == 0]
    first_to_read = [f.to_read for f in frames_ if f.position == 0]
    first_read_to_write = [f.delay - f.to_read for f in frames_ if f.position == 0]
    nexts = [f.since_previous for f in frames_ if f.since_previous is not None]
    return {
        "frames": len(delays),
        "unpaired_reads": unpaired,
        "wakeups": len(per_wakeup),
        "frames_per_wakeup_p50": pct(per_wakeup, 50),
        "frames_per_wakeup_mean": sum(per_wakeup) / len(per_wakeup) if per_wakeup else None,
        "frames_per_wakeup_max": max(per_wakeup, default=None),
        "in_proxy_delay_us_p50": pct(delays, 50),
        "in_proxy_delay_us_p99": pct(delays, 99),
        "in_proxy_delay_us_max": max(delays, default=None),
        "first_frame_us_p50": pct(first, 50),
        "first_frame_us_p99": pct(first, 99),
        "first_frame_to_read_us_p50": pct(first_to_read, 50),
        "first_frame_read_to_write_us_p50": pct(first_read_to_write, 50),
        "next_frame_us_p50": pct(nexts, 50),
        "next_frame_us_p99": pct(nexts, 99),
    }


def main():
    path, label, out = sys.argv[1:4]
    result = summarize(*frames(parse(path)))
    result["via"] = label
    with open(out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
