//! PyTorch's CUDA caching allocator, simulated: what `torch.cuda.max_memory_reserved()` will
//! be for the step's stream of allocations and frees.
//!
//! The rules follow `c10/cuda/CUDACachingAllocator.cpp` of the pinned torch (summarised with
//! sources in `pytorch-memory-rules.md` §1): requests are rounded to 512 bytes; rounded
//! requests up to 1 MiB live in the small pool, served from 2 MiB segments; larger ones in the
//! large pool, served from 20 MiB segments below 10 MiB and from a segment of their own size
//! rounded up to 2 MiB above. A request takes the smallest cached free block of its pool that
//! holds it (best fit), which is split when what remains is at least 512 bytes (small pool) or
//! more than 1 MiB (large pool); an unsplit remainder counts as allocated. A freed block merges
//! with its free neighbours in the same segment, never across segments, and stays cached.
//! `max_split_size_mb` stops oversize blocks from being split or handed to small requests;
//! `expandable_segments:True` maps one growing segment per pool in 2 MiB / 20 MiB pages.
//!
//! [`CachingAllocator`] is an observer of the allocation stream. The step is simulated once in
//! its steady state (optimizer state created before the forward); the allocator replays it as
//! a run does: the first iteration creates the optimizer state inside `optimizer.step()`, into
//! a cache full of freed activation blocks, and later iterations repeat the step on the cache
//! the earlier ones left, until reserved memory stops growing.
//!
//! Modelled, not measured: one stream (no side streams, no `recordStream`), addresses in
//! allocation order, no device limit (the OOM path that frees cached segments and retries
//! never runs), `garbage_collection_threshold` parsed but inactive (it acts only under
//! `set_per_process_memory_fraction`).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::timeline::{Component, Phase, StreamEvent, StreamObserver, StreamState};

const MIN_BLOCK: u64 = 512;
const SMALL_SIZE: u64 = 1 << 20;
const SMALL_BUFFER: u64 = 2 << 20;
const LARGE_BUFFER: u64 = 20 << 20;
const MIN_LARGE_ALLOC: u64 = 10 << 20;
const ROUND_LARGE: u64 = 2 << 20;
const MIB: u64 = 1 << 20;

/// Iterations replayed at most while reserved memory still grows.
const MAX_ITERATIONS: u32 = 6;

/// `PYTORCH_CUDA_ALLOC_CONF`: the settings that change what is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AllocConf {
    /// `max_split_size_mb`, in bytes (`None`: unlimited, the default).
    pub max_split_size: Option<u64>,
    /// `max_non_split_rounding_mb`, in bytes (20 MiB by default).
    pub max_non_split_rounding: u64,
    /// `roundup_power2_divisions`, one entry per power-of-two interval from 1 MiB up
    /// (0: off, the default).
    pub roundup_power2_divisions: [u64; 16],
    /// `garbage_collection_threshold` in millionths (0: off). Active only under
    /// `torch.cuda.set_per_process_memory_fraction`, which the simulation does not model.
    pub garbage_collection_threshold_ppm: u32,
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
}

impl AllocConf {
    /// `PYTORCH_CUDA_ALLOC_CONF` unset.
    pub const DEFAULT: AllocConf = AllocConf {
        max_split_size: None,
        max_non_split_rounding: LARGE_BUFFER,
        roundup_power2_divisions: [0; 16],
        garbage_collection_threshold_ppm: 0,
        expandable_segments: false,
    };
}

impl Default for AllocConf {
    fn default() -> Self {
        AllocConf::DEFAULT
    }
}

/// A `PYTORCH_CUDA_ALLOC_CONF` that PyTorch would refuse (or that vramfit cannot model).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocConfError {
    /// A key PyTorch does not know.
    #[error("unknown PYTORCH_CUDA_ALLOC_CONF key '{0}'")]
    UnknownKey(String),
    /// A value that is not what the key takes.
    #[error("PYTORCH_CUDA_ALLOC_CONF: bad value '{value}' for {key} ({expected})")]
    BadValue {
        /// The key.
        key: String,
        /// What was given.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// `backend:cudaMallocAsync`: the driver's pool, whose reserved memory is not modelled.
    #[error("PYTORCH_CUDA_ALLOC_CONF backend:cudaMallocAsync is not modelled")]
    AsyncBackend,
}

