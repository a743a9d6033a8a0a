//! Prometheus export: each finished [`Timeline`] becomes observations in
//! the families of [`families`], goodput counters per SLO, and the workload
//! map, served at `GET /metrics` (text format 0.0.4). The clocks that stop
//! early (TTFT, TTFO and the phases up to the first token) are observed
//! when the request reaches them ([`TimelineSink::progressed`]), the rest
//! at the end; [`stages`] counts where in-flight requests are; `capture`
//! reads what the request-body copies hold at each scrape; `text` writes
//! the exposition.
//!
//! Every family lives in one [`Metrics`] value: the histograms and the
//! counters labelled by model kept by `family` (a scrape writes them
//! straight from their atomics, without the registry's copy of every
//! series), the few other counters and gauges registered on an explicit
//! [`Registry`] (never the crate's global one). Label values come from
//! closed sets (enums, config) and the capped free-form [`LabelSpace`].
//! A request's series are resolved when a milestone is delivered and when
//! it finishes, most of them through the [`bundle`] of its endpoint and
//! label tuple, found once; nothing here runs per event.
//!
//! Public for the benchmarks (`tests/bench/metrics_render.rs`): [`Metrics::new`],
//! the [`TimelineSink`] the proxy hands finished timelines to, and
//! [`Metrics::encode`], the body `GET /metrics` serves.

mod bundle;
mod capture;
mod connections;
mod counter;
mod families;
mod family;
mod histogram;
mod labels;
mod milestones;
mod stages;
mod text;
mod upstream;

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc, OnceLock,
};

use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts, Registry};

use self::{
    bundle::{Bundle, Bundles, ByEndpoint, TokenKind},
    connections::ConnectionFamilies,
    families::Families,
    family::Exposed,
    stages::StageGauges,
    upstream::UpstreamFamilies,
};
pub(crate) use self::{
    connections::ConnectionMetrics,
    labels::{LabelCaps, LabelSpace, OTHER},
    upstream::{UpstreamHealthMetrics, UpstreamPoolMetrics},
};
use crate::{
    config::{range_label, Disabled, ExportSettings},
    measure::dialect::{Dialect, FinishReason},
    measure::slo,
    measure::slo::Slo,
    measure::timeline::{Milestone, Milestones, Outcome, Stage, Timeline, TimelineSink},
};

/// The exported families and what labels them; cheap to clone.
///
/// The families and the admitted label values are registered once and
/// shared for the life of the process; the [`View`] (caps, SLOs, ranges)
/// comes from the config and a reload replaces it for requests that start
/// afterwards, so no counter resets and no series is lost.
#[derive(Clone)]
pub struct Metrics {
    shared: Arc<Shared>,
    view: Arc<View>,
}

struct Shared {
    registry: Registry,
    families: Families,
    /// The families kept apart from `registry`, by name.
    owned: Vec<Box<dyn Exposed>>,
    connections: ConnectionFamilies,
    upstream: UpstreamFamilies,
    stages: StageGauges,
    labels: LabelSpace,
    /// The series of each endpoint and admitted label tuple.
    bundles: Bundles,
    /// `requests_in_flight`'s series by [`Dialect::index`], and
    /// `token_count_source_total`'s by source, each found on first use.
    in_flight: [OnceLock<IntGauge>; Dialect::ALL.len()],
    count_source: [OnceLock<IntCounter>; 4],
    /// Phases left out of their families (fixed at start, like families).
    disabled: Disabled,
    /// Bytes of the last exposition, to size the next one's buffer.
    rendered_bytes: AtomicUsize,
}

/// What a config reload may change about how requests are labelled.
struct View {
    caps: LabelCaps,
    slos: Vec<Slo>,
    input_ranges: Ranges,
    output_ranges: Ranges,
}

impl View {
    fn new(export: &ExportSettings) -> Self {
        Self {
            caps: LabelCaps::of(export),
            slos: export.slos.clone(),
            input_ranges: Ranges::new(&export.input_ranges),
            output_ranges: Ranges::new(&export.output_ranges),
        }
    }
}

/// Token-count ranges with their labels made once.
struct Ranges {
    bounds: Vec<u64>,
    labels: Vec<String>,
}

impl Ranges {
    fn new(bounds: &[u64]) -> Self {
        let labels = bounds.iter().map(|&b| range_label(bounds, b)).collect();
        Self {
            bounds: bounds.to_vec(),
            labels,
        }
    }

