//! Byte counts as a type: parsing the sizes PyTorch prints and printing them back as GiB/MiB.
//!
//! PyTorch's `format_size` divides by 1024 and labels the result `KiB`/`MiB`/`GiB`; older builds
//! and the MPS backend print `KB`/`MB`/`GB` for the same binary units, so every unit here is a
//! power of two. Both `.` and `,` are accepted as the decimal separator.

/// The byte count type of every vramfit crate: the core's [`vramfit_core::Bytes`], which prints
/// in binary units (GiB, MiB, KiB) like every other vramfit output.
pub use vramfit_core::Bytes;

/// 2^20 bytes.
pub const MIB: u64 = Bytes::MIB;
/// 2^30 bytes.
pub const GIB: u64 = Bytes::GIB;

/// The multiplier of a size unit as printed by PyTorch, JAX or TensorFlow.
fn unit_multiplier(unit: &str) -> Option<u64> {
    let unit = unit.trim_end_matches(['.', ',', ';', ')', '(', '*', '`', '"', '\'']);
    Some(match unit {
        "B" | "b" | "byte" | "bytes" => 1,
        "KiB" | "KB" | "kB" | "K" | "KIB" => 1 << 10,
        "MiB" | "MB" | "M" | "MIB" => 1 << 20,
        "GiB" | "GB" | "G" | "GIB" => 1 << 30,
        "TiB" | "TB" | "T" | "TIB" => 1 << 40,
        "PiB" | "PB" => 1 << 50,
        _ => return None,
    })
}

/// Parses a decimal number with `.` or `,` as the separator into (mantissa, decimals).
fn parse_decimal(number: &str) -> Option<(u128, u32)> {
    let number = number.trim_start_matches(['(', '"', '`', '*', ':']);
    if number.is_empty() || number.len() > 40 {
        return None;
    }
    let (whole, frac) = match number.find(['.', ',']) {
        Some(i) => (number.get(..i)?, number.get(i + 1..)?),
        None => (number, ""),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits: String = whole.chars().chain(frac.chars()).collect();
    let mantissa: u128 = digits.parse().ok()?;
    Some((mantissa, u32::try_from(frac.len()).ok()?))
}

/// Parses `number` and `unit` ("781.59", "MiB") into bytes, rounding to the nearest byte.
/// Values above `u64::MAX` (PyTorch prints 2^64 bytes for "no limit") saturate.
pub fn parse_size(number: &str, unit: &str) -> Option<Bytes> {
    let (mantissa, decimals) = parse_decimal(number)?;
    let multiplier = u128::from(unit_multiplier(unit)?);
    let scale = 10u128.checked_pow(decimals)?;
    let product = mantissa.checked_mul(multiplier)?;
    let rounded = product.checked_add(scale / 2)? / scale;
    Some(Bytes(u64::try_from(rounded).unwrap_or(u64::MAX)))
}

/// Parses a size written as one token ("372.76MiB", "48.5KiB", "0B").
pub fn parse_glued_size(token: &str) -> Option<Bytes> {
    let split = token.find(|c: char| c.is_ascii_alphabetic())?;
    parse_size(token.get(..split)?, token.get(split..)?)
}

/// The largest rounding error a size printed with two decimals in `unit` can carry.
pub fn print_tolerance(bytes: Bytes) -> Bytes {
    // format_size prints two decimals of the largest unit below the value.
    let unit = if bytes.0 > GIB {
        GIB
    } else if bytes.0 > MIB {
        MIB
    } else {
        1024
    };
    Bytes(unit / 200 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(number: &str, unit: &str, expected: Option<u64>) {
        assert_eq!(parse_size(number, unit).map(Bytes::get), expected);
    }

    #[test]
    fn parses_units_and_separators() {
        check("1.24", "GiB", Some(1_331_439_862));
        check("1,24", "GiB", Some(1_331_439_862));
        check("781.59", "MiB", Some(819_556_516));
        check("576.00", "KiB", Some(589_824));
        check("0", "bytes", Some(0));
        check("256", "bytes", Some(256));
        check("17.68", "GB", Some(18_983_755_448));
        check("17179869184.00", "GiB", Some(u64::MAX));
        check("1.2.3", "GiB", None);
        check("abc", "GiB", None);
        check("1", "parsecs", None);
    }

    #[test]
    fn glued_sizes() {
        assert_eq!(parse_glued_size("372.76MiB"), parse_size("372.76", "MiB"));
        assert_eq!(parse_glued_size("0B"), Some(Bytes(0)));
    }

    /// The doctor prints sizes as every vramfit command does (the core's `Bytes`).
    #[test]
    fn prints_binary_units() {
        assert_eq!(Bytes(1_331_439_862).to_string(), "1.24 GiB");
        assert_eq!(Bytes(20 * MIB).to_string(), "20.0 MiB");
        assert_eq!(Bytes(512).to_string(), "512 B");
    }
}