impl AllocConf {
    /// Parses `PYTORCH_CUDA_ALLOC_CONF` as PyTorch's `AllocatorConfig` does: tokens split on
    /// `,`, `:`, `[` and `]`, spaces ignored, `key:value` pairs.
    pub fn parse(text: &str) -> Result<AllocConf, AllocConfError> {
        let mut tokens: Vec<String> = Vec::new();
        let mut cur = String::new();
        for ch in text.chars() {
            match ch {
                ',' | ':' | '[' | ']' => {
                    if !cur.is_empty() {
                        tokens.push(std::mem::take(&mut cur));
                    }
                    tokens.push(ch.to_string());
                }
                c if c.is_whitespace() => {}
                c => cur.push(c),
            }
        }
        if !cur.is_empty() {
            tokens.push(cur);
        }
        let mut conf = AllocConf::default();
        let mut i = 0;
        let bad = |key: &str, value: &str, expected: &'static str| AllocConfError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        while i < tokens.len() {
            let key = tokens[i].clone();
            if key == "," {
                i += 1;
                continue;
            }
            let known = [
                "max_split_size_mb",
                "max_non_split_rounding_mb",
                "roundup_power2_divisions",
                "garbage_collection_threshold",
                "expandable_segments",
                "backend",
                "release_lock_on_cudamalloc",
                "pinned_use_cuda_host_register",
                "pinned_num_register_threads",
                "pinned_reserve_segment_size_mb",
                "pinned_use_background_threads",
            ];
            if !known.contains(&key.as_str()) {
                return Err(AllocConfError::UnknownKey(key));
            }
            if tokens.get(i + 1).map(String::as_str) != Some(":") {
                return Err(bad(&key, "", "key:value"));
            }
            let value = tokens.get(i + 2).cloned().unwrap_or_default();
            i += 3;
            let mb = |v: &str, min: u64| -> Result<u64, AllocConfError> {
                match v.parse::<u64>() {
                    Ok(n) if n >= min => {
                        n.checked_mul(MIB).ok_or_else(|| bad(&key, v, "a size in MB"))
                    }
                    _ => Err(bad(
                        &key,
                        v,
                        if min > 0 {
                            "a whole number of MB, at least 20"
                        } else {
                            "a whole number of MB"
                        },
                    )),
                }
            };
            match key.as_str() {
                "max_split_size_mb" => conf.max_split_size = Some(mb(&value, 20)?),
                "max_non_split_rounding_mb" => conf.max_non_split_rounding = mb(&value, 0)?,
                "garbage_collection_threshold" => match value.parse::<f64>() {
                    Ok(t) if t > 0.0 && t < 1.0 => {
                        conf.garbage_collection_threshold_ppm = (t * 1e6).round() as u32;
                    }
                    _ => return Err(bad(&key, &value, "a fraction strictly between 0 and 1")),
                },
                "expandable_segments" => {
                    conf.expandable_segments = match value.as_str() {
                        "True" => true,
                        "False" => false,
                        _ => return Err(bad(&key, &value, "True or False")),
                    }
                }
                "backend" => match value.as_str() {
                    "native" => {}
                    "cudaMallocAsync" => return Err(AllocConfError::AsyncBackend),
                    _ => return Err(bad(&key, &value, "native or cudaMallocAsync")),
                },
                "release_lock_on_cudamalloc"
                | "pinned_use_cuda_host_register"
                | "pinned_use_background_threads" => {
                    if value != "True" && value != "False" {
                        return Err(bad(&key, &value, "True or False"));
                    }
                }
                "pinned_num_register_threads" | "pinned_reserve_segment_size_mb" => {
                    if value.parse::<u64>().is_err() {
                        return Err(bad(&key, &value, "a whole number"));
                    }
                }
                "roundup_power2_divisions" => {
                    if value == "[" {
                        i = parse_divisions(&tokens, i, &mut conf.roundup_power2_divisions)?;
                    } else {
                        let d = power_of_two_or_zero(&value)
                            .ok_or_else(|| bad(&key, &value, "0 or a power of two"))?;
                        conf.roundup_power2_divisions = [d; 16];
                    }
                }
                _ => unreachable!("every known key is matched"),
            }
        }
        Ok(conf)
    }

    /// `round_size`: what a request of `size` bytes takes.
    pub fn round_size(&self, size: u64) -> u64 {
        if size < MIN_BLOCK {
            return MIN_BLOCK;
        }
        let index = (63 - u64::from(size.leading_zeros())).saturating_sub(20).min(15) as usize;
        let d = self.roundup_power2_divisions[index];
        if d > 1 && size > MIN_BLOCK * d {
            roundup_power2_next_division(size, d)
        } else {
            size.div_ceil(MIN_BLOCK) * MIN_BLOCK
        }
    }
}

