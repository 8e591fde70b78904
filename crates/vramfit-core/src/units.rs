//! Units as types: [`Bytes`] for memory, [`DType`] for element types.
//!
//! GB versus GiB confusion is the bug class this tool exists to catch, so memory never travels
//! as a bare float. Arithmetic is checked: an absurd configuration gives an error, not a wrap.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::count::parse_count;

/// A number of bytes. Displays in binary units (GiB = 2^30, MiB = 2^20, KiB = 2^10).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

/// A byte computation overflowed `u64` (more than 16 EiB): the inputs are absurd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("memory size overflows 64 bits")]
pub struct Overflow;

impl Bytes {
    /// Zero bytes.
    pub const ZERO: Bytes = Bytes(0);
    /// One KiB.
    pub const KIB: u64 = 1 << 10;
    /// One MiB.
    pub const MIB: u64 = 1 << 20;
    /// One GiB.
    pub const GIB: u64 = 1 << 30;

    /// The raw count.
    pub fn get(self) -> u64 {
        self.0
    }

    /// `self + other`, or [`Overflow`].
    pub fn checked_add(self, other: Bytes) -> Result<Bytes, Overflow> {
        self.0.checked_add(other.0).map(Bytes).ok_or(Overflow)
    }

    /// `self - other`, saturating at zero.
    pub fn saturating_sub(self, other: Bytes) -> Bytes {
        Bytes(self.0.saturating_sub(other.0))
    }

    /// `self + other`, capped at `u64::MAX` (for figures read from outside, where a cap is the
    /// honest answer).
    #[must_use]
    pub fn saturating_add(self, other: Bytes) -> Bytes {
        Bytes(self.0.saturating_add(other.0))
    }

    /// `self / other` as a fraction (0 when `other` is zero).
    pub fn ratio(self, other: Bytes) -> f64 {
        if other.0 == 0 { 0.0 } else { self.0 as f64 / other.0 as f64 }
    }

    /// `self * factor`, or [`Overflow`].
    pub fn checked_mul(self, factor: u64) -> Result<Bytes, Overflow> {
        self.0.checked_mul(factor).map(Bytes).ok_or(Overflow)
    }

    /// The size in GiB as a float, for display and ratios only.
    pub fn gib(self) -> f64 {
        self.0 as f64 / Self::GIB as f64
    }

    /// The size in MiB as a float, for display and ratios only.
    pub fn mib(self) -> f64 {
        self.0 as f64 / Self::MIB as f64
    }
}

impl fmt::Display for Bytes {
    /// `1.40 GiB`, `512.0 MiB`, `3.0 KiB`, `17 B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= Self::GIB {
            write!(f, "{:.2} GiB", self.gib())
        } else if b >= Self::MIB {
            write!(f, "{:.1} MiB", self.mib())
        } else if b >= Self::KIB {
            write!(f, "{:.1} KiB", b as f64 / Self::KIB as f64)
        } else {
            write!(f, "{b} B")
        }
    }
}

impl std::iter::Sum for Bytes {
    /// Saturating sum (use `checked_add` where overflow must be reported).
    fn sum<I: Iterator<Item = Bytes>>(iter: I) -> Bytes {
        Bytes(iter.fold(0u64, |acc, b| acc.saturating_add(b.0)))
    }
}

/// Parses a memory size as a user writes it: `24GiB`, `24 GiB`, `80GB`, `10240MiB`, `1.5GiB`,
/// `123456789` (bytes). Decimal units (`GB`, `MB`) are powers of ten, binary (`GiB`) powers of two.
pub fn parse_size(text: &str) -> Option<Bytes> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "kb" => 1e3,
        "m" | "mib" => 1024.0 * 1024.0,
        "mb" => 1e6,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "gb" => 1e9,
        "t" | "tib" => 1024.0f64.powi(4),
        "tb" => 1e12,
        _ => return None,
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 / 2.0 {
        return None;
    }
    Some(Bytes(bytes.round() as u64))
}

/// An element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// 8-bit (bitsandbytes optimizer states, quantized tensors).
    U8,
    /// 64-bit integer (token ids, labels).
    I64,
    /// `torch.bool` (dropout masks), one byte per element.
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::U8 | DType::Bool => 1,
            DType::I64 => 8,
        }
    }

    /// Bits per element.
    pub fn bits(self) -> u64 {
        self.size() * 8
    }

    /// The name PyTorch prints (`float32`, `bfloat16`, ...).
    pub fn torch_name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::Bf16 => "bfloat16",
            DType::U8 => "uint8",
            DType::I64 => "int64",
            DType::Bool => "bool",
        }
    }

    /// Parses `fp32`, `float32`, `f32`, `fp16`, `float16`, `half`, `bf16`, `bfloat16`, `int8`/`uint8`/`8bit`.
    pub fn parse(text: &str) -> Option<DType> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "fp32" | "f32" | "float32" | "float" | "32" => DType::F32,
            "fp16" | "f16" | "float16" | "half" | "16" => DType::F16,
            "bf16" | "bfloat16" => DType::Bf16,
            "int8" | "uint8" | "u8" | "8bit" | "8-bit" => DType::U8,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.torch_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_display(bytes: u64, expected: &str) {
        assert_eq!(Bytes(bytes).to_string(), expected);
    }

    #[test]
    fn displays_binary_units() {
        check_display(0, "0 B");
        check_display(1023, "1023 B");
        check_display(1536, "1.5 KiB");
        check_display(512 << 20, "512.0 MiB");
        check_display(3 << 30, "3.00 GiB");
    }

    #[test]
    fn parses_sizes_in_both_unit_systems() {
        assert_eq!(parse_size("24GiB"), Some(Bytes(24 << 30)));
        assert_eq!(parse_size("24 GiB"), Some(Bytes(24 << 30)));
        assert_eq!(parse_size("80GB"), Some(Bytes(80_000_000_000)));
        assert_eq!(parse_size("10240MiB"), Some(Bytes(10240 << 20)));
        assert_eq!(parse_size("1.5gib"), Some(Bytes(3 << 29)));
        assert_eq!(parse_size("4096"), Some(Bytes(4096)));
        assert_eq!(parse_size("24 parsecs"), None);
        assert_eq!(parse_size("0GiB"), None);
        assert_eq!(parse_size("1e300GiB"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn arithmetic_is_checked() {
        assert_eq!(Bytes(u64::MAX).checked_add(Bytes(1)), Err(Overflow));
        assert_eq!(Bytes(u64::MAX / 2).checked_mul(3), Err(Overflow));
    }
}
