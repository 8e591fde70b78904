//! Output formats, one file each, all writing to `impl Write`.

pub mod json;
pub mod text;