fn power_of_two_or_zero(v: &str) -> Option<u64> {
    v.parse::<u64>().ok().filter(|&d| d == 0 || d.is_power_of_two())
}

/// `[256:1,512:2,>:8]`: interval bounds in MB (powers of two) and their divisions; `i` is just
/// past the `[`. Returns the index past the `]`.
fn parse_divisions(
    tokens: &[String],
    mut i: usize,
    out: &mut [u64; 16],
) -> Result<usize, AllocConfError> {
    let bad = |value: &str| AllocConfError::BadValue {
        key: "roundup_power2_divisions".into(),
        value: value.to_string(),
        expected: "[MB:divisions,...,>:divisions] with powers of two",
    };
    let mut last: Option<usize> = None;
    loop {
        let bound = tokens.get(i).ok_or_else(|| bad(""))?.clone();
        if bound == "]" {
            return Ok(i + 1);
        }
        if bound == "," {
            i += 1;
            continue;
        }
        if tokens.get(i + 1).map(String::as_str) != Some(":") {
            return Err(bad(&bound));
        }
        let value = tokens.get(i + 2).cloned().unwrap_or_default();
        let d = power_of_two_or_zero(&value).ok_or_else(|| bad(&value))?;
        i += 3;
        if bound == ">" {
            let from = last.map_or(0, |l| l + 1);
            out[from.min(16)..].fill(d);
        } else {
            let mb = power_of_two_or_zero(&bound).filter(|&m| m > 0).ok_or_else(|| bad(&bound))?;
            let index = (63 - mb.leading_zeros() as usize).min(15);
            let from = last.map_or(0, |l| l + 1);
            if from <= index {
                out[from..=index].fill(d);
            }
            last = Some(index);
        }
    }
}

fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = (floor / divisions).max(1);
    size.div_ceil(step) * step
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pool {
    Small,
    Large,
}

/// `(pool, size, block)` in one ordered integer: pool in bit 127, size in bits 32–95.
fn pack(pool: Pool, size: u64, block: u32) -> u128 {
    (u128::from(pool == Pool::Large) << 127) | (u128::from(size) << 32) | u128::from(block)
}

fn unpack(key: u128) -> (Pool, u64, u32) {
    let pool = if key >> 127 == 1 { Pool::Large } else { Pool::Small };
    (pool, (key >> 32) as u64, key as u32)
}

#[derive(Debug, Clone)]
struct Block {
    pool: Pool,
    segment: u32,
    offset: u64,
    size: u64,
    allocated: bool,
    prev: Option<u32>,
    next: Option<u32>,
}

/// The cache's state: blocks, free lists per pool, the totals.
#[derive(Debug, Clone)]
struct Cache {
    conf: AllocConf,
    blocks: Vec<Block>,
    /// Free blocks keyed `(pool, size, block)` packed in a `u128` ([`Cache::key`]): best fit
    /// is the first at or after `(pool, size)`; among equal sizes the oldest block, which
    /// stands for the lowest address.
    free: BTreeSet<u128>,
    segments: u32,
    /// Expandable mode: the one segment of each pool, its last block and mapped size.
    expandable: [Option<(u32, u32, u64)>; 2],
    allocated: u64,
    reserved: u64,
}

impl Cache {
    fn new(conf: AllocConf) -> Cache {
        Cache {
            conf,
            blocks: Vec::with_capacity(1024),
            free: BTreeSet::new(),
            segments: 0,
            expandable: [None, None],
            allocated: 0,
            reserved: 0,
        }
    }

    fn key(&self, b: u32) -> u128 {
        let k = &self.blocks[b as usize];
        pack(k.pool, k.size, b)
    }

    fn new_block(&mut self, block: Block) -> u32 {
        let id = u32::try_from(self.blocks.len()).expect("fewer than 2^32 blocks");
        self.blocks.push(block);
        id
    }

