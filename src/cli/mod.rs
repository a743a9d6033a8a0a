//! The subcommands that run a tool rather than the proxy: each parses its
//! own flags and calls into [`tokenclock::tools`].

pub mod demo;
pub mod load;
pub mod sim;
