//! The text exposition format (0.0.4), written from the gathered families
//! byte for byte as the `prometheus` crate's `TextEncoder` writes it, but
//! several times faster where the series are many.
//!
//! `TextEncoder` escapes every label of a series again on each of its lines
//! (a histogram has one line per bucket), formats each bucket bound and
//! each count through a fresh `String`, and writes piece by piece through
//! `io::Write`. Here a series' labels are escaped once, a family's bucket
//! bounds formatted once, integral values written with `itoa`, and all of
//! it appended to one buffer. The families with many series (histograms,
//! counters labelled by model: ~99% of the lines) do not go through the
//! registry at all: [`super::family`] writes them from their atomics with
//! [`header`], [`simple`], [`escape`] and [`value`] from here.

use std::io::Write as _;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

/// Appends the exposition of `families` to `out`.
#[cfg(test)]
pub(super) fn encode(families: &[MetricFamily], out: &mut Vec<u8>) {
    let mut encoder = Encoder::default();
    families.iter().for_each(|f| encoder.family(f, out));
}

/// Writes gathered families; keeps its scratch buffers from one family to
/// the next.
#[derive(Default)]
pub(super) struct Encoder {
    labels: Vec<u8>,
    prefix: Vec<u8>,
    bounds: Bounds,
}

impl Encoder {
    /// Appends the exposition of `family` to `out`.
    pub(super) fn family(&mut self, family: &MetricFamily, out: &mut Vec<u8>) {
        let name = family.name().as_bytes();
        let kind = family.get_field_type();
        header(family.name(), family.help(), type_name(kind), out);
        for metric in family.get_metric() {
            self.labels.clear();
            label_text(metric.get_label(), &mut self.labels);
            let line = Line {
                name,
                labels: &self.labels,
                timestamp: metric.timestamp_ms(),
            };
            match kind {
                MetricType::COUNTER => {
                    line.sample(b"", None, metric.get_counter().get_value(), out)
                }
                MetricType::GAUGE => line.sample(b"", None, metric.get_gauge().get_value(), out),
                MetricType::HISTOGRAM => {
                    line.histogram(metric, &mut self.bounds, &mut self.prefix, out)
                }
                MetricType::SUMMARY => line.summary(metric, out),
                // No collector here makes them (`TextEncoder` panics on them).
                MetricType::UNTYPED => {}
            }
        }
    }
}

/// `name` + `suffix`, `{labels}` unless there are none, the value and the
/// newline: a counter's line, or a histogram's `_sum` and `_count`.
pub(super) fn simple(name: &[u8], suffix: &[u8], labels: &[u8], v: f64, out: &mut Vec<u8>) {
    out.extend_from_slice(name);
    out.extend_from_slice(suffix);
    if !labels.is_empty() {
        out.push(b'{');
        out.extend_from_slice(labels);
        out.push(b'}');
    }
    out.push(b' ');
    value(v, out);
    out.push(b'\n');
}

/// A family's `# HELP` (unless the help is empty) and `# TYPE` lines.
pub(super) fn header(name: &str, help: &str, kind: &[u8], out: &mut Vec<u8>) {
    if !help.is_empty() {
        out.extend_from_slice(b"# HELP ");
        out.extend_from_slice(name.as_bytes());
        out.push(b' ');
        escape(help, false, out);
        out.push(b'\n');
    }
    out.extend_from_slice(b"# TYPE ");
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(kind);
    out.push(b'\n');
}

fn type_name(kind: MetricType) -> &'static [u8] {
    match kind {
        MetricType::COUNTER => b"counter",
        MetricType::GAUGE => b"gauge",
        MetricType::HISTOGRAM => b"histogram",
        MetricType::SUMMARY => b"summary",
        MetricType::UNTYPED => b"untyped",
    }
}

/// `k1="v1",k2="v2"`, escaped, without braces.
fn label_text(pairs: &[LabelPair], out: &mut Vec<u8>) {
    for (i, pair) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(pair.name().as_bytes());
        out.extend_from_slice(b"=\"");
        escape(pair.value(), true, out);
        out.push(b'"');
    }
}

