//! Memory snapshots from `torch.cuda.memory._dump_snapshot()`: what was alive, where the
//! cache was fragmented, how allocated and reserved memory moved, and what failed.
//!
//! The snapshot is read with the crate's own [`pickle`](crate::pickle) machine. Every key
//! except `segments`, their `blocks` and the sizes is optional, so snapshots of different
//! PyTorch versions read alike; `active_pending_free` and the documented
//! `active_awaiting_free` are both accepted.

mod svg;

use std::collections::HashMap;
use std::io::Read;
use std::rc::Rc;

use serde::Serialize;

use crate::bytes::Bytes;
use crate::pickle::{Limits, PickleError, Value, read_pickle};

pub use svg::write_svg;

/// Why a snapshot could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The pickle itself.
    #[error(transparent)]
    Pickle(#[from] PickleError),
    /// The pickle is data, but not a memory snapshot.
    #[error("not a memory snapshot: {0}")]
    Shape(&'static str),
}

/// One stack frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Source file.
    pub filename: Rc<str>,
    /// Line number.
    pub line: i64,
    /// Function name.
    pub name: Rc<str>,
}

impl Frame {
    /// `file:line in name`.
    pub fn label(&self) -> String {
        format!("{}:{} in {}", self.filename, self.line, self.name)
    }

    /// Whether the frame is inside PyTorch or Python itself rather than user code.
    fn is_library(&self) -> bool {
        let f = &*self.filename;
        f.contains("/torch/")
            || f.contains("\\torch\\")
            || f.starts_with("??")
            || f.contains("/lib/python3")
            || f.ends_with(".cpp")
            || f.ends_with(".h")
            || f.contains("site-packages")
    }
}

/// Totals of one group of live blocks.
#[derive(Debug, Clone, Serialize)]
pub struct AllocationGroup {
    /// The frame that made them (first frame outside PyTorch and libraries).
    pub frame: String,
    /// Bytes alive.
    pub bytes: Bytes,
    /// Number of blocks.
    pub count: u64,
}

/// One point of the timeline.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TimePoint {
    /// Microseconds since the first event.
    pub time_us: i64,
    /// Memory held by tensors.
    pub allocated: Bytes,
    /// Memory held from the driver.
    pub reserved: Bytes,
}

/// The allocation that failed when the snapshot was taken at an out-of-memory error.
#[derive(Debug, Clone, Serialize)]
pub struct FailedAllocation {
    /// Size requested (rounded as the allocator does).
    pub size: Bytes,
    /// Free memory reported by the driver at that moment.
    pub device_free: Option<Bytes>,
    /// Where it was requested from.
    pub frame: Option<String>,
    /// Device index.
    pub device: usize,
}

/// Everything the doctor reads from a snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotReport {
    /// Number of segments.
    pub segments: u64,
    /// Segments made by expandable segments.
    pub expandable_segments: u64,
    /// Sum of segment sizes: PyTorch's reserved memory.
    pub reserved: Bytes,
    /// Sum of live blocks.
    pub allocated: Bytes,
    /// Blocks freed but waiting for other streams.
    pub pending_free: Bytes,
    /// Free blocks inside segments that also hold live blocks (cannot be released).
    pub free_in_used_segments: Bytes,
    /// Free bytes in segments with no live block (`empty_cache()` would return them).
    pub free_in_empty_segments: Bytes,
    /// The largest free block anywhere.
    pub largest_free_block: Bytes,
    /// Share of reserved memory that is free but inside used segments.
    pub fragmentation: f64,
    /// Live memory grouped by the frame that allocated it, largest first.
    pub top_allocations: Vec<AllocationGroup>,
    /// Allocated and reserved over the recorded trace.
    pub timeline: Vec<TimePoint>,
    /// Number of trace events read.
    pub trace_events: u64,
    /// The allocation that failed, when the trace holds an OOM event.
    pub failed_allocation: Option<FailedAllocation>,
    /// `PYTORCH_CUDA_ALLOC_CONF` in force, when recorded.
    pub allocator_settings: Option<String>,
}

/// Reads and analyses a snapshot pickle.
pub fn read_snapshot(
    reader: impl Read,
    limits: &Limits,
    top: usize,
) -> Result<SnapshotReport, SnapshotError> {
    let value = read_pickle(reader, limits)?;
    analyse(&value, top)
}

