//! The trace exporter: a bounded queue of spans in front of a task that
//! batches them and POSTs each batch to the collector (OTLP/HTTP protobuf).
//!
//! The request path decides sampling, builds the request's spans and
//! reserves queue slots for all of them at once (`try_reserve_many`): a
//! request's spans are queued whole or dropped whole, and it never waits.
//! One export runs at a time, bounded by `export_timeout`; while it runs
//! the queue absorbs new spans, and once full, new ones are dropped. Every
//! span that does not reach the collector is counted in
//! `tokenclock_otel_spans_dropped_total{reason}`.

use std::{sync::Arc, time::Duration};

use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    trace::{RandomIdGenerator, SpanData, SpanExporter as _},
    Resource,
};
use prometheus::{IntCounter, IntCounterVec, Opts};
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::Instant,
};

use super::{client::CollectorClient, span, OtelError};
use crate::{
    config::Otel,
    export::metrics::Metrics,
    measure::timeline::{Timeline, TimelineSink},
};

/// Longest a shutdown spends exporting what is still queued; what is left
/// then is dropped and counted (`reason="shutdown"`).
pub(crate) const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

/// Why spans were dropped: the `reason` label values.
const REASONS: [&str; 4] = ["queue_full", "export_failed", "timeout", "shutdown"];

/// The counters of the exporter, registered on tokenclock's registry.
#[derive(Clone)]
struct Counters {
    exported: IntCounter,
    dropped: IntCounterVec,
}

impl Counters {
    fn register(metrics: &Metrics) -> Result<Self, prometheus::Error> {
        let exported = IntCounter::new(
            "tokenclock_otel_spans_exported_total",
            "Spans the OTLP collector accepted.",
        )?;
        let dropped = IntCounterVec::new(
            Opts::new(
                "tokenclock_otel_spans_dropped_total",
                "Spans lost by reason: queue_full (the export queue was full), export_failed (the collector refused or could not be reached), timeout (an export exceeded otel.export_timeout), shutdown (still queued when the flush at exit ran out of time).",
            ),
            &["reason"],
        )?;
        metrics.register(Box::new(exported.clone()))?;
        metrics.register(Box::new(dropped.clone()))?;
        for reason in REASONS {
            dropped.with_label_values(&[reason]);
        }
        Ok(Self { exported, dropped })
    }

    fn dropped(&self, reason: &str, spans: usize) {
        self.dropped
            .with_label_values(&[reason])
            .inc_by(spans as u64);
    }
}

/// The running exporter: its sink and the task behind it.
pub(crate) struct Traces {
    sink: Arc<OtelSink>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// The [`TimelineSink`] that queues a sampled request's spans.
pub(crate) struct OtelSink {
    tx: mpsc::Sender<SpanData>,
    sample_ratio: f64,
    ids: RandomIdGenerator,
    scope: InstrumentationScope,
    counters: Counters,
}

impl Traces {
    /// Registers the counters and spawns the export task on the current
    /// runtime; `None` when `[otel]` is absent (nothing runs then).
    pub(crate) fn start(otel: Option<&Otel>, metrics: &Metrics) -> Result<Option<Self>, OtelError> {
        let Some(otel) = otel else {
            return Ok(None);
        };
        let counters = Counters::register(metrics)?;
        let headers = otel
            .headers
            .iter()
            .filter_map(|(name, value)| {
                let value = value.to_str().ok()?;
                Some((name.as_str().to_owned(), value.to_owned()))
            })
            .collect();
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(CollectorClient::new()?)
            .with_endpoint(otel.traces_url.to_string())
            .with_protocol(Protocol::HttpBinary)
            .with_timeout(otel.export_timeout)
            .with_headers(headers)
            .with_retry_policy(RetryPolicy::disabled())
            .build()
            .map_err(|e| OtelError::Exporter(e.to_string()))?;
        exporter.set_resource(
            &Resource::builder_empty()
                .with_service_name(otel.service_name.clone())
                .build(),
        );
        let (tx, rx) = mpsc::channel(otel.queue);
        let (stop, stopped) = oneshot::channel();
        let batcher = Batcher {
            rx,
            stopped,
            closing: None,
            exporter,
            counters: counters.clone(),
            max_batch: otel.max_batch,
            batch_delay: otel.batch_delay,
            export_timeout: otel.export_timeout,
            failing: false,
            lost_at_exit: 0,
        };
        let task = tokio::spawn(batcher.run());
        let sink = Arc::new(OtelSink {
            tx,
            sample_ratio: otel.sample_ratio,
            ids: span::id_generator(),
            scope: span::scope(),
            counters,
        });
        tracing::info!(endpoint = %otel.traces_url, "Exporting traces over OTLP/HTTP.");
        Ok(Some(Self { sink, stop, task }))
    }

    /// The sink every config generation sends finished timelines to.
    pub(crate) fn sink(&self) -> Arc<dyn TimelineSink> {
        self.sink.clone()
    }

    /// Exports what is queued for at most [`SHUTDOWN_FLUSH`], counts the
    /// rest as dropped, and ends the task.
    pub(crate) async fn close(self) {
        let Self { sink, stop, task } = self;
        drop(sink);
        let _ = stop.send(());
        let bound = SHUTDOWN_FLUSH + Duration::from_millis(500);
        match tokio::time::timeout(bound, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "The trace exporter ended abnormally."),
            Err(_) => tracing::warn!("The trace exporter did not stop in time."),
        }
    }
}