    /// Allocates a request already rounded to 512 bytes by the stream; returns the block and
    /// whether reserved memory grew.
    fn malloc(&mut self, bytes: u64) -> (u32, bool) {
        let rs = self.conf.round_size(bytes);
        let pool = if rs <= SMALL_SIZE { Pool::Small } else { Pool::Large };
        let mut grew = false;
        let block = match self.best_fit(pool, rs) {
            Some(b) => b,
            None => {
                grew = true;
                if self.conf.expandable_segments {
                    self.grow_expandable(pool, rs)
                } else {
                    self.new_segment(pool, rs)
                }
            }
        };
        self.free.remove(&self.key(block));
        let size = self.blocks[block as usize].size;
        let remaining = size - rs;
        let split = if pool == Pool::Small || self.conf.expandable_segments {
            remaining >= MIN_BLOCK
        } else {
            rs < self.conf.max_split_size.unwrap_or(u64::MAX) && remaining > SMALL_SIZE
        };
        if split {
            let b = self.blocks[block as usize].clone();
            let rest = self.new_block(Block {
                pool,
                segment: b.segment,
                offset: b.offset + rs,
                size: remaining,
                allocated: false,
                prev: Some(block),
                next: b.next,
            });
            if let Some(n) = b.next {
                self.blocks[n as usize].prev = Some(rest);
            }
            let blk = &mut self.blocks[block as usize];
            blk.size = rs;
            blk.next = Some(rest);
            self.free.insert(self.key(rest));
            self.note_tail(b.segment, block, rest);
        }
        let blk = &mut self.blocks[block as usize];
        blk.allocated = true;
        self.allocated += blk.size;
        (block, grew)
    }

    /// In expandable mode, keeps track of each pool's last block after a split.
    fn note_tail(&mut self, segment: u32, before: u32, after: u32) {
        for e in self.expandable.iter_mut().flatten() {
            if e.0 == segment && e.1 == before {
                e.1 = after;
            }
        }
    }

    fn best_fit(&self, pool: Pool, rs: u64) -> Option<u32> {
        let max_split = self.conf.max_split_size.unwrap_or(u64::MAX);
        let key = *self.free.range(pack(pool, rs, 0)..).next()?;
        let (p, size, b) = unpack(key);
        if p != pool {
            return None;
        }
        if self.conf.expandable_segments {
            return Some(b);
        }
        // `get_free_block`'s guards against splitting oversize blocks.
        if rs < max_split && size >= max_split {
            return None;
        }
        if rs >= max_split && size >= rs.saturating_add(self.conf.max_non_split_rounding) {
            return None;
        }
        Some(b)
    }

    fn new_segment(&mut self, pool: Pool, rs: u64) -> u32 {
        let size = match pool {
            Pool::Small => SMALL_BUFFER,
            Pool::Large if rs < MIN_LARGE_ALLOC => LARGE_BUFFER,
            Pool::Large => rs.div_ceil(ROUND_LARGE) * ROUND_LARGE,
        };
        self.reserved += size;
        let segment = self.segments;
        self.segments += 1;
        let b = self.new_block(Block {
            pool,
            segment,
            offset: 0,
            size,
            allocated: false,
            prev: None,
            next: None,
        });
        self.free.insert(self.key(b));
        b
    }

    /// Maps pages at the end of the pool's expandable segment so that a free block of at
    /// least `rs` bytes ends it.
    fn grow_expandable(&mut self, pool: Pool, rs: u64) -> u32 {
        let page = if pool == Pool::Small { SMALL_BUFFER } else { LARGE_BUFFER };
        let slot = pool as usize;
        let (segment, tail, mapped) = match self.expandable[slot] {
            Some(e) => e,
            None => {
                let segment = self.segments;
                self.segments += 1;
                let b = self.new_block(Block {
                    pool,
                    segment,
                    offset: 0,
                    size: 0,
                    allocated: true, // an empty placeholder, never freed or handed out
                    prev: None,
                    next: None,
                });
                (segment, b, 0)
            }
        };
        let tail_free = !self.blocks[tail as usize].allocated;
        let have = if tail_free { self.blocks[tail as usize].size } else { 0 };
        let grow = (rs - have).div_ceil(page) * page;
        self.reserved += grow;
        let block = if tail_free {
            self.free.remove(&self.key(tail));
            self.blocks[tail as usize].size += grow;
            tail
        } else {
            let b = self.new_block(Block {
                pool,
                segment,
                offset: mapped,
                size: grow,
                allocated: false,
                prev: Some(tail),
                next: None,
            });
            self.blocks[tail as usize].next = Some(b);
            b
        };
        self.free.insert(self.key(block));
        self.expandable[slot] = Some((segment, block, mapped + grow));
        block
    }

