//! The integration tests, one binary: one module per area, all sharing the
//! fixtures of [`common`] (an in-process proxy, scripted upstreams, clients,
//! the binary as a process). One binary links once, where a binary per area
//! linked the library and the dependencies once each.
//!
//! `cargo test --test it MODULE::` runs one module's tests. The tests of all
//! modules share one process and run in parallel: a test that needs its own
//! environment variables, current directory, resource limits or log
//! subscriber runs the binary as a child process (`common::process`)
//! instead of changing this one's.

mod common;

mod backpressure;
mod capacity;
mod client_faults;
mod clients;
mod clock;
mod connections;
mod cuts;
mod demo;
mod deploy;
mod failures;
mod finish_reason;
mod fleet;
mod following;
mod framing;
mod fuzz_smoke;
mod garbage;
mod layers;
mod lifecycle;
mod live;
mod load;
mod logging;
mod merging;
mod metrics;
mod models;
mod otel;
mod prometheus;
mod prometheus_rules;
mod readiness;
mod real_streams;
mod records;
mod records_disk;
mod reload;
mod request_bodies;
mod request_ids;
mod series;
mod sim;
mod sim_faults;
mod streams;
mod tls;
mod transparency;
mod upstream_multiplex;
mod upstream_pool;
mod upstream_wire;
mod websocket;