fn u(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| x.as_u64())
}

struct Frames {
    cache: HashMap<usize, Option<Frame>>,
}

impl Frames {
    /// The user frame of a frame list, cached by the identity of the shared list.
    fn user_frame(&mut self, frames: Option<&Value>) -> Option<Frame> {
        let frames = frames?;
        let id = frames.identity();
        if let Some(id) = id
            && let Some(hit) = self.cache.get(&id)
        {
            return hit.clone();
        }
        let all: Vec<Frame> = frames
            .items()?
            .iter()
            .filter_map(|f| {
                Some(Frame {
                    filename: f.get("filename")?.as_rc_str()?,
                    line: f.get("line").and_then(|l| l.as_i64()).unwrap_or(0),
                    name: f
                        .get("name")
                        .and_then(|n| n.as_rc_str())
                        .unwrap_or_else(|| Rc::from("?")),
                })
            })
            .collect();
        let chosen = all.iter().find(|f| !f.is_library()).or_else(|| all.first()).cloned();
        if let Some(id) = id {
            self.cache.insert(id, chosen.clone());
        }
        chosen
    }
}

/// Analyses a snapshot value.
pub fn analyse(root: &Value, top: usize) -> Result<SnapshotReport, SnapshotError> {
    // `_snapshot()` returns a dict; very old `memory_snapshot()` returned the segment list.
    let segments_value = if root.is_dict() {
        root.get("segments").ok_or(SnapshotError::Shape("no \"segments\" key"))?
    } else {
        root.clone()
    };
    let segments =
        segments_value.items().ok_or(SnapshotError::Shape("\"segments\" is not a list"))?;
    let mut frames = Frames { cache: HashMap::new() };
    let mut report = SnapshotReport {
        segments: 0,
        expandable_segments: 0,
        reserved: Bytes(0),
        allocated: Bytes(0),
        pending_free: Bytes(0),
        free_in_used_segments: Bytes(0),
        free_in_empty_segments: Bytes(0),
        largest_free_block: Bytes(0),
        fragmentation: 0.0,
        top_allocations: Vec::new(),
        timeline: Vec::new(),
        trace_events: 0,
        failed_allocation: None,
        allocator_settings: None,
    };
    let mut groups: HashMap<String, (u64, u64)> = HashMap::new();
    for segment in &segments {
        let total =
            u(segment, "total_size").ok_or(SnapshotError::Shape("a segment has no total_size"))?;
        report.segments += 1;
        if segment.get("is_expandable").and_then(|e| e.as_bool()) == Some(true) {
            report.expandable_segments += 1;
        }
        report.reserved = report.reserved.saturating_add(Bytes(total));
        let blocks = segment.get("blocks").and_then(|b| b.items()).unwrap_or_default();
        let (mut live, mut free) = (0u64, 0u64);
        for block in &blocks {
            let size = u(block, "size").unwrap_or(0);
            let state = block.get("state");
            match state.as_ref().and_then(Value::as_str).unwrap_or("") {
                "active_allocated" => {
                    live = live.saturating_add(size);
                    let frame = frames
                        .user_frame(block.get("frames").as_ref())
                        .map_or_else(|| "(no stack recorded)".to_owned(), |f| f.label());
                    let entry = groups.entry(frame).or_default();
                    entry.0 = entry.0.saturating_add(size);
                    entry.1 += 1;
                }
                "active_pending_free" | "active_awaiting_free" => {
                    live = live.saturating_add(size);
                    report.pending_free = report.pending_free.saturating_add(Bytes(size));
                }
                _ => {
                    free = free.saturating_add(size);
                    report.largest_free_block = report.largest_free_block.max(Bytes(size));
                }
            }
        }
        report.allocated = report.allocated.saturating_add(Bytes(live));
        if live > 0 {
            report.free_in_used_segments = report.free_in_used_segments.saturating_add(Bytes(free));
        } else {
            report.free_in_empty_segments =
                report.free_in_empty_segments.saturating_add(Bytes(free));
        }
    }
    report.allocated = report.allocated.saturating_sub(report.pending_free);
    report.fragmentation = report.free_in_used_segments.ratio(report.reserved);
    let mut groups: Vec<AllocationGroup> = groups
        .into_iter()
        .map(|(frame, (bytes, count))| AllocationGroup { frame, bytes: Bytes(bytes), count })
        .collect();
    groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.frame.cmp(&b.frame)));
    groups.truncate(top);
    report.top_allocations = groups;

    report.allocator_settings = root
        .get("allocator_settings")
        .and_then(|s| s.get("PYTORCH_CUDA_ALLOC_CONF"))
        .and_then(|s| s.as_str().map(str::to_owned))
        .filter(|s| !s.is_empty());
    if let Some(traces) = root.get("device_traces").and_then(|t| t.items()) {
        replay(&traces, &mut report, &mut frames);
    }
    Ok(report)
}

