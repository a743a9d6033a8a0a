//! (being written)

use super::{ParseError, Parsed};

pub(super) fn event(_data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    Ok(Parsed::default())
}

pub(super) fn body(_data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    Ok(Parsed::default())
}