/// Backslash and newline escaped (and `"` in label values), as the format
/// requires.
pub(super) fn escape(text: &str, quote: bool, out: &mut Vec<u8>) {
    for &b in text.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'"' if quote => out.extend_from_slice(b"\\\""),
            _ => out.push(b),
        }
    }
}

/// A value as `f64`'s `Display` writes it: integral values (most of them:
/// counts) through `itoa`, the rest through `Display` itself.
pub(super) fn value(v: f64, out: &mut Vec<u8>) {
    // Integers below 2^53 are exact; -0 keeps its sign in `Display`.
    if v.fract() == 0.0 && v.abs() < 9.0e15 && !(v == 0.0 && v.is_sign_negative()) {
        out.extend_from_slice(itoa::Buffer::new().format(v as i64).as_bytes());
    } else {
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{v}");
    }
}

/// The tails of the last histogram's bucket lines after their labels
/// (`le="0.005"} `), reused while the next series has the same bounds
/// (every series of a family does).
#[derive(Default)]
struct Bounds {
    bits: Vec<u64>,
    tails: Vec<Vec<u8>>,
}

impl Bounds {
    fn tails(&mut self, metric: &Metric) -> &[Vec<u8>] {
        let buckets = metric.get_histogram().get_bucket();
        let same = self.bits.len() == buckets.len()
            && buckets
                .iter()
                .zip(&self.bits)
                .all(|(b, &bits)| b.upper_bound().to_bits() == bits);
        if !same {
            self.bits = buckets.iter().map(|b| b.upper_bound().to_bits()).collect();
            self.tails = buckets
                .iter()
                .map(|b| format!("{}\"}} ", b.upper_bound()).into_bytes())
                .collect();
        }
        &self.tails
    }
}

/// What every line of one series shares.
struct Line<'a> {
    name: &'a [u8],
    labels: &'a [u8],
    timestamp: i64,
}