    fn label(&self, value: u64) -> &str {
        let i = self
            .bounds
            .partition_point(|&b| b <= value)
            .saturating_sub(1);
        self.labels.get(i).map_or(OTHER, String::as_str)
    }
}

/// Applies `use_it` to the series kept in `slots[i]`, found with `find`
/// on first use; a value with no slot (one added to its enum but not to
/// the array's length) is found every time instead.
fn kept<M>(slots: &[OnceLock<M>], i: usize, find: impl FnOnce() -> M, use_it: impl FnOnce(&M)) {
    match slots.get(i) {
        Some(slot) => use_it(slot.get_or_init(find)),
        None => use_it(&find()),
    }
}

// === impl Metrics ===

impl Metrics {
    /// Registers every family on a fresh registry, labelled as `export`
    /// says: what the proxy does once at start.
    pub fn new(export: &ExportSettings) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let build_info = IntGaugeVec::new(
            Opts::new(
                "tokenclock_build_info",
                "Always 1; the running version in `version`.",
            ),
            &["version"],
        )?;
        registry.register(Box::new(build_info.clone()))?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        #[cfg(target_os = "linux")]
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        // Counted since start by the log writer, which predates the registry.
        registry.register(Box::new(crate::export::logging::DroppedLines::new()?))?;
        let families = Families::register(&registry, export)?;
        let connections = ConnectionFamilies::register(&registry)?;
        let upstream = UpstreamFamilies::register(&registry)?;
        let stages = StageGauges::register(&registry)?;
        families.config_last_reload.set(unix_now());
        Ok(Self {
            shared: Arc::new(Shared {
                registry,
                owned: families.owned(),
                families,
                connections,
                upstream,
                stages,
                labels: LabelSpace::new(1 + export.labels.len()),
                bundles: Bundles::default(),
                in_flight: Default::default(),
                count_source: Default::default(),
                disabled: export.disabled.clone(),
                rendered_bytes: AtomicUsize::new(0),
            }),
            view: Arc::new(View::new(export)),
        })
    }

    /// The same families labelled by `export`'s caps, SLOs and ranges: what
    /// a config reload hands to requests that start afterwards. Label names
    /// and buckets stay those registered at start.
    pub(crate) fn reconfigured(&self, export: &ExportSettings) -> Self {
        Self {
            shared: self.shared.clone(),
            view: Arc::new(View::new(export)),
        }
    }

    /// The text exposition (format 0.0.4) of every family, the body the
    /// admin endpoint serves for `GET /metrics` (`export::admin`) on every
    /// scrape: the registry's families (gathered) and those kept apart
    /// from it (written from their atomics), merged in order of name.
    pub fn encode(&self) -> Vec<u8> {
        // Room for the last scrape's size and a little growth, so a large
        // exposition is not copied over and over as it grows.
        let last = self.shared.rendered_bytes.load(Ordering::Relaxed);
        let mut buffer = Vec::with_capacity((last + last / 8).max(64 * 1024));
        let gathered = self.shared.registry.gather();
        let mut encoder = text::Encoder::default();
        let mut owned = self.shared.owned.iter().peekable();
        for family in &gathered {
            while let Some(own) = owned.next_if(|own| own.name() < family.name()) {
                own.encode(&mut buffer);
            }
            encoder.family(family, &mut buffer);
        }
        owned.for_each(|own| own.encode(&mut buffer));
        self.shared
            .rendered_bytes
            .store(buffer.len(), Ordering::Relaxed);
        buffer
    }

    /// The connection series of one listener (`proxy` or `metrics`).
    pub(crate) fn connections(&self, listener: &str) -> ConnectionMetrics {
        self.shared.connections.listener(listener)
    }

    /// Scrapes refused while the most expositions were being sent.
    pub(crate) fn scrapes_refused(&self) -> IntCounter {
        self.shared.connections.scrapes_refused()
    }

    /// Requests refused because `max_connections` were in flight.
    pub(crate) fn requests_refused(&self) -> IntCounter {
        self.shared.connections.requests_refused()
    }

    /// The upstream health probe's series.
    pub(crate) fn upstream_health(&self) -> UpstreamHealthMetrics {
        self.shared.upstream.series()
    }

    /// The pools' series, with the budget of the copies kept to send
    /// requests again (`replay_total` bytes), exported here: called once.
    pub(crate) fn upstream_pool(
        &self,
        replay_total: usize,
    ) -> Result<UpstreamPoolMetrics, prometheus::Error> {
        let replay_copies = crate::measure::read::CaptureBudget::new(replay_total);
        let gauges = capture::CaptureGauges::replay(replay_copies.clone())?;
        self.shared.registry.register(Box::new(gauges))?;
        Ok(self.shared.upstream.pool(replay_copies))
    }

    /// Counts a config reload; a successful one also sets the time of the
    /// last successful load (the start counts as one).
    pub(crate) fn config_reloaded(&self, ok: bool) {
        let f = &self.shared.families;
        f.config_reloads
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .inc();
        if ok {
            f.config_last_reload.set(unix_now());
        }
    }

    /// Registers a family an exporter owns (e.g. the trace exporter's
    /// counters, present only when it runs).
    #[cfg(feature = "otel")]
    pub(crate) fn register(
        &self,
        collector: Box<dyn prometheus::core::Collector>,
    ) -> Result<(), prometheus::Error> {
        self.shared.registry.register(collector)
    }

    /// Exports what the copies of the request bodies in flight hold, read
    /// from `budget` at each scrape: the process's one budget, kept across
    /// reloads, so this is called once.
    pub(crate) fn watch_capture_budget(
        &self,
        budget: &crate::measure::read::CaptureBudget,
    ) -> Result<(), prometheus::Error> {
        let gauges = capture::CaptureGauges::new(budget.clone())?;
        self.shared.registry.register(Box::new(gauges))
    }

    /// The counter of records dropped by the record writer.
    pub(crate) fn records_dropped(&self) -> IntCounter {
        self.shared.families.records_dropped.clone()
    }
}

