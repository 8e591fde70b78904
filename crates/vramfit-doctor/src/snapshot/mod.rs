//! Memory snapshots from `torch.cuda.memory._dump_snapshot()`: what was alive, where the
//! cache was fragmented, how allocated and reserved memory moved, and what failed.
//!
//! The snapshot is read with the crate's own [`pickle`](crate::pickle) machine, which hands
//! each segment and each trace event to this module as soon as it is built; they are folded
//! into totals and a bounded timeline and dropped, so a file of gigabytes is analysed in
//! the memory its shared frames take (see [`read_snapshot_seekable`]). Every key
//! except `segments`, their `blocks` and the sizes is optional, so snapshots of different
//! PyTorch versions read alike; `active_pending_free` and the documented
//! `active_awaiting_free` are both accepted.

mod svg;

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::rc::Rc;

use serde::Serialize;

use crate::bytes::Bytes;
use crate::pickle::{Fold, Keep, Limits, PickleError, Value, memo_reads, read_pickle_with};

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
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct AllocationGroup {
    /// The frame that made them (first frame outside PyTorch and libraries).
    pub frame: String,
    /// Bytes alive.
    pub bytes: Bytes,
    /// Number of blocks.
    pub count: u64,
}

/// One point of the timeline.
#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema)]
pub struct TimePoint {
    /// Microseconds since the first event.
    pub time_us: i64,
    /// Memory held by tensors.
    pub allocated: Bytes,
    /// Memory held from the driver.
    pub reserved: Bytes,
}

/// The allocation that failed when the snapshot was taken at an out-of-memory error.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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

/// Reads and analyses a snapshot pickle in one pass. Every memoised object stays in memory
/// to the end, so use [`read_snapshot_seekable`] for a file that can be read twice.
pub fn read_snapshot(
    reader: impl Read,
    limits: &Limits,
    top: usize,
) -> Result<SnapshotReport, SnapshotError> {
    let mut analyser = Analyser::default();
    let root = read_pickle_with(reader, limits, &Keep::All, &mut analyser)?;
    analyser.finish(&root, top)
}

/// Reads and analyses a snapshot in two passes with bounded memory: the first finds the
/// memo entries read back (the shared frames), the second keeps only those while segments
/// and trace events are folded into the report as they are read.
pub fn read_snapshot_seekable(
    mut reader: impl Read + Seek,
    limits: &Limits,
    top: usize,
) -> Result<SnapshotReport, SnapshotError> {
    let start = reader.stream_position().map_err(|e| PickleError::Io(e.to_string()))?;
    let reads = memo_reads(&mut reader, limits)?;
    reader.seek(SeekFrom::Start(start)).map_err(|e| PickleError::Io(e.to_string()))?;
    let mut analyser = Analyser::default();
    let root = read_pickle_with(reader, limits, &Keep::Read(reads), &mut analyser)?;
    analyser.finish(&root, top)
}

/// Analyses a snapshot value read whole (with [`read_pickle`](crate::pickle::read_pickle)).
pub fn analyse(root: &Value, top: usize) -> Result<SnapshotReport, SnapshotError> {
    Analyser::default().finish(root, top)
}

fn u(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| x.as_u64())
}

/// Whether two values are the same shared container.
fn same(a: &Value, b: &Value) -> bool {
    a.identity().is_some() && a.identity() == b.identity()
}

#[derive(Default)]
struct Frames {
    /// By the identity of a shared frame list; the list is held so its address stays its own.
    cache: HashMap<usize, (Value, Option<Frame>)>,
}

impl Frames {
    /// The user frame of a frame list. Lists that others hold too (the memo: PyTorch shares
    /// one list among every block and event with the same stack) are resolved once.
    fn user_frame(&mut self, frames: Option<Value>) -> Option<Frame> {
        let frames = frames?;
        let id = frames.identity();
        if let Some(id) = id
            && let Some((_, hit)) = self.cache.get(&id)
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
        // Held here, by the block or event it came from, and by someone else: shared.
        if let Some(id) = id
            && frames.strong_count() > 2
        {
            self.cache.insert(id, (frames, chosen.clone()));
        }
        chosen
    }
}

/// Segment totals, folded one segment at a time.
#[derive(Default)]
struct Segments {
    segments: u64,
    expandable: u64,
    reserved: u64,
    live: u64,
    pending_free: u64,
    free_in_used: u64,
    free_in_empty: u64,
    largest_free: u64,
    /// Live bytes and blocks by allocating frame.
    groups: HashMap<String, (u64, u64)>,
}