/// Replays the trace of the device with the most events into a timeline, anchored so that
/// its end matches the segments' totals (the ring buffer may have dropped earlier events).
fn replay(traces: &[Value], report: &mut SnapshotReport, frames: &mut Frames) {
    let Some((device, events)) = traces
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((i, t.items()?)))
        .max_by_key(|(_, events)| events.len())
    else {
        return;
    };
    let (mut allocated, mut reserved) = (0i128, 0i128);
    let mut raw: Vec<(i64, i128, i128)> = Vec::with_capacity(events.len());
    let first_time = events.iter().find_map(|e| e.get("time_us").and_then(|t| t.as_i64()));
    for event in &events {
        let action = event.get("action");
        let size = i128::from(u(event, "size").unwrap_or(0));
        let time = event.get("time_us").and_then(|t| t.as_i64()).unwrap_or(0);
        match action.as_ref().and_then(Value::as_str).unwrap_or("") {
            "alloc" => allocated += size,
            "free_completed" => allocated -= size,
            "segment_alloc" | "segment_map" => reserved += size,
            "segment_free" | "segment_unmap" => reserved -= size,
            "oom" => {
                report.failed_allocation = Some(FailedAllocation {
                    size: Bytes(u64::try_from(size).unwrap_or(0)),
                    device_free: u(event, "device_free").map(Bytes),
                    frame: frames.user_frame(event.get("frames").as_ref()).map(|f| f.label()),
                    device,
                });
            }
            _ => continue,
        }
        report.trace_events += 1;
        raw.push((time - first_time.unwrap_or(0), allocated, reserved));
    }
    let offset_a =
        i128::from(report.allocated.get()) + i128::from(report.pending_free.get()) - allocated;
    let offset_r = i128::from(report.reserved.get()) - reserved;
    let to_bytes = |v: i128| Bytes(u64::try_from(v.max(0)).unwrap_or(u64::MAX));
    // At most MAX_POINTS points, each the peaks of its bucket, so huge traces stay small.
    let step = raw.len().div_ceil(MAX_POINTS).max(1);
    report.timeline = raw
        .chunks(step)
        .filter_map(|chunk| {
            let (t, _, _) = *chunk.first()?;
            let a = chunk.iter().map(|p| p.1).max()?;
            let r = chunk.iter().map(|p| p.2).max()?;
            Some(TimePoint {
                time_us: t,
                allocated: to_bytes(a + offset_a),
                reserved: to_bytes(r + offset_r),
            })
        })
        .collect();
}

/// Timeline points kept in a report.
const MAX_POINTS: usize = 4000;

impl SnapshotReport {
    /// The snapshot as allocator statistics, for the same diagnoses as `memory_stats()`.
    pub fn allocator_stats(&self) -> crate::stats::AllocatorStats {
        let peak_allocated = self.timeline.iter().map(|p| p.allocated).max().unwrap_or_default();
        let peak_reserved = self.timeline.iter().map(|p| p.reserved).max().unwrap_or_default();
        crate::stats::AllocatorStats {
            device: self.failed_allocation.as_ref().map(|f| f.device as u64),
            num_ooms: Some(u64::from(self.failed_allocation.is_some())),
            num_alloc_retries: None,
            allocated: crate::stats::Stat {
                current: self.allocated,
                peak: peak_allocated.max(self.allocated),
            },
            reserved: crate::stats::Stat {
                current: self.reserved,
                peak: peak_reserved.max(self.reserved),
            },
            active: None,
            inactive_split: Some(crate::stats::Stat {
                current: self.free_in_used_segments,
                peak: self.free_in_used_segments,
            }),
            requested: None,
            segments: Some(self.segments),
        }
    }
}
