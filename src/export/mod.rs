//! What leaves the process on the side of the data path. Each exporter may
//! lose its own output (and counts what it loses); none can stop a request.
//!
//! - [`metrics`]: the Prometheus families, updated from finished timelines
//!   and live connection counts.
//! - [`admin`]: serves `/metrics`, `/healthz` and `/readyz` on the metrics
//!   listener.
//! - [`records`]: the opt-in JSONL log of finished timelines, written by a
//!   thread of its own.
//! - [`otel`]: the opt-in OpenTelemetry trace export over OTLP/HTTP,
//!   through a bounded, lossy queue and a task of its own.
//! - [`logging`]: `tracing` output, written by a thread of its own through a
//!   bounded, lossy queue.

pub(crate) mod admin;
pub mod logging;
pub mod metrics;
pub mod otel;
pub mod records;
