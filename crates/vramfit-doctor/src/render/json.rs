//! `--format json`: the parsed fields and the diagnoses with their ids.

use std::io::{self, Write};

use serde::Serialize;

/// Writes `value` as pretty JSON followed by a newline.
pub fn write<T: Serialize>(out: &mut impl Write, value: &T) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::from)?;
    writeln!(out)
}