impl TimelineSink for Metrics {
    fn started(&self, dialect: Dialect) {
        self.in_flight(dialect, 1);
    }

    fn moved(&self, from: Dialect, to: Dialect) {
        self.in_flight(to, 1);
        self.in_flight(from, -1);
    }

    fn progressed(&self, t: &Timeline, milestones: Milestones) {
        let series = self.bundle(t);
        for milestone in milestones.iter() {
            self.milestone(&series, t, milestone);
        }
    }

    fn entered(&self, dialect: Dialect, stage: Stage) {
        self.shared.stages.entered(dialect, stage);
    }

    fn left(&self, dialect: Dialect, stage: Stage) {
        self.shared.stages.left(dialect, stage);
    }

    fn finished(&self, t: &Timeline) {
        let series = self.bundle(t);
        self.in_flight(t.dialect, -1);
        for milestone in Milestone::ALL {
            if !t.delivered.contains(milestone) {
                self.milestone(&series, t, milestone);
            }
        }
        self.latencies(&series, t);
        self.phases(&series, t);
        self.tokens(&series, t);
        self.outcome(&series, t);
    }
}

/// Now, in seconds since the Unix epoch.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

// === impl Metrics ===

impl Metrics {
    /// Moves `dialect`'s in-flight gauge by `delta`.
    fn in_flight(&self, dialect: Dialect, delta: i64) {
        let find = || (self.shared.families.in_flight).with_label_values(&[dialect.as_str()]);
        kept(&self.shared.in_flight, dialect.index(), find, |g| {
            g.add(delta)
        });
    }

    /// The series of `t`'s endpoint and admitted label tuple.
    fn bundle(&self, t: &Timeline) -> Arc<Bundle> {
        let free = (self.shared.labels).admit(&self.view.caps, t.model.as_deref(), &t.labels);
        self.shared.bundles.get(t.dialect, &free)
    }

    /// TPOT, the inter-event gaps, the inter-token latencies and the
    /// tokens per event; a series is made only for a request that has
    /// something to observe in it (an error response has no gaps).
    fn latencies(&self, s: &Bundle, t: &Timeline) {
        let f = &self.shared.families;
        // Each series is found (and so made) only once there is a value.
        if let Some(d) = t.tpot() {
            if let Some(series) = s.histogram(f, ByEndpoint::Tpot) {
                series.observe(d.as_secs_f64());
            }
        }
        let mut gaps = t.gaps.inter_event().peekable();
        if gaps.peek().is_some() {
            if let Some(series) = s.histogram(f, ByEndpoint::InterEvent) {
                let mut batch = series.batch();
                gaps.for_each(|gap| batch.observe_n(gap.as_secs_f64(), 1));
            }
        }
        if t.tokens.token_events == 0 {
            return;
        }
        if let Some(series) = s.histogram(f, ByEndpoint::EventTokens) {
            let mut batch = series.batch();
            t.tokens_per_event()
                .for_each(|n| batch.observe_n(n as f64, 1));
        }
        let mut latencies = t.inter_token_latencies().peekable();
        let itl = match latencies.peek() {
            Some(_) => s.histogram(f, ByEndpoint::Itl),
            None => None,
        };
        let mut itl = itl.map(|series| series.batch());
        if let Some(itl) = &mut itl {
            for (value, count) in latencies {
                itl.observe_n(value.as_secs_f64(), count);
            }
        }
    }

