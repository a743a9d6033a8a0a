#!/usr/bin/env python3
"""Tests of summarize.py's pairing of tokenclock's figures with nginx's.

Usage: python3 tests/perf/summarize_test.py (run by tests/run.sh)
"""
import contextlib
import io
import json
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize  # noqa: E402


def raw(tokenclock, nginx, key="in_proxy_p50_us"):
    """per_via's raw figures with one figure measured."""
    return {"tokenclock": {key: tokenclock}, "nginx": {key: nginx}}


class MedianIntervalTest(unittest.TestCase):
    def test_too_few_values_have_no_interval(self):
        # Five values: even the widest interval (min, max) misses the median
        # with probability 2/32 > 5%.
        self.assertIsNone(summarize.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]))

    def test_six_values_span_their_range(self):
        low, high, coverage = summarize.median_interval([3.0, 1.0, 6.0, 2.0, 5.0, 4.0])
        self.assertEqual((low, high), (1.0, 6.0))
        self.assertAlmostEqual(coverage, 1 - 2 / 64)

    def test_sixteen_values_drop_three_at_each_end(self):
        values = [float(v) for v in range(1, 17)]
        random.Random(7).shuffle(values)
        low, high, coverage = summarize.median_interval(values)
        # P(B(16, 1/2) <= 3) = 697/65536 <= 2.5% < P(B <= 4) = 2517/65536.
        self.assertEqual((low, high), (4.0, 13.0))
        self.assertAlmostEqual(coverage, 1 - 2 * 697 / 65536)

    def test_the_interval_is_the_narrowest_that_keeps_the_confidence(self):
        for n in range(6, 41):
            values = list(range(n))
            low, _, coverage = summarize.median_interval(values)
            k = low + 1
            self.assertGreaterEqual(coverage, 0.95, n)
            # One rank further in would miss the median too often.
            self.assertGreater(summarize.binomial_cdf(k, n), 0.025, n)


class PairedTest(unittest.TestCase):
    def test_lower_in_every_pair_of_eight_is_told_apart(self):
        (p,) = summarize.paired(raw([9.0] * 8, [10.0] * 8))
        self.assertEqual(p["verdict"], "tokenclock's lower (better)")
        self.assertEqual((p["pairs"], p["tokenclock_lower"]), (8, 8))
        self.assertAlmostEqual(p["median_ratio"], 0.9)

    def test_more_events_per_second_is_better(self):
        (p,) = summarize.paired(raw([11.0] * 6, [10.0] * 6, key="s_events_per_s"))
        self.assertEqual(p["verdict"], "tokenclock's higher (better)")

    def test_more_cpu_is_worse(self):
        (p,) = summarize.paired(raw([11.0] * 6, [10.0] * 6, key="cpu_us_per_event"))
        self.assertEqual(p["verdict"], "tokenclock's higher (worse)")

    def test_a_median_below_one_is_not_enough(self):
        # Lower in five of eight, but the interval (the extremes) spans 1.0.
        tc = [0.8, 0.9, 0.95, 0.97, 0.99, 1.1, 1.2, 1.5]
        (p,) = summarize.paired(raw(tc, [1.0] * 8))
        self.assertLess(p["median_ratio"], 1.0)
        self.assertEqual(p["verdict"], "not told apart")
        self.assertEqual((p["low"], p["high"]), (0.8, 1.5))

    def test_pairs_stay_with_their_repetition(self):
        # Repetition 2 of tokenclock has no figure: its pair is dropped, and
        # repetition 3 is still compared with nginx's repetition 3.
        (p,) = summarize.paired(raw([1.0, None, 3.0], [2.0, 100.0, 3.0]))
        self.assertEqual(p["ratios"], [0.5, 1.0])
        self.assertEqual(p["verdict"], "too few pairs for a 95% interval")

    def test_figures_not_measured_are_left_out(self):
        self.assertEqual(summarize.paired(raw([], [])), [])


class MainTest(unittest.TestCase):
    def test_the_table_and_the_json_carry_the_verdict(self):
        with tempfile.TemporaryDirectory() as d:
            results = os.path.join(d, "results")
            os.mkdir(results)
            for rep in range(1, 7):
                for via, delay in (("tokenclock", 40.0 + rep), ("nginx", 50.0 + rep)):
                    with open(os.path.join(results, f"t-{via}-{rep}.json"), "w") as f:
                        json.dump({"total": {"events": 100, "errors": 0}}, f)
                    with open(os.path.join(results, f"t-{via}-{rep}.trace.json"), "w") as f:
                        json.dump({"in_proxy_delay_us_p50": delay, "frames": 100}, f)
            out = os.path.join(d, "out.json")
            argv, sys.argv = sys.argv, ["summarize.py", results, out, "0", "1", "6"]
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    summarize.main()
            finally:
                sys.argv = argv
            with open(out) as f:
                pairs = {p["key"]: p for p in json.load(f)["paired"]}
        self.assertEqual(list(pairs), ["in_proxy_p50_us"])
        self.assertEqual(pairs["in_proxy_p50_us"]["verdict"], "tokenclock's lower (better)")
        self.assertAlmostEqual(pairs["in_proxy_p50_us"]["high"], 46.0 / 56.0)
        self.assertIn("(t) in-proxy delay p50", printed.getvalue().split("paired by repetition")[1])


if __name__ == "__main__":
    unittest.main()
