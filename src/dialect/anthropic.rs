//! (being written)

use super::{ParseError, Parsed};

pub(super) fn event<'a>(_name: &[u8], _data: &'a [u8]) -> Result<Parsed<'a>, ParseError> {
    Ok(Parsed::default())
}

pub(super) fn body(_data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    Ok(Parsed::default())
}