impl TimelineSink for OtelSink {
    fn finished(&self, timeline: &Timeline) {
        let trace = timeline.ids.trace.as_ref();
        let Some(placement) = span::place(trace, self.sample_ratio, &self.ids) else {
            return;
        };
        let spans = span::spans(timeline, placement, &self.ids, &self.scope);
        match self.tx.try_reserve_many(spans.len()) {
            Ok(permits) => permits
                .zip(spans)
                .for_each(|(permit, span)| permit.send(span)),
            Err(mpsc::error::TrySendError::Full(())) => {
                self.counters.dropped("queue_full", spans.len());
            }
            Err(mpsc::error::TrySendError::Closed(())) => {
                self.counters.dropped("shutdown", spans.len());
            }
        }
    }
}

/// The export task's state.
struct Batcher {
    rx: mpsc::Receiver<SpanData>,
    stopped: oneshot::Receiver<()>,
    /// Set once stopping: the deadline of the final flush.
    closing: Option<Instant>,
    exporter: opentelemetry_otlp::SpanExporter,
    counters: Counters,
    max_batch: usize,
    batch_delay: Duration,
    export_timeout: Duration,
    /// The last export failed (logged once per run of failures).
    failing: bool,
    /// Spans the flush at exit did not export: counted, and logged as the
    /// task ends, since a counter is not scraped once the process is gone.
    lost_at_exit: u64,
}

/// How one export ended.
enum Exported {
    Ok,
    Failed(String),
    TimedOut,
}

impl Batcher {
    async fn run(mut self) {
        loop {
            let batch = self.collect().await;
            if batch.is_empty() {
                break;
            }
            self.export(batch).await;
        }
        if self.lost_at_exit > 0 {
            tracing::warn!(
                spans = self.lost_at_exit,
                "Spans still queued at exit were not exported: the flush ran out of time."
            );
        }
    }

    /// `spans` the flush at exit had no time for.
    fn lost_at_exit(&mut self, spans: usize) {
        self.counters.dropped("shutdown", spans);
        self.lost_at_exit += spans as u64;
    }

    /// The next batch: waits for a first span, then for up to
    /// `batch_delay` (none once stopping) or `max_batch` spans. Empty when
    /// the queue is closed and empty: the task ends.
    async fn collect(&mut self) -> Vec<SpanData> {
        let mut batch = Vec::new();
        if self.closing.is_none() {
            tokio::select! {
                span = self.rx.recv() => batch.extend(span),
                _ = &mut self.stopped => self.stop(),
            }
        }
        let deadline = Instant::now() + self.batch_delay;
        while batch.len() < self.max_batch {
            if self.closing.is_some() {
                match self.rx.try_recv() {
                    Ok(span) => batch.push(span),
                    Err(_) => break,
                }
                continue;
            }
            tokio::select! {
                span = self.rx.recv() => match span {
                    Some(span) => batch.push(span),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
                _ = &mut self.stopped => self.stop(),
            }
        }
        batch
    }

    /// Stops taking spans; what is queued is flushed until the deadline.
    fn stop(&mut self) {
        self.rx.close();
        self.closing = Some(Instant::now() + SHUTDOWN_FLUSH);
    }

    /// Sends one batch, bounded by `export_timeout` and, once stopping, by
    /// the flush deadline; counts its spans as exported or dropped.
    async fn export(&mut self, batch: Vec<SpanData>) {
        let spans = batch.len();
        if self
            .closing
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            self.lost_at_exit(spans);
            return;
        }
        let mut limit = Instant::now() + self.export_timeout;
        if let Some(deadline) = self.closing {
            limit = limit.min(deadline);
        }
        let outcome = {
            let export = self.exporter.export(batch);
            tokio::pin!(export);
            loop {
                tokio::select! {
                    result = &mut export => break match result {
                        Ok(()) => Exported::Ok,
                        Err(e) => Exported::Failed(e.to_string()),
                    },
                    () = tokio::time::sleep_until(limit) => break Exported::TimedOut,
                    _ = &mut self.stopped, if self.closing.is_none() => {
                        self.rx.close();
                        let deadline = Instant::now() + SHUTDOWN_FLUSH;
                        self.closing = Some(deadline);
                        limit = limit.min(deadline);
                    }
                }
            }
        };
        self.counted(outcome, spans);
    }

    fn counted(&mut self, outcome: Exported, spans: usize) {
        match outcome {
            Exported::Ok => {
                self.counters.exported.inc_by(spans as u64);
                if std::mem::take(&mut self.failing) {
                    tracing::info!("Trace export works again.");
                }
            }
            Exported::Failed(error) => {
                self.counters.dropped("export_failed", spans);
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(%error, "Trace export failed; dropping spans until it works again.");
                }
            }
            Exported::TimedOut if self.closing.is_some_and(|end| Instant::now() >= end) => {
                self.lost_at_exit(spans);
            }
            Exported::TimedOut => {
                self.counters.dropped("timeout", spans);
                if !std::mem::replace(&mut self.failing, true) {
                    let timeout = humantime::format_duration(self.export_timeout);
                    tracing::warn!(%timeout, "Trace export timed out; dropping spans until it works again.");
                }
            }
        }
    }
}
