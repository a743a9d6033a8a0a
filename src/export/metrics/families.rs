//! Every exported family, created and registered in one place. Closed-set
//! labels come first and free-form ones (`model`, extra labels) last; see
//! [`super::labels`] for why.

use prometheus::{Gauge, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::{counter::CounterFamily, family::Exposed, histogram::HistogramFamily};
use crate::{config::ExportSettings, export::records};

/// The families; each `*Vec` takes its closed labels, then the free ones.
/// A family is `None` when `[metrics] disable` leaves it out: it is neither
/// registered nor observed.
#[derive(Clone)]
pub(super) struct Families {
    pub ttft: Option<HistogramFamily>,
    pub ttfo: Option<HistogramFamily>,
    pub itl: Option<HistogramFamily>,
    pub inter_event: Option<HistogramFamily>,
    pub tpot: Option<HistogramFamily>,
    pub duration: Option<HistogramFamily>,
    pub phase: Option<HistogramFamily>,
    pub server_phase: Option<HistogramFamily>,
    pub input_tokens: Option<HistogramFamily>,
    pub cached_input_tokens: Option<HistogramFamily>,
    pub output_tokens: Option<HistogramFamily>,
    pub reasoning_tokens: Option<HistogramFamily>,
    pub event_tokens: Option<HistogramFamily>,
    pub requests: CounterFamily,
    pub in_flight: IntGaugeVec,
    pub input_tokens_total: CounterFamily,
    pub output_tokens_total: CounterFamily,
    pub count_source: IntCounterVec,
    pub parse_errors: IntCounterVec,
    pub slo_requests: CounterFamily,
    pub slo_violations: CounterFamily,
    pub workload: Option<CounterFamily>,
    pub records_dropped: IntCounter,
    pub config_reloads: IntCounterVec,
    pub config_last_reload: Gauge,
}

struct Builder<'a> {
    registry: &'a Registry,
    export: &'a ExportSettings,
    free: Vec<String>,
}

impl Builder<'_> {
    fn labels(&self, closed: &[&str]) -> Vec<String> {
        closed
            .iter()
            .map(|s| s.to_string())
            .chain(self.free.iter().cloned())
            .collect()
    }

    /// The histogram family `name`, unless it is disabled. Histograms are
    /// kept out of the registry ([`super::histogram`]).
    fn histogram(
        &self,
        name: &str,
        help: &str,
        closed: &[&str],
    ) -> Result<Option<HistogramFamily>, prometheus::Error> {
        if self.export.disabled.family(name) {
            return Ok(None);
        }
        let bounds = self.export.buckets.get(name).cloned().unwrap_or_default();
        let labels = self.labels(closed);
        let names: Vec<&str> = labels.iter().map(String::as_str).collect();
        let family = HistogramFamily::new(&format!("tokenclock_{name}"), help, &names, &bounds)?;
        Ok(Some(family))
    }

    /// A counter family without free labels, registered.
    fn counter(
        &self,
        name: &str,
        help: &str,
        closed: &[&str],
    ) -> Result<IntCounterVec, prometheus::Error> {
        let vec = IntCounterVec::new(Opts::new(format!("tokenclock_{name}"), help), closed)?;
        self.registry.register(Box::new(vec.clone()))?;
        Ok(vec)
    }
}

impl Builder<'_> {
    /// The counter family `name` with the free labels after `closed`, kept
    /// out of the registry ([`super::family`]).
    fn labelled_counter(
        &self,
        name: &str,
        help: &str,
        closed: &[&str],
    ) -> Result<CounterFamily, prometheus::Error> {
        let labels = self.labels(closed);
        let names: Vec<&str> = labels.iter().map(String::as_str).collect();
        CounterFamily::new(&format!("tokenclock_{name}"), help, &names)
    }

    /// [`Builder::labelled_counter`], unless disabled.
    fn optional_counter(
        &self,
        name: &str,
        help: &str,
        closed: &[&str],
    ) -> Result<Option<CounterFamily>, prometheus::Error> {
        if self.export.disabled.family(name) {
            return Ok(None);
        }
        self.labelled_counter(name, help, closed).map(Some)
    }
}

impl Families {
    /// The families kept out of the registry, sorted by name (the order
    /// of the exposition).
    pub(super) fn owned(&self) -> Vec<Box<dyn Exposed>> {
        let histograms = [
            &self.ttft,
            &self.ttfo,
            &self.itl,
            &self.inter_event,
            &self.tpot,
            &self.duration,
            &self.phase,
            &self.server_phase,
            &self.input_tokens,
            &self.cached_input_tokens,
            &self.output_tokens,
            &self.reasoning_tokens,
            &self.event_tokens,
        ];
        let counters = [
            Some(&self.requests),
            Some(&self.input_tokens_total),
            Some(&self.output_tokens_total),
            Some(&self.slo_requests),
            Some(&self.slo_violations),
            self.workload.as_ref(),
        ];
        let mut all: Vec<Box<dyn Exposed>> = histograms
            .into_iter()
            .flatten()
            .map(|f| Box::new(f.clone()) as Box<dyn Exposed>)
            .chain(
                (counters.into_iter().flatten()).map(|f| Box::new(f.clone()) as Box<dyn Exposed>),
            )
            .collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }

