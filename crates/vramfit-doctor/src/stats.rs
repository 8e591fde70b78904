//! `torch.cuda.memory_summary()` text and `torch.cuda.memory_stats()` JSON, read into
//! [`AllocatorStats`].
//!
//! The summary prints each size floored to whole units of the unit chosen for its column
//! (`"  1024 MiB"`), so values read from it are lower bounds within one unit; the stats JSON
//! is exact. Older PyTorch labels the same binary units `KB`/`MB`/`GB`.

use serde::Serialize;

use crate::bytes::{Bytes, parse_size};

/// Current and peak of one statistic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Stat {
    /// Value now.
    pub current: Bytes,
    /// High-water mark since the last reset.
    pub peak: Bytes,
}

/// The allocator statistics the doctor uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct AllocatorStats {
    /// Device index, when printed.
    pub device: Option<u64>,
    /// `num_ooms`.
    pub num_ooms: Option<u64>,
    /// `num_alloc_retries`: times the allocator freed its cache and retried a cudaMalloc.
    pub num_alloc_retries: Option<u64>,
    /// `allocated_bytes.all`: memory held by tensors.
    pub allocated: Stat,
    /// `reserved_bytes.all`: memory held from the driver.
    pub reserved: Stat,
    /// `active_bytes.all`.
    pub active: Option<Stat>,
    /// `inactive_split_bytes.all`: free pieces of segments that still hold a live block
    /// ("Non-releasable memory"); `empty_cache()` cannot return them.
    pub inactive_split: Option<Stat>,
    /// `requested_bytes.all`: what the program asked for, before rounding.
    pub requested: Option<Stat>,
    /// `segment.all.current`: number of cudaMalloc segments.
    pub segments: Option<u64>,
}

/// A problem with stats input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StatsError {
    /// Not valid JSON.
    #[error("memory_stats JSON is not valid: {0}")]
    Json(String),
    /// A required key is absent.
    #[error("memory_stats has no {0}")]
    Missing(&'static str),
    /// No summary rows.
    #[error("memory_summary has no \"Allocated memory\" and \"GPU reserved memory\" rows")]
    NoRows,
}

/// Parses `torch.cuda.memory_stats()` written as JSON (`json.dumps(torch.cuda.memory_stats())`).
pub fn parse_stats_json(text: &str) -> Result<AllocatorStats, StatsError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| StatsError::Json(e.to_string()))?;
    let object = value.as_object().ok_or(StatsError::Json("not an object".to_owned()))?;
    let get = |key: &str| object.get(key).and_then(serde_json::Value::as_u64);
    let stat = |name: &str| -> Option<Stat> {
        Some(Stat {
            current: Bytes(get(&format!("{name}.all.current"))?),
            peak: Bytes(get(&format!("{name}.all.peak"))?),
        })
    };
    Ok(AllocatorStats {
        device: None,
        num_ooms: get("num_ooms"),
        num_alloc_retries: get("num_alloc_retries"),
        allocated: stat("allocated_bytes").ok_or(StatsError::Missing("allocated_bytes.all"))?,
        reserved: stat("reserved_bytes").ok_or(StatsError::Missing("reserved_bytes.all"))?,
        active: stat("active_bytes"),
        inactive_split: stat("inactive_split_bytes"),
        requested: stat("requested_bytes"),
        segments: get("segment.all.current"),
    })
}

/// Parses the table printed by `torch.cuda.memory_summary()`.
pub fn parse_summary(text: &str) -> Result<AllocatorStats, StatsError> {
    let mut stats = AllocatorStats::default();
    let (mut have_allocated, mut have_reserved) = (false, false);
    for line in text.lines() {
        if let Some(at) = line.find("memory summary, device ID") {
            stats.device = line[at + 25..]
                .trim_matches(|c: char| !c.is_ascii_digit())
                .split(' ')
                .next()
                .and_then(|d| d.parse().ok());
        }
        if line.contains("CUDA OOMs:") {
            stats.num_ooms = number_after(line, "CUDA OOMs:");
            stats.num_alloc_retries = number_after(line, "cudaMalloc retries:");
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, name, current, peak, ..] = cells.as_slice() else { continue };
        let size = |cell: &str| -> Option<Bytes> {
            let (number, unit) = cell.split_once(' ')?;
            parse_size(number, unit.trim())
        };
        let (Some(current), Some(peak)) = (size(current), size(peak)) else {
            if *name == "GPU reserved segments" {
                stats.segments = count(current);
            }
            continue;
        };
        let stat = Stat { current, peak };
        match *name {
            "Allocated memory" => {
                stats.allocated = stat;
                have_allocated = true;
            }
            "GPU reserved memory" => {
                stats.reserved = stat;
                have_reserved = true;
            }
            "Active memory" => stats.active = Some(stat),
            "Non-releasable memory" => stats.inactive_split = Some(stat),
            "Requested memory" => stats.requested = Some(stat),
            _ => {}
        }
    }
    if have_allocated && have_reserved { Ok(stats) } else { Err(StatsError::NoRows) }
}

fn number_after(line: &str, label: &str) -> Option<u64> {
    let at = line.find(label)? + label.len();
    line[at..].split_whitespace().next()?.parse().ok()
}

/// A count cell: `"   123 K"` means 123,000.
fn count(cell: &str) -> Option<u64> {
    let mut parts = cell.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("K") => n.checked_mul(1000),
        Some("M") => n.checked_mul(1_000_000),
        _ => Some(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(count("123 K"), Some(123_000));
        assert_eq!(count("7"), Some(7));
    }
}