impl Segments {
    fn add(&mut self, segment: &Value, frames: &mut Frames) -> Result<(), SnapshotError> {
        let total =
            u(segment, "total_size").ok_or(SnapshotError::Shape("a segment has no total_size"))?;
        self.segments += 1;
        if segment.get("is_expandable").and_then(|e| e.as_bool()) == Some(true) {
            self.expandable += 1;
        }
        self.reserved = self.reserved.saturating_add(total);
        let blocks = segment.get("blocks").and_then(|b| b.items()).unwrap_or_default();
        let (mut live, mut free) = (0u64, 0u64);
        for block in &blocks {
            let size = u(block, "size").unwrap_or(0);
            let state = block.get("state");
            match state.as_ref().and_then(Value::as_str).unwrap_or("") {
                "active_allocated" => {
                    live = live.saturating_add(size);
                    let frame = frames
                        .user_frame(block.get("frames"))
                        .map_or_else(|| "(no stack recorded)".to_owned(), |f| f.label());
                    let entry = self.groups.entry(frame).or_default();
                    entry.0 = entry.0.saturating_add(size);
                    entry.1 += 1;
                }
                "active_pending_free" | "active_awaiting_free" => {
                    live = live.saturating_add(size);
                    self.pending_free = self.pending_free.saturating_add(size);
                }
                _ => {
                    free = free.saturating_add(size);
                    self.largest_free = self.largest_free.max(size);
                }
            }
        }
        self.live = self.live.saturating_add(live);
        if live > 0 {
            self.free_in_used = self.free_in_used.saturating_add(free);
        } else {
            self.free_in_empty = self.free_in_empty.saturating_add(free);
        }
        Ok(())
    }
}

/// One point before the trace is anchored: cumulative sums since the first event.
#[derive(Debug, Clone, Copy)]
struct RawPoint {
    time_us: i64,
    allocated: i128,
    reserved: i128,
}

impl RawPoint {
    /// One point for two neighbours: the first time, the peaks.
    fn merge(self, later: RawPoint) -> RawPoint {
        RawPoint {
            time_us: self.time_us,
            allocated: self.allocated.max(later.allocated),
            reserved: self.reserved.max(later.reserved),
        }
    }
}

/// One device's trace, folded one event at a time into at most `2 * MAX_POINTS` points,
/// each the peaks of `width` consecutive events.
struct Trace {
    /// The list the events were appended to, held so its identity stays its own.
    list: Value,
    events: u64,
    allocated: i128,
    reserved: i128,
    first_time: Option<i64>,
    points: Vec<RawPoint>,
    width: u64,
    in_last: u64,
    failed: Option<(u64, Option<u64>, Option<String>)>,
}

impl Trace {
    fn new(list: Value) -> Trace {
        Trace {
            list,
            events: 0,
            allocated: 0,
            reserved: 0,
            first_time: None,
            points: Vec::new(),
            width: 1,
            in_last: 0,
            failed: None,
        }
    }

    fn add(&mut self, event: &Value, frames: &mut Frames) {
        let action = event.get("action");
        let size = u(event, "size").unwrap_or(0);
        let time = event.get("time_us").and_then(|t| t.as_i64());
        match action.as_ref().and_then(Value::as_str).unwrap_or("") {
            "alloc" => self.allocated += i128::from(size),
            "free_completed" => self.allocated -= i128::from(size),
            "segment_alloc" | "segment_map" => self.reserved += i128::from(size),
            "segment_free" | "segment_unmap" => self.reserved -= i128::from(size),
            "oom" => {
                let frame = frames.user_frame(event.get("frames")).map(|f| f.label());
                self.failed = Some((size, u(event, "device_free"), frame));
            }
            _ => return,
        }
        self.events += 1;
        if self.first_time.is_none() {
            self.first_time = time;
        }
        let point = RawPoint {
            time_us: time.unwrap_or(0).saturating_sub(self.first_time.unwrap_or(0)),
            allocated: self.allocated,
            reserved: self.reserved,
        };
        match self.points.last_mut() {
            Some(last) if self.in_last < self.width => {
                *last = last.merge(point);
                self.in_last += 1;
            }
            _ => {
                self.points.push(point);
                self.in_last = 1;
            }
        }
        if self.points.len() > 2 * MAX_POINTS {
            // Every point but the last holds `width` events: pair them up. The count is odd,
            // so the last point stays alone with its `in_last` events.
            halve(&mut self.points);
            self.width *= 2;
        }
    }
}

/// Merges neighbouring points pairwise.
fn halve(points: &mut Vec<RawPoint>) {
    *points = points
        .chunks(2)
        .map(|pair| pair.iter().copied().reduce(RawPoint::merge).unwrap_or(pair[0]))
        .collect();
}

/// Most device traces folded as they are read (more are analysed after reading).
const MAX_TRACES: usize = 64;

/// Folds a snapshot's segments and trace events into totals as the pickle machine builds
/// them, so that neither is kept whole.
#[derive(Default)]
struct Analyser {
    frames: Frames,
    /// The list that took the first segment, and what its segments added up to.
    segments: Option<(Value, Segments)>,
    traces: Vec<Trace>,
    error: Option<SnapshotError>,
}

/// A segment dict, as `_snapshot()` and the older `memory_snapshot()` write them.
fn is_segment(v: &Value) -> bool {
    v.is_dict() && v.get("total_size").is_some() && v.get("blocks").is_some()
}