    /// Creates every family, the counters and gauges registered on
    /// `registry`.
    pub(super) fn register(
        registry: &Registry,
        export: &ExportSettings,
    ) -> Result<Self, prometheus::Error> {
        let free = std::iter::once("model".to_owned())
            .chain(export.labels.iter().map(|l| l.name.clone()))
            .collect();
        let b = Builder {
            registry,
            export,
            free,
        };
        let e = &["endpoint"][..];
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "tokenclock_requests_in_flight",
                "Requests whose response has not ended yet.",
            ),
            &["endpoint"],
        )?;
        registry.register(Box::new(in_flight.clone()))?;
        let records_dropped = IntCounter::new(records::DROPPED_NAME, records::DROPPED_HELP)?;
        registry.register(Box::new(records_dropped.clone()))?;
        let config_reloads = b.counter("config_reloads_total", "Config reloads (SIGHUP) by result: ok (applied, perhaps partly) or error (refused, the running config stays).", &["result"])?;
        for result in ["ok", "error"] {
            config_reloads.with_label_values(&[result]);
        }
        let config_last_reload = Gauge::new(
            "tokenclock_config_last_reload_success_timestamp_seconds",
            "Unix time (s) of the last successful config load: the start, or a SIGHUP reload.",
        )?;
        registry.register(Box::new(config_last_reload.clone()))?;
        Ok(Self {
            ttft: b.histogram("time_to_first_token_seconds", "Request head received → first event carrying a generated token of any kind, reasoning included (AIPerf's TTFT).", e)?,
            ttfo: b.histogram("time_to_first_output_token_seconds", "Request head received → first event carrying a non-reasoning token (answer text or tool call).", e)?,
            itl: b.histogram("inter_token_latency_seconds", "Gap between token-bearing events divided by the tokens of the later event; observed once per token.", e)?,
            inter_event: b.histogram("inter_event_latency_seconds", "Gap between consecutive token-bearing events; observed once per gap.", e)?,
            tpot: b.histogram("time_per_output_token_seconds", "(last token − first token) / (tokens − 1), once per request with at least 2 tokens.", e)?,
            duration: b.histogram("request_duration_seconds", "E2E: request head received → last byte forwarded to the client (or the failure).", &["endpoint", "outcome"])?,
            phase: b.histogram("phase_seconds", "Phases of a request as seen from the proxy; see the README for each phase.", &["endpoint", "phase"])?,
            server_phase: b.histogram("server_phase_seconds", "Phases the upstream server reported about itself (vLLM metrics, llama.cpp timings, Ollama durations, TGI headers).", &["endpoint", "phase"])?,
            input_tokens: b.histogram("request_input_tokens", "Prompt tokens per request (usage, else estimated from the request body).", e)?,
            cached_input_tokens: b.histogram("request_cached_input_tokens", "Prompt tokens served from the server's cache, per request, when reported.", e)?,
            output_tokens: b.histogram("request_output_tokens", "Generated tokens per request, reasoning included.", e)?,
            reasoning_tokens: b.histogram("request_reasoning_tokens", "Reasoning tokens per request.", e)?,
            event_tokens: b.histogram("event_tokens", "Tokens per token-bearing event.", e)?,
            requests: b.labelled_counter("requests_total", "Finished requests by outcome, status code (000: no status reached the client) and normalised finish reason (none: the server sent none).", &["endpoint", "outcome", "code", "finish_reason"])?,
            in_flight,
            input_tokens_total: b.labelled_counter("input_tokens_total", "Prompt tokens of finished requests.", e)?,
            output_tokens_total: b.labelled_counter("output_tokens_total", "Generated tokens of finished requests, by kind (output or reasoning).", &["endpoint", "kind"])?,
            count_source: b.counter("token_count_source_total", "Requests by where their output token count came from: usage, per_event, events or estimated.", &["source"])?,
            parse_errors: b.counter("parse_errors_total", "Payloads that could not be read (traffic forwarded unchanged), by reason.", &["endpoint", "reason"])?,
            slo_requests: b.labelled_counter("slo_requests_total", "Requests judged against each SLO; goodput is rate(...{result=\"met\"}).", &["endpoint", "slo", "result"])?,
            slo_violations: b.labelled_counter("slo_violations_total", "Missed objectives per SLO.", &["endpoint", "slo", "objective"])?,
            workload: b.optional_counter("workload_requests_total", "Requests by input and output token range: the workload map.", &["input_tokens_range", "output_tokens_range"])?,
            records_dropped,
            config_reloads,
            config_last_reload,
        })
    }
}