    fn release(&mut self, block: u32) {
        let (size, prev, next) = {
            let b = &mut self.blocks[block as usize];
            debug_assert!(b.allocated, "a block freed twice");
            b.allocated = false;
            (b.size, b.prev, b.next)
        };
        self.allocated -= size;
        let mut keep = block;
        // `try_merge_blocks` with a free neighbour in the same segment.
        if let Some(p) = prev.filter(|&p| !self.blocks[p as usize].allocated) {
            self.free.remove(&self.key(p));
            self.absorb(p, block);
            keep = p;
        }
        if let Some(n) = next.filter(|&n| !self.blocks[n as usize].allocated) {
            self.free.remove(&self.key(n));
            self.absorb(keep, n);
        }
        self.free.insert(self.key(keep));
    }

    /// Merges `second`, the block right after `first` in its segment, into `first`.
    fn absorb(&mut self, first: u32, second: u32) {
        let (size, next) = (self.blocks[second as usize].size, self.blocks[second as usize].next);
        let f = &mut self.blocks[first as usize];
        f.size += size;
        f.next = next;
        if let Some(n) = next {
            self.blocks[n as usize].prev = Some(first);
        }
        self.retarget_tail(second, first);
    }

    fn retarget_tail(&mut self, gone: u32, into: u32) {
        for e in self.expandable.iter_mut().flatten() {
            if e.1 == gone {
                e.1 = into;
            }
        }
    }
}

/// What the allocator left: the reserved peak and what set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Reserved {
    /// `torch.cuda.max_memory_reserved()` over the iterations replayed.
    pub peak_reserved: u64,
    /// Reserved but not allocated at the moment reserved memory reached its peak
    /// (the OOM message's "reserved by PyTorch but unallocated").
    pub fragmentation: u64,
    /// `max_memory_allocated()` as the allocator counts it: blocks, with unsplit remainders.
    pub peak_allocated_blocks: u64,
    /// The allocation whose new segment set the reserved peak.
    pub set_by: ReservedPeakCause,
    /// Iterations replayed until reserved memory stopped growing.
    pub iterations: u32,
}

/// The allocation that made reserved memory reach its peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReservedPeakCause {
    /// Its size in bytes.
    pub bytes: u64,
    /// What it was for.
    pub component: Component,
    /// The phase it was made in.
    pub phase: Phase,
    /// The iteration (1: the run's first, which creates the optimizer state).
    pub iteration: u32,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Alloc { tid: u32, bytes: u64, component: Component, phase: Phase },
    Free { tid: u32 },
    Phase(Phase),
}

/// The caching allocator as an observer of the allocation stream.
///
/// The stream starts with the model's setup (parameters, workspaces, the optimizer state)
/// until the step's first `Phase(Forward)` after the initial one; the rest is one iteration.
#[derive(Debug, Clone)]
pub(crate) struct CachingAllocator {
    conf: AllocConf,
    /// Phase events seen.
    phases: u32,
    setup: Vec<Op>,
    step: Vec<Op>,
}

impl CachingAllocator {
    pub(crate) fn new(conf: AllocConf) -> CachingAllocator {
        CachingAllocator { conf, phases: 0, setup: Vec::new(), step: Vec::with_capacity(1 << 14) }
    }

    /// Replays the run: setup without the optimizer state, the first iteration creating it at
    /// the start of `optimizer.step()`, then iterations until reserved memory stops growing.
    pub(crate) fn finish(self) -> Reserved {
        let mut cache = Cache::new(self.conf);
        let mut map: Vec<Option<u32>> = Vec::new();
        let mut best = Reserved {
            peak_reserved: 0,
            fragmentation: 0,
            peak_allocated_blocks: 0,
            set_by: ReservedPeakCause {
                bytes: 0,
                component: Component::Parameters,
                phase: Phase::Forward,
                iteration: 1,
            },
            iterations: 0,
        };
        let mut state_ops = Vec::new();
        let play = |cache: &mut Cache,
                    map: &mut Vec<Option<u32>>,
                    op: Op,
                    it: u32,
                    best: &mut Reserved| {
            match op {
                Op::Alloc { tid, bytes, component, phase } => {
                    let (block, grew) = cache.malloc(bytes);
                    let t = tid as usize;
                    if map.len() <= t {
                        map.resize(t + 1, None);
                    }
                    map[t] = Some(block);
                    best.peak_allocated_blocks = best.peak_allocated_blocks.max(cache.allocated);
                    if grew && cache.reserved > best.peak_reserved {
                        best.peak_reserved = cache.reserved;
                        best.fragmentation = cache.reserved - cache.allocated;
                        best.set_by = ReservedPeakCause { bytes, component, phase, iteration: it };
                    }
                }
                Op::Free { tid } => {
                    if let Some(block) = map.get_mut(tid as usize).and_then(Option::take) {
                        cache.release(block);
                    }
                }
                Op::Phase(_) => {}
            }
        };
        for &op in &self.setup {
            if matches!(op, Op::Alloc { component: Component::OptimizerState, .. }) {
                state_ops.push(op);
            } else {
                play(&mut cache, &mut map, op, 1, &mut best);
            }
        }
        let mut iteration = 1;
        loop {
            let before = cache.reserved;
            let mut created = iteration > 1;
            for &op in &self.step {
                if !created && matches!(op, Op::Phase(Phase::OptimizerStep)) {
                    created = true;
                    for &s in &state_ops {
                        play(&mut cache, &mut map, s, iteration, &mut best);
                    }
                }
                play(&mut cache, &mut map, op, iteration, &mut best);
            }
            best.iterations = iteration;
            if (iteration > 1 && cache.reserved == before) || iteration >= MAX_ITERATIONS {
                break;
            }
            iteration += 1;
        }
        best
    }
}

