//! Tools that sit apart from the proxy and serve the command line, the tests,
//! the benchmarks and the demo. Nothing in the proxy, the measurement core
//! or the exporters imports them.
//!
//! - [`sim`]: a simulated model server speaking the real wire formats.
//! - [`load`]: the load generator: an independent client that times what it
//!   receives.
//! - [`demo`]: simulator, proxy and load together, with a live terminal view.
//! - [`report`]: offline summaries of record files.
//! - [`rng`]: the seeded random source the simulator and the load
//!   generator share.
//! - [`stats`]: the distribution of a quantity, exact or in bounded memory,
//!   for all of them.

pub mod demo;
pub mod load;
pub mod report;
pub(crate) mod rng;
pub mod sim;
pub(crate) mod stats;