/// A trace entry: a dict with a string `action`.
fn is_event(v: &Value) -> bool {
    v.get("action").is_some_and(|a| a.as_str().is_some())
}

impl Fold for Analyser {
    fn take(&mut self, list: &Value, item: &Value) -> bool {
        if is_event(item) {
            let index = match self.traces.iter().position(|t| same(&t.list, list)) {
                Some(i) => i,
                None if self.traces.len() < MAX_TRACES => {
                    self.traces.push(Trace::new(list.clone()));
                    self.traces.len() - 1
                }
                None => return false,
            };
            self.traces[index].add(item, &mut self.frames);
            return true;
        }
        if is_segment(item) {
            let (held, segments) =
                self.segments.get_or_insert_with(|| (list.clone(), Segments::default()));
            if !same(held, list) {
                return false;
            }
            if let Err(e) = segments.add(item, &mut self.frames)
                && self.error.is_none()
            {
                self.error = Some(e);
            }
            return true;
        }
        false
    }
}

impl Analyser {
    /// Completes the report from the root value and what was folded while reading it.
    fn finish(mut self, root: &Value, top: usize) -> Result<SnapshotReport, SnapshotError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        // `_snapshot()` returns a dict; very old `memory_snapshot()` returned the segment list.
        let segments_value = if root.is_dict() {
            root.get("segments").ok_or(SnapshotError::Shape("no \"segments\" key"))?
        } else {
            root.clone()
        };
        let remaining =
            segments_value.items().ok_or(SnapshotError::Shape("\"segments\" is not a list"))?;
        let mut segments = match self.segments.take() {
            Some((held, folded)) if same(&held, &segments_value) => folded,
            _ => Segments::default(),
        };
        for segment in &remaining {
            segments.add(segment, &mut self.frames)?;
        }
        let pending_free = Bytes(segments.pending_free);
        let reserved = Bytes(segments.reserved);
        let free_in_used_segments = Bytes(segments.free_in_used);
        let mut groups: Vec<AllocationGroup> = segments
            .groups
            .into_iter()
            .map(|(frame, (bytes, count))| AllocationGroup { frame, bytes: Bytes(bytes), count })
            .collect();
        groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.frame.cmp(&b.frame)));
        groups.truncate(top);
        let mut report = SnapshotReport {
            segments: segments.segments,
            expandable_segments: segments.expandable,
            reserved,
            allocated: Bytes(segments.live).saturating_sub(pending_free),
            pending_free,
            free_in_used_segments,
            free_in_empty_segments: Bytes(segments.free_in_empty),
            largest_free_block: Bytes(segments.largest_free),
            fragmentation: free_in_used_segments.ratio(reserved),
            top_allocations: groups,
            timeline: Vec::new(),
            trace_events: 0,
            failed_allocation: None,
            allocator_settings: root
                .get("allocator_settings")
                .and_then(|s| s.get("PYTORCH_CUDA_ALLOC_CONF"))
                .and_then(|s| s.as_str().map(str::to_owned))
                .filter(|s| !s.is_empty()),
        };
        if let Some(lists) = root.get("device_traces").and_then(|t| t.items()) {
            let mut traces = Vec::with_capacity(lists.len());
            for list in lists {
                let mut trace = match self.traces.iter().position(|t| same(&t.list, &list)) {
                    Some(i) => self.traces.swap_remove(i),
                    None => Trace::new(list.clone()),
                };
                for event in list.items().unwrap_or_default() {
                    trace.add(&event, &mut self.frames);
                }
                traces.push(trace);
            }
            anchor(traces, &mut report);
        }
        Ok(report)
    }
}

/// Turns the device trace with the most events into the timeline, anchored so that its end
/// matches the segments' totals (the ring buffer may have dropped earlier events).
fn anchor(traces: Vec<Trace>, report: &mut SnapshotReport) {
    let Some((device, mut trace)) =
        traces.into_iter().enumerate().filter(|(_, t)| t.events > 0).max_by_key(|(_, t)| t.events)
    else {
        return;
    };
    report.trace_events = trace.events;
    report.failed_allocation = trace.failed.take().map(|(size, free, frame)| FailedAllocation {
        size: Bytes(size),
        device_free: free.map(Bytes),
        frame,
        device,
    });
    if trace.points.len() > MAX_POINTS {
        halve(&mut trace.points);
    }
    let offset_a = i128::from(report.allocated.get()) + i128::from(report.pending_free.get())
        - trace.allocated;
    let offset_r = i128::from(report.reserved.get()) - trace.reserved;
    let to_bytes = |v: i128| Bytes(u64::try_from(v.max(0)).unwrap_or(u64::MAX));
    report.timeline = trace
        .points
        .iter()
        .map(|p| TimePoint {
            time_us: p.time_us,
            allocated: to_bytes(p.allocated + offset_a),
            reserved: to_bytes(p.reserved + offset_r),
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