impl Line<'_> {
    /// `name{labels,extra} value [timestamp]`.
    fn sample(&self, suffix: &[u8], extra: Option<(&[u8], &[u8])>, v: f64, out: &mut Vec<u8>) {
        out.extend_from_slice(self.name);
        out.extend_from_slice(suffix);
        if !self.labels.is_empty() || extra.is_some() {
            out.push(b'{');
            out.extend_from_slice(self.labels);
            if let Some((key, text)) = extra {
                if !self.labels.is_empty() {
                    out.push(b',');
                }
                out.extend_from_slice(key);
                out.extend_from_slice(b"=\"");
                out.extend_from_slice(text);
                out.push(b'"');
            }
            out.push(b'}');
        }
        out.push(b' ');
        value(v, out);
        self.end(out);
    }

    /// The timestamp, if the series has one, and the newline.
    fn end(&self, out: &mut Vec<u8>) {
        if self.timestamp != 0 {
            out.push(b' ');
            out.extend_from_slice(itoa::Buffer::new().format(self.timestamp).as_bytes());
        }
        out.push(b'\n');
    }

    /// A histogram's lines; each bucket line is a prefix made once per
    /// series (`name_bucket{labels,le="`), a tail made once per family,
    /// and the count.
    fn histogram(
        &self,
        metric: &Metric,
        bounds: &mut Bounds,
        prefix: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) {
        let h = metric.get_histogram();
        prefix.clear();
        prefix.extend_from_slice(self.name);
        prefix.extend_from_slice(b"_bucket{");
        prefix.extend_from_slice(self.labels);
        if !self.labels.is_empty() {
            prefix.push(b',');
        }
        prefix.extend_from_slice(b"le=\"");
        let mut inf_seen = false;
        for (bucket, tail) in h.get_bucket().iter().zip(bounds.tails(metric)) {
            out.extend_from_slice(prefix);
            out.extend_from_slice(tail);
            out.extend_from_slice(
                itoa::Buffer::new()
                    .format(bucket.cumulative_count())
                    .as_bytes(),
            );
            self.end(out);
            inf_seen |= bucket.upper_bound() == f64::INFINITY;
        }
        let count = h.get_sample_count() as f64;
        if !inf_seen {
            self.sample(b"_bucket", Some((b"le", b"+Inf")), count, out);
        }
        self.sample(b"_sum", None, h.get_sample_sum(), out);
        self.sample(b"_count", None, count, out);
    }

    fn summary(&self, metric: &Metric, out: &mut Vec<u8>) {
        let s = metric.get_summary();
        for q in s.get_quantile() {
            let mut key = Vec::new();
            escape(&q.quantile().to_string(), true, &mut key);
            self.sample(b"", Some((b"quantile", &key)), q.value(), out);
        }
        self.sample(b"_sum", None, s.sample_sum(), out);
        self.sample(b"_count", None, s.sample_count() as f64, out);
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{
        Counter, Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry,
        TextEncoder,
    };
    use proptest::prelude::*;

    /// The crate's own encoder's text.
    fn reference(registry: &Registry) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .expect("encodes");
        String::from_utf8(out).expect("utf-8")
    }

    fn ours(registry: &Registry) -> String {
        let mut out = Vec::new();
        super::encode(&registry.gather(), &mut out);
        String::from_utf8(out).expect("utf-8")
    }

    /// The case proptest once shrank a failure to: a quote in the help
    /// text stays unescaped (only label values escape it).
    #[test]
    fn a_quote_in_help_is_written_as_is() {
        let registry = Registry::new();
        let counter = IntCounterVec::new(Opts::new("t_total", "\""), &["a"]).expect("counter");
        registry
            .register(Box::new(counter.clone()))
            .expect("register");
        counter.with_label_values(&[""]).inc();
        assert_eq!(ours(&registry), reference(&registry));
        assert!(ours(&registry).starts_with("# HELP t_total \"\n"));
    }

    proptest! {
        /// Same bytes as `TextEncoder` for counters, gauges and histograms
        /// with any label values (quotes, backslashes, newlines, unicode),
        /// any help text, and any observed values (fractions, huge,
        /// negative, zero, -0).
        #[test]
        fn writes_what_text_encoder_writes(
            values in prop::collection::vec(("[a-z\"\\\\\n é]{0,8}", -1e17f64..1e17), 1..12),
            help in "[a-z\"\\\\\n ]{1,20}",
            observations in prop::collection::vec(prop_oneof![
                Just(0.0), Just(-0.0), Just(1e15), Just(9.5e15), Just(0.1), -10.0f64..1e4,
            ], 0..20),
            bounds in prop::collection::btree_set(0u32..5000, 1..6),
        ) {
            let registry = Registry::new();
            let counter = IntCounterVec::new(Opts::new("t_total", help.clone()), &["a", "b"]).expect("counter");
            let bounds: Vec<f64> = bounds.into_iter().map(|b| f64::from(b) / 1000.0).collect();
            let histogram = HistogramVec::new(
                HistogramOpts::new("t_seconds", help.clone()).buckets(bounds), &["a"]).expect("histogram");
            let gauge = Gauge::new("t_gauge", "a gauge").expect("gauge");
            let plain = Counter::new("t_plain_total", "a plain counter").expect("counter");
            registry.register(Box::new(counter.clone())).expect("register");
            registry.register(Box::new(histogram.clone())).expect("register");
            registry.register(Box::new(gauge.clone())).expect("register");
            registry.register(Box::new(plain.clone())).expect("register");
            for (label, v) in &values {
                counter.with_label_values(&[label.as_str(), "x"]).inc_by(v.abs() as u64);
                let h = histogram.with_label_values(&[label.as_str()]);
                observations.iter().for_each(|&o| h.observe(o + v / 1e9));
                gauge.set(*v);
            }
            plain.inc_by(0.25);
            prop_assert_eq!(ours(&registry), reference(&registry));
        }
    }
}
