#!/usr/bin/env python3
"""Tests of in_proxy.py's pairing on hand-written `perf script` lines.

Usage: python3 tests/perf/in_proxy_test.py (run by tests/run.sh)
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import in_proxy  # noqa: E402


def trace(*lines):
    """Parsed events of `perf script -F tid,time,event,trace` lines given as
    (time in s, event, trace) of thread 7."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for t, event, rest in lines:
            f.write(f"     7  {t:.6f}:  syscalls:sys_{event}: {rest}\n")
    try:
        return list(in_proxy.parse(f.name))
    finally:
        os.unlink(f.name)


SLEEP = ("enter_epoll_wait", "epfd: 0x00000003, timeout: 0x00000009")


class InProxyTest(unittest.TestCase):
    def test_frames_of_one_wake_up_wait_behind_each_other(self):
        events = trace(
            (1.000000, *SLEEP),
            (1.001000, "exit_epoll_wait", "0x2"),
            (1.001004, "exit_recvfrom", "0xf4"),
            (1.001014, "exit_writev", "0xf4"),
            (1.001017, "exit_recvfrom", "0xf4"),
            (1.001027, "exit_writev", "0xf4"),
            (1.001030, *SLEEP),
            (1.020000, "exit_epoll_wait", "0x1"),
        )
        frames, per_wakeup, unpaired = in_proxy.frames(events)
        self.assertEqual([f.delay for f in frames], [14, 27])
        self.assertEqual(per_wakeup, [2])
        self.assertEqual(unpaired, 0)
        # The first frame waited behind none; the second, 13 us behind it.
        self.assertEqual([(f.position, f.since_previous) for f in frames], [(0, None), (1, 13)])

    def test_the_delay_splits_into_first_frame_and_next_frame(self):
        # Two wake-ups: one frame alone, then three frames in a burst.
        events = trace(
            (1.000000, *SLEEP),
            (1.001000, "exit_epoll_wait", "0x1"),
            (1.001003, "exit_recvfrom", "0xf4"),
            (1.001010, "exit_writev", "0xf4"),
            (1.001012, *SLEEP),
            (1.002000, "exit_epoll_wait", "0x3"),
            (1.002004, "exit_recvfrom", "0xf4"),
            (1.002012, "exit_writev", "0xf4"),
            (1.002014, "exit_recvfrom", "0xf4"),
            (1.002017, "exit_writev", "0xf4"),
            (1.002019, "exit_recvfrom", "0xf4"),
            (1.002023, "exit_writev", "0xf4"),
            (1.002025, *SLEEP),
            (1.020000, "exit_epoll_wait", "0x1"),
        )
        summary = in_proxy.summarize(*in_proxy.frames(events))
        self.assertEqual(summary["frames"], 4)
        self.assertEqual(summary["frames_per_wakeup_mean"], 2.0)
        self.assertEqual(summary["in_proxy_delay_us_p50"], 12)
        # First frames: 10 and 12 us; next frames: 5 and 6 us after the one before.
        self.assertEqual((summary["first_frame_us_p50"], summary["first_frame_us_p99"]), (10, 12))
        self.assertEqual((summary["next_frame_us_p50"], summary["next_frame_us_p99"]), (5, 6))
        # The first frames' reads returned 3 and 4 us after their wake-ups,
        # their writes 7 and 8 us after that.
        self.assertEqual(summary["first_frame_to_read_us_p50"], 3)
        self.assertEqual(summary["first_frame_read_to_write_us_p50"], 7)

    def test_nanoseconds_are_kept(self):
        # `perf script --ns`: a write 750 ns after its read, 2.25 us after
        # the wake-up.
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            for t, event, rest in (
                ("1.000000000", *SLEEP),
                ("1.001000000", "exit_epoll_wait", "0x1"),
                ("1.001001500", "exit_recvfrom", "0xf4"),
                ("1.001002250", "exit_writev", "0xf4"),
            ):
                f.write(f"     7  {t}:  syscalls:sys_{event}: {rest}\n")
        try:
            frames, _, _ = in_proxy.frames(in_proxy.parse(f.name))
        finally:
            os.unlink(f.name)
        self.assertEqual([(f.delay, f.to_read) for f in frames], [(2.25, 1.5)])

    def test_a_read_never_written_does_not_shift_later_frames(self):
        events = trace(
            (1.000000, *SLEEP),
            (1.001000, "exit_epoll_wait", "0x1"),
            (1.001005, "exit_recvfrom", "0x80"),  # a request head: no write follows
            (1.001010, "exit_recvfrom", "0xfffffffffffffff5"),  # EAGAIN
            (1.001020, *SLEEP),
            (1.002000, "exit_epoll_wait", "0x1"),
            (1.002005, "exit_recvfrom", "0xf4"),
            (1.002015, "exit_writev", "0xf4"),
            (1.002020, "exit_write", "0x0"),
        )
        frames, _, unpaired = in_proxy.frames(events)
        self.assertEqual([f.delay for f in frames], [15])
        self.assertEqual(unpaired, 1)

    def test_a_poll_without_sleep_keeps_the_burst_going(self):
        events = trace(
            (1.000000, *SLEEP),
            (1.001000, "exit_epoll_wait", "0x1"),
            (1.001005, "exit_recvfrom", "0xf4"),
            (1.001006, *SLEEP),
            (1.001008, "exit_epoll_wait", "0x1"),  # did not sleep: 2 us
            (1.001010, "exit_recvfrom", "0xf4"),
            (1.001020, "exit_writev", "0xf4"),
            (1.001030, "exit_writev", "0xf4"),
        )
        frames, per_wakeup, unpaired = in_proxy.frames(events)
        self.assertEqual([f.delay for f in frames], [20, 22])
        self.assertEqual(unpaired, 0)
        summary = in_proxy.summarize(frames, per_wakeup, unpaired)
        self.assertEqual((summary["in_proxy_delay_us_p50"], summary["in_proxy_delay_us_p99"]), (20, 22))


if __name__ == "__main__":
    unittest.main()