impl StreamObserver for CachingAllocator {
    fn observe(&mut self, event: StreamEvent, state: StreamState<'_>) {
        let op = match event {
            // An empty storage (a view's handle) takes no block: the caching allocator hands
            // out a null pointer for zero bytes.
            StreamEvent::Alloc { bytes: 0, .. } => return,
            StreamEvent::Alloc { tid, bytes, component } => {
                Op::Alloc { tid: tid.index() as u32, bytes, component, phase: state.phase }
            }
            StreamEvent::Free { tid, .. } => Op::Free { tid: tid.index() as u32 },
            StreamEvent::Phase(p) => {
                self.phases += 1;
                Op::Phase(p)
            }
            StreamEvent::Recategorize { .. } => return,
        };
        // The initial phase event, then the setup; the step begins at the next `Forward`.
        if self.phases <= 1 {
            self.setup.push(op);
        } else {
            self.step.push(op);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> Cache {
        Cache::new(AllocConf::default())
    }

    #[test]
    fn rounding_and_segment_sizes_follow_the_documented_rules() {
        let c = AllocConf::default();
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(513), 1024);
        let mut a = cache();
        a.malloc(4); // small pool: a 2 MiB segment
        assert_eq!(a.reserved, 2 << 20);
        a.malloc(5 << 20); // 1–10 MiB: a 20 MiB segment
        assert_eq!(a.reserved, 22 << 20);
        a.malloc((23 << 20) + 1); // ≥ 10 MiB: its own size rounded to 2 MiB
        assert_eq!(a.reserved, (22 + 24) << 20);
    }

    #[test]
    fn a_small_remainder_of_a_large_block_is_not_split_and_counts_as_allocated() {
        let mut a = cache();
        // An 11.5 MiB request gets a 12 MiB segment; the 0.5 MiB rest stays in the block.
        a.malloc(23 << 19);
        assert_eq!(a.reserved, 12 << 20);
        assert_eq!(a.allocated, 12 << 20);
    }

    #[test]
    fn freed_blocks_are_cached_reused_by_best_fit_and_merged_within_a_segment() {
        let mut a = cache();
        let (x, _) = a.malloc(4 << 20); // 20 MiB segment, split
        let (y, _) = a.malloc(4 << 20); // same segment
        assert_eq!(a.reserved, 20 << 20);
        a.release(x);
        a.release(y);
        assert_eq!(a.allocated, 0);
        assert_eq!(a.reserved, 20 << 20, "freed memory stays reserved");
        // Merged back into one 20 MiB block: a 16 MiB request fits without a new segment.
        let (_, grew) = a.malloc(16 << 20);
        assert!(!grew);
    }

    #[test]
    fn segments_never_merge_so_two_freed_segments_cannot_serve_their_sum() {
        let mut a = cache();
        let (x, _) = a.malloc(12 << 20);
        let (y, _) = a.malloc(12 << 20);
        a.release(x);
        a.release(y);
        let (_, grew) = a.malloc(20 << 20);
        assert!(grew);
        assert_eq!(a.reserved, 44 << 20);
        assert_eq!(a.reserved - a.allocated, 24 << 20);
    }

    #[test]
    fn max_split_size_keeps_oversize_blocks_from_small_requests() {
        let conf = AllocConf::parse("max_split_size_mb:20").unwrap();
        let mut a = Cache::new(conf);
        let (x, _) = a.malloc(64 << 20);
        a.release(x);
        let (_, grew) = a.malloc(4 << 20);
        assert!(grew, "a 4 MiB request may not split a 64 MiB oversize block");
        // An oversize request takes a cached oversize block only within 20 MiB of its size.
        let (_, grew) = a.malloc(50 << 20);
        assert!(!grew);
    }

    #[test]
    fn expandable_segments_grow_in_pages_and_leave_no_segment_overhang() {
        let conf = AllocConf::parse("expandable_segments:True").unwrap();
        let mut a = Cache::new(conf);
        let (x, _) = a.malloc(12 << 20);
        let (y, _) = a.malloc(12 << 20);
        assert_eq!(a.reserved, 40 << 20, "20 MiB pages");
        a.release(x);
        a.release(y);
        let (_, grew) = a.malloc(24 << 20);
        assert!(!grew, "one segment: the freed blocks merge");
    }

    #[test]
    fn the_conf_is_parsed_as_pytorch_does_and_bad_values_are_refused() {
        let c = AllocConf::parse(" expandable_segments:True , max_split_size_mb:128").unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size, Some(128 << 20));
        let c = AllocConf::parse("roundup_power2_divisions:[256:1,512:2,>:8]").unwrap();
        assert_eq!(c.roundup_power2_divisions[8], 1);
        assert_eq!(c.roundup_power2_divisions[9], 2);
        assert_eq!(c.roundup_power2_divisions[15], 8);
        let c = AllocConf::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.round_size(1200 << 20), 1280 << 20);
        assert!(matches!(
            AllocConf::parse("max_split_size_mb:10"),
            Err(AllocConfError::BadValue { .. })
        ));
        assert!(matches!(AllocConf::parse("expandable:True"), Err(AllocConfError::UnknownKey(_))));
        assert!(matches!(
            AllocConf::parse("garbage_collection_threshold:1.5"),
            Err(AllocConfError::BadValue { .. })
        ));
        assert!(matches!(
            AllocConf::parse("max_split_size_mb:abc"),
            Err(AllocConfError::BadValue { .. })
        ));
        assert_eq!(AllocConf::parse("backend:cudaMallocAsync"), Err(AllocConfError::AsyncBackend));
        assert_eq!(AllocConf::parse("").unwrap(), AllocConf::default());
    }

    fn spec(name: &str) -> crate::ModelSpec {
        crate::ModelSpec::from_hf_config(crate::catalog::config_json(name).unwrap()).unwrap()
    }

    #[test]
    fn a_step_reserves_at_least_its_allocated_peak_and_settles() {
        use crate::setup::{Checkpointing, Precision, TrainSetup};
        for model in ["gpt2", "llama-3.2-1b", "bert-base-uncased"] {
            for checkpointing in [Checkpointing::None, Checkpointing::Full] {
                for precision in [Precision::Fp32, Precision::Bf16Mixed] {
                    let setup = TrainSetup {
                        micro_batch: 2,
                        seq_len: 512,
                        precision,
                        checkpointing,
                        ..TrainSetup::default()
                    };
                    let e = crate::estimate(&spec(model), &setup).unwrap();
                    let r = e.reserved.unwrap();
                    assert!(r.peak_allocated_blocks >= e.peak_allocated.get(), "{model}");
                    assert!(r.peak_reserved >= r.peak_allocated_blocks, "{model}");
                    assert!(r.iterations < MAX_ITERATIONS, "{model}: reserved never settled");
                    // Segments are whole multiples of 2 MiB.
                    assert_eq!(r.peak_reserved % SMALL_BUFFER, 0);
                }
            }
        }
    }

    #[test]
    fn reserved_memory_can_fall_when_the_batch_grows() {
        // BERT-base fp32 AdamW, s256: batch 3 packs its blocks into fewer segments than
        // batch 2 (a property of best fit over cached segments, as on a real GPU).
        let s = spec("bert-base-uncased");
        let at = |micro_batch| {
            let setup =
                crate::setup::TrainSetup { micro_batch, seq_len: 256, ..Default::default() };
            crate::estimate(&s, &setup).unwrap().reserved.unwrap().peak_reserved
        };
        assert!(at(3) < at(2));
    }

    #[test]
    fn the_cpu_oracle_has_no_caching_allocator() {
        let setup = crate::setup::TrainSetup::default();
        let e = crate::estimate_on(&spec("gpt2"), &setup, &crate::Device::CPU_ORACLE).unwrap();
        assert_eq!(e.reserved, None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, ..Default::default() })]
        #[test]
        // Reserved memory is not monotone in the batch (how blocks pack into segments
        // changes; see the test below), but a larger batch never reserves less than a
        // smaller one allocates.
        fn a_larger_batch_reserves_at_least_what_a_smaller_one_allocates(b in 1u64..6, model in 0usize..3) {
            let name = ["gpt2", "qwen3-0.6b", "bert-base-uncased"][model];
            let s = spec(name);
            let at = |micro_batch| {
                let setup = crate::setup::TrainSetup { micro_batch, seq_len: 256, ..Default::default() };
                crate::estimate(&s, &setup).unwrap()
            };
            let (small, large) = (at(b), at(b + 1));
            proptest::prop_assert!(large.reserved.unwrap().peak_reserved >= small.peak_allocated.get());
            proptest::prop_assert!(large.peak_allocated >= small.peak_allocated);
        }

        #[test]
        fn expandable_segments_never_reserve_below_allocated(b in 1u64..4) {
            let device = crate::Device {
                allocator: Some(AllocConf { expandable_segments: true, ..AllocConf::DEFAULT }),
                ..crate::Device::CUDA
            };
            let setup = crate::setup::TrainSetup { micro_batch: b, seq_len: 256, ..Default::default() };
            let e = crate::estimate_on(&spec("gpt2"), &setup, &device).unwrap();
            let r = e.reserved.unwrap();
            proptest::prop_assert!(r.peak_reserved >= e.peak_allocated.get());
        }
    }

    proptest::proptest! {
        #[test]
        fn reserved_never_below_allocated(ops in proptest::collection::vec((1u64..(64 << 20), proptest::bool::ANY), 1..200), expandable in proptest::bool::ANY) {
            let conf = AllocConf { expandable_segments: expandable, ..AllocConf::default() };
            let mut a = Cache::new(conf);
            let mut live = Vec::new();
            for (bytes, free) in ops {
                if free && !live.is_empty() {
                    a.release(live.swap_remove(bytes as usize % live.len()));
                } else {
                    live.push(a.malloc(bytes.div_ceil(512) * 512).0);
                }
                proptest::prop_assert!(a.reserved >= a.allocated);
            }
            for b in live {
                a.release(b);
            }
            proptest::prop_assert_eq!(a.allocated, 0);
        }
    }

    /// The step's own stream (every loop, zero_grad and cache mode), replayed through the
    /// cache twice: reserved memory is never below allocated memory, at any event.
    #[test]
    fn reserved_is_never_below_allocated_at_any_event_of_a_step() {
        use crate::setup::{TrainSetup, TrainingLoop, ZeroGrad};
        use crate::timeline::{StreamEvent, StreamObserver, StreamState};

        #[derive(Default)]
        struct Stream(Vec<(u32, Option<u64>)>);
        impl StreamObserver for Stream {
            fn observe(&mut self, event: StreamEvent, _: StreamState<'_>) {
                match event {
                    StreamEvent::Alloc { tid, bytes, .. } => {
                        self.0.push((tid.index() as u32, Some(bytes)));
                    }
                    StreamEvent::Free { tid, .. } => self.0.push((tid.index() as u32, None)),
                    StreamEvent::Recategorize { .. } | StreamEvent::Phase(_) => {}
                }
            }
        }
        for (model, training_loop, zero_grad, use_cache) in [
            ("gpt2", TrainingLoop::Custom, ZeroGrad::Zeros, Some(true)),
            ("llama-3.2-1b", TrainingLoop::Trainer, ZeroGrad::SetToNone, None),
            ("phi-3-mini", TrainingLoop::Custom, ZeroGrad::SetToNone, None),
        ] {
            let setup = TrainSetup {
                micro_batch: 2,
                seq_len: 256,
                training_loop,
                zero_grad,
                use_cache,
                ..TrainSetup::default()
            };
            let mut stream = Stream::default();
            crate::step::simulate(&spec(model), &setup, &crate::Device::CUDA, vec![&mut stream])
                .unwrap();
            let mut cache = cache();
            let mut blocks = std::collections::HashMap::new();
            for _ in 0..2 {
                for &(tid, bytes) in &stream.0 {
                    match bytes {
                        Some(b) => {
                            blocks.insert(tid, cache.malloc(b).0);
                        }
                        None => {
                            if let Some(block) = blocks.remove(&tid) {
                                cache.release(block);
                            }
                        }
                    }
                    assert!(cache.reserved >= cache.allocated, "{model}");
                }
            }
        }
    }
}
