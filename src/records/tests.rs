//! Unit tests of records.
