//! Unit tests of report.
