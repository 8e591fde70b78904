//! Parameter counts as people write them: `1B`, `125M`, `7e9`, `1.5b`, `350000000`.

/// Parses a count with an optional SI suffix (`K` = 10^3, `M` = 10^6, `B`/`G` = 10^9,
/// `T` = 10^12, case-insensitive), scientific notation (`7e9`) or a plain integer. Returns
/// `None` for anything else, for zero, and for counts that do not fit in `u64`.
pub fn parse_count(text: &str) -> Option<u64> {
    let t = text.trim().replace('_', "");
    let (num, mult) = match t.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() && !t.ends_with(|c: char| c.is_ascii_digit()) => {
            let mult = match c.to_ascii_lowercase() {
                'k' => 1e3,
                'm' => 1e6,
                'b' | 'g' => 1e9,
                't' => 1e12,
                _ => return None,
            };
            (t.get(..i)?.trim(), mult)
        }
        _ => (t.as_str(), 1.0),
    };
    if num.is_empty() || num.starts_with(['-', '+']) {
        return None;
    }
    if mult == 1.0
        && let Ok(n) = num.parse::<u64>()
    {
        return (n > 0).then_some(n);
    }
    let value: f64 = num.parse().ok()?;
    let count = value * mult;
    if !count.is_finite() || count < 1.0 || count >= u64::MAX as f64 {
        return None;
    }
    Some(count.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_count;

    #[track_caller]
    fn check(text: &str, expected: Option<u64>) {
        assert_eq!(parse_count(text), expected, "{text}");
    }

    #[test]
    fn parses_suffixes_exponents_and_plain_integers() {
        check("1B", Some(1_000_000_000));
        check("125M", Some(125_000_000));
        check("7e9", Some(7_000_000_000));
        check("1.5b", Some(1_500_000_000));
        check("350000000", Some(350_000_000));
        check("70b", Some(70_000_000_000));
        check("2.5k", Some(2_500));
        check(" 1T ", Some(1_000_000_000_000));
        check("18446744073709551615", Some(u64::MAX));
    }

    #[test]
    fn rejects_garbage_zero_and_overflow() {
        check("", None);
        check("B", None);
        check("0", None);
        check("-1B", None);
        check("1X", None);
        check("1e30", None);
        check("nan", None);
        check("inf", None);
        check("1.5.3M", None);
    }
}