    /// The phases no milestone ends (those went with their milestone),
    /// and the server's.
    fn phases(&self, s: &Bundle, t: &Timeline) {
        let f = &self.shared.families;
        let off = &self.shared.disabled;
        for (phase, d) in t.phases().iter() {
            if Milestone::of_phase(phase).is_none() {
                self.phase(s, phase, Some(d));
            }
        }
        for (i, (_, d)) in t.server.phases().into_iter().enumerate() {
            if let Some(d) = d {
                if let Some(series) = s.server_phase(f, off, i) {
                    series.observe(d.as_secs_f64());
                }
            }
        }
    }

    /// Token counters count what every request spent; the per-request
    /// size histograms and the workload map only requests that ended `ok`
    /// with a response that was read, so failures and refusals do not
    /// pile up as zero-token requests.
    fn tokens(&self, s: &Bundle, t: &Timeline) {
        let f = &self.shared.families;
        let tokens = &t.tokens;
        let sized = t.outcome == Outcome::Ok && tokens.generated_source.is_some();
        if let Some(source) = tokens.generated_source {
            let find = || f.count_source.with_label_values(&[source.as_str()]);
            kept(&self.shared.count_source, source as usize, find, |c| {
                c.inc()
            });
            let answer = tokens.generated.saturating_sub(tokens.reasoning);
            for (kind, n) in [
                (TokenKind::Output, answer),
                (TokenKind::Reasoning, tokens.reasoning),
            ] {
                if let Some(series) = s.output_tokens_total(f, kind) {
                    series.inc_by(n);
                }
            }
        }
        if let Some(input) = tokens.input {
            if let Some(series) = s.input_tokens_total(f) {
                series.inc_by(input);
            }
        }
        for error in &t.parse_errors {
            f.parse_errors
                .with_label_values(&[s.endpoint(), error.as_str()])
                .inc();
        }
        if sized {
            self.sizes(s, t);
        }
    }

    /// The per-request token histograms and the workload map.
    fn sizes(&self, s: &Bundle, t: &Timeline) {
        let f = &self.shared.families;
        let tokens = &t.tokens;
        let observe = |which: ByEndpoint, n: Option<u64>| {
            if let Some(n) = n {
                if let Some(series) = s.histogram(f, which) {
                    series.observe(n as f64);
                }
            }
        };
        observe(ByEndpoint::OutputTokens, Some(tokens.generated));
        observe(ByEndpoint::ReasoningTokens, Some(tokens.reasoning));
        observe(ByEndpoint::InputTokens, tokens.input);
        observe(ByEndpoint::CachedInputTokens, tokens.cached_input);
        if let Some(workload) = &f.workload {
            let input = self.view.input_ranges.label(tokens.input.unwrap_or(0));
            let output = self.view.output_ranges.label(tokens.generated);
            workload.with_label_values(&s.with(&[input, output])).inc();
        }
    }

    fn outcome(&self, s: &Bundle, t: &Timeline) {
        let f = &self.shared.families;
        let endpoint = s.endpoint();
        let outcome = t.outcome.as_str();
        let mut digits = itoa::Buffer::new();
        let code = t.status.map_or("000", |c| digits.format(c.as_u16()));
        let finish = FinishReason::label(t.finish_class);
        f.requests
            .with_label_values(&s.with(&[endpoint, outcome, code, finish]))
            .inc();
        if let Some(e2e) = t.e2e() {
            if let Some(series) = s.duration(f, t.outcome) {
                series.observe(e2e.as_secs_f64());
            }
        }
        for judgement in slo::judge_all(&self.view.slos, t) {
            let result = if judgement.met { "met" } else { "missed" };
            let labels = s.with(&[endpoint, judgement.slo, result]);
            f.slo_requests.with_label_values(&labels).inc();
            for objective in judgement.violated {
                let labels = s.with(&[endpoint, judgement.slo, objective.as_str()]);
                f.slo_violations.with_label_values(&labels).inc();
            }
        }
    }
}

#[cfg(test)]
mod tests;
