//! Prometheus families exported on the metrics listener.
//!
//! Every family lives in one [`Metrics`] struct registered on an explicit
//! [`Registry`] (never the crate's global one).

use prometheus::{Encoder, IntGaugeVec, Opts, Registry, TextEncoder};

/// The exported families.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
}

// === impl Metrics ===

impl Metrics {
    /// Registers every family on a fresh registry.
    pub fn new() -> Result<Self, prometheus::Error> {
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
        Ok(Self { registry })
    }

    /// The text exposition (format 0.0.4) of every family.
    pub fn encode(&self) -> Result<Vec<u8>, prometheus::Error> {
        let mut buffer = Vec::with_capacity(4096);
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        Ok(buffer)
    }
}
