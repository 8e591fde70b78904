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

/// No block: the end of a segment's list of blocks, or a tensor not in the cache.
const NONE: u32 = u32::MAX;

/// A block of a segment. Blocks live in one array and link to their neighbours in the segment
/// by index ([`NONE`] at a segment's ends). A block's index is its age: blocks are never
/// reused, so among free blocks of one size the smallest index stands for the lowest address.
#[derive(Debug, Clone, Copy)]
struct Block {
    size: u64,
    prev: u32,
    next: u32,
    segment: u32,
    pool: Pool,
    allocated: bool,
}

/// The cache's state: blocks, free lists per pool, the totals.
#[derive(Debug, Clone)]
struct Cache {
    conf: AllocConf,
    blocks: Vec<Block>,
    /// The free blocks in `(pool, size, block)` order: best fit is the first at or after
    /// `(pool, size)`; among equal sizes the oldest block, which stands for the lowest address.
    free: FreeBins,
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
            free: FreeBins::new(),
            segments: 0,
            expandable: [None, None],
            allocated: 0,
            reserved: 0,
        }
    }

    fn new_block(&mut self, block: Block) -> u32 {
        let id = u32::try_from(self.blocks.len()).ok().filter(|&id| id != NONE);
        self.blocks.push(block);
        id.expect("fewer than 2^32 - 1 blocks")
    }

    fn insert_free(&mut self, b: u32) {
        let k = self.blocks[b as usize];
        self.free.insert(k.pool, k.size, b);
    }

    fn remove_free(&mut self, b: u32) {
        let k = self.blocks[b as usize];
        self.free.remove(k.pool, k.size, b);
    }

    /// The pool of a rounded request.
    fn pool(rs: u64) -> Pool {
        if rs <= SMALL_SIZE { Pool::Small } else { Pool::Large }
    }

    /// Allocates a request of `bytes`; returns the block and whether reserved memory grew.
    #[cfg(test)]
    fn malloc(&mut self, bytes: u64) -> (u32, bool) {
        self.malloc_rounded(self.conf.round_size(bytes))
    }

    /// Allocates a request already rounded by [`AllocConf::round_size`]; returns the block and
    /// whether reserved memory grew.
    fn malloc_rounded(&mut self, rs: u64) -> (u32, bool) {
        let pool = Cache::pool(rs);
        let mut grew = false;
        let block = match self.best_fit(pool, rs) {
            Some(found) => {
                self.free.take(found);
                found.block
            }
            None => {
                grew = true;
                let b = if self.conf.expandable_segments {
                    self.grow_expandable(pool, rs)
                } else {
                    self.new_segment(pool, rs)
                };
                self.remove_free(b);
                b
            }
        };
        let b = self.blocks[block as usize];
        let remaining = b.size - rs;
        let split = if pool == Pool::Small || self.conf.expandable_segments {
            remaining >= MIN_BLOCK
        } else {
            rs < self.conf.max_split_size.unwrap_or(u64::MAX) && remaining > SMALL_SIZE
        };
        if split {
            let rest = self.new_block(Block {
                pool,
                segment: b.segment,
                size: remaining,
                allocated: false,
                prev: block,
                next: b.next,
            });
            if b.next != NONE {
                self.blocks[b.next as usize].prev = rest;
            }
            let blk = &mut self.blocks[block as usize];
            blk.size = rs;
            blk.next = rest;
            self.free.insert(pool, remaining, rest);
            if self.conf.expandable_segments {
                self.note_tail(b.segment, block, rest);
            }
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

    fn best_fit(&self, pool: Pool, rs: u64) -> Option<Found> {
        let found = self.free.first_at_or_after(pool, rs)?;
        if self.conf.expandable_segments {
            return Some(found);
        }
        // `get_free_block`'s guards against splitting oversize blocks.
        let size = found.size;
        let max_split = self.conf.max_split_size.unwrap_or(u64::MAX);
        if rs < max_split && size >= max_split {
            return None;
        }
        if rs >= max_split && size >= rs.saturating_add(self.conf.max_non_split_rounding) {
            return None;
        }
        Some(found)
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
        let b =
            self.new_block(Block { pool, segment, size, allocated: false, prev: NONE, next: NONE });
        self.free.insert(pool, size, b);
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
                    size: 0,
                    allocated: true, // an empty placeholder, never freed or handed out
                    prev: NONE,
                    next: NONE,
                });
                (segment, b, 0)
            }
        };
        let tail_free = !self.blocks[tail as usize].allocated;
        let have = if tail_free { self.blocks[tail as usize].size } else { 0 };
        let grow = (rs - have).div_ceil(page) * page;
        self.reserved += grow;
        let block = if tail_free {
            self.remove_free(tail);
            self.blocks[tail as usize].size += grow;
            tail
        } else {
            let b = self.new_block(Block {
                pool,
                segment,
                size: grow,
                allocated: false,
                prev: tail,
                next: NONE,
            });
            self.blocks[tail as usize].next = b;
            b
        };
        self.insert_free(block);
        self.expandable[slot] = Some((segment, block, mapped + grow));
        block
    }

    fn release(&mut self, block: u32) {
        let Block { size, prev, next, .. } = self.blocks[block as usize];
        debug_assert!(self.blocks[block as usize].allocated, "a block freed twice");
        self.blocks[block as usize].allocated = false;
        self.allocated -= size;
        let mut keep = block;
        // `try_merge_blocks` with a free neighbour in the same segment.
        if prev != NONE && !self.blocks[prev as usize].allocated {
            self.remove_free(prev);
            self.absorb(prev, block);
            keep = prev;
        }
        if next != NONE && !self.blocks[next as usize].allocated {
            self.remove_free(next);
            self.absorb(keep, next);
        }
        self.insert_free(keep);
    }

    /// Merges `second`, the block right after `first` in its segment, into `first`.
    fn absorb(&mut self, first: u32, second: u32) {
        let Block { size, next, .. } = self.blocks[second as usize];
        let f = &mut self.blocks[first as usize];
        f.size += size;
        f.next = next;
        if next != NONE {
            self.blocks[next as usize].prev = first;
        }
        if self.conf.expandable_segments {
            self.retarget_tail(second, first);
        }
    }

    fn retarget_tail(&mut self, gone: u32, into: u32) {
        for e in self.expandable.iter_mut().flatten() {
            if e.1 == gone {
                e.1 = into;
            }
        }
    }
}

/// Sub-bins per power of two in [`FreeBins`].
const SUB_BINS: u32 = 16;
/// Bins per pool: sizes from 512 bytes (2^9) to 2^64 − 1.
const BINS: usize = (64 - 9) * SUB_BINS as usize;
const BITMAP_WORDS: usize = BINS.div_ceil(64);

/// The free blocks of both pools, in `(pool, size, block)` order.
///
/// The distinct free sizes sit in size-segregated bins (one sixteenth of a power of two each,
/// sorted), with a bitmap of the occupied bins: the first block at or after `(pool, size)` is
/// in the size's own bin or else first in the next occupied one. Best fit thus costs a search
/// in one short array of sizes and a few bitmap words. A size held by one free block (most
/// are: the remainders of splits) names that block in its entry; several free blocks of one
/// size form a group, their ids sorted in descending order, so that the group's oldest block
/// (best fit's choice among equal sizes) is the last and is taken by a pop, and a block freed
/// again, usually among the oldest, goes in near the end (the cached segments of same-shaped
/// weights make groups of hundreds for a large model).
#[derive(Debug, Clone)]
struct FreeBins {
    /// Per pool and bin, the distinct free sizes in order, each with a [`SINGLE`] block or a
    /// group.
    bins: Vec<Vec<(u64, u32)>>,
    occupied: [[u64; BITMAP_WORDS]; 2],
    /// Per group, its free blocks in descending order (at least two).
    groups: Vec<Vec<u32>>,
    /// Groups emptied, for reuse.
    spare: Vec<u32>,
}

/// The bit of a bin entry that names a single block rather than a group.
const SINGLE: u32 = 1 << 31;

/// Inserts `x` at `at` in a short sorted array: a shift by hand, cheaper than a call to
/// `memmove` for the few elements a bin holds.
fn insert_at<T: Copy>(v: &mut Vec<T>, at: usize, x: T) {
    v.push(x);
    let mut i = v.len() - 1;
    while i > at {
        v[i] = v[i - 1];
        i -= 1;
    }
    v[at] = x;
}

/// Removes the element at `at` of a short array, keeping the order.
fn remove_at<T: Copy>(v: &mut Vec<T>, at: usize) {
    for i in at..v.len() - 1 {
        v[i] = v[i + 1];
    }
    v.pop();
}

impl FreeBins {
    fn new() -> FreeBins {
        FreeBins {
            bins: vec![Vec::new(); 2 * BINS],
            occupied: [[0; BITMAP_WORDS]; 2],
            groups: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// The bin of a size of at least 512 bytes (every block is a multiple of 512).
    fn bin(size: u64) -> usize {
        debug_assert!(size >= MIN_BLOCK, "a block below 512 bytes");
        let log = 63 - size.leading_zeros();
        let sub = (size >> (log - 4)) as u32 & (SUB_BINS - 1);
        ((log - 9) * SUB_BINS + sub) as usize
    }

    fn insert(&mut self, pool: Pool, size: u64, block: u32) {
        assert!(block < SINGLE, "fewer than 2^31 blocks");
        let (p, bin) = (pool as usize, FreeBins::bin(size));
        let sizes = &mut self.bins[p * BINS + bin];
        let at = sizes.partition_point(|&(s, _)| s < size);
        match sizes.get(at) {
            Some(&(s, entry)) if s == size => {
                if entry & SINGLE != 0 {
                    // A second block of this size: a group of two.
                    let other = entry & !SINGLE;
                    let pair = [block.max(other), block.min(other)];
                    let g = match self.spare.pop() {
                        Some(g) => {
                            self.groups[g as usize].extend_from_slice(&pair);
                            g
                        }
                        None => {
                            self.groups.push(pair.to_vec());
                            u32::try_from(self.groups.len() - 1).expect("fewer than 2^31 groups")
                        }
                    };
                    sizes[at].1 = g;
                } else {
                    let blocks = &mut self.groups[entry as usize];
                    match blocks.last() {
                        Some(&last) if last < block => {
                            let at = blocks.partition_point(|&b| b > block);
                            debug_assert!(blocks.get(at) != Some(&block), "inserted twice");
                            blocks.insert(at, block);
                        }
                        _ => blocks.push(block),
                    }
                }
            }
            _ => {
                insert_at(sizes, at, (size, SINGLE | block));
                self.occupied[p][bin / 64] |= 1 << (bin % 64);
            }
        }
    }

    fn remove(&mut self, pool: Pool, size: u64, block: u32) {
        let (p, bin) = (pool as usize, FreeBins::bin(size));
        let sizes = &mut self.bins[p * BINS + bin];
        let at = sizes.partition_point(|&(s, _)| s < size);
        let entry = match sizes.get(at) {
            Some(&(s, entry)) if s == size => entry,
            _ => panic!("removing a block that is not free"),
        };
        if entry & SINGLE != 0 {
            assert_eq!(entry & !SINGLE, block, "removing a block that is not free");
            remove_at(sizes, at);
            if sizes.is_empty() {
                self.occupied[p][bin / 64] &= !(1 << (bin % 64));
            }
            return;
        }
        let blocks = &mut self.groups[entry as usize];
        if blocks.last() == Some(&block) {
            blocks.pop();
        } else {
            let i = blocks.partition_point(|&b| b > block);
            assert_eq!(blocks.get(i), Some(&block), "removing a block that is not free");
            blocks.remove(i);
        }
        if let [last] = blocks[..] {
            // One block left: the entry names it.
            blocks.clear();
            sizes[at].1 = SINGLE | last;
            self.spare.push(entry);
        }
    }

    /// The size and the oldest free block of a bin entry.
    fn first(&self, size: u64, entry: u32) -> (u64, u32) {
        if entry & SINGLE != 0 {
            return (size, entry & !SINGLE);
        }
        (size, *self.groups[entry as usize].last().expect("a group of at least two"))
    }

    /// The first free block of `pool` at or after `(pool, size)`: the smallest size at least
    /// `size`, its oldest block.
    fn first_at_or_after(&self, pool: Pool, size: u64) -> Option<Found> {
        let p = pool as usize;
        let bin = FreeBins::bin(size.max(MIN_BLOCK));
        let slot = p * BINS + bin;
        let sizes = &self.bins[slot];
        let at = sizes.partition_point(|&(s, _)| s < size);
        if let Some(&(s, entry)) = sizes.get(at) {
            return Some(self.found(slot, at, s, entry));
        }
        // The next occupied bin holds only larger sizes: its first.
        let next = bin + 1;
        let mut word = next / 64;
        if word >= BITMAP_WORDS {
            return None;
        }
        let mut bits = self.occupied[p][word] & (u64::MAX << (next % 64));
        loop {
            if bits != 0 {
                let slot = p * BINS + word * 64 + bits.trailing_zeros() as usize;
                let &(s, entry) = self.bins[slot].first().expect("an occupied bin");
                return Some(self.found(slot, 0, s, entry));
            }
            word += 1;
            if word >= BITMAP_WORDS {
                return None;
            }
            bits = self.occupied[p][word];
        }
    }

    fn found(&self, slot: usize, at: usize, size: u64, entry: u32) -> Found {
        let (size, block) = self.first(size, entry);
        Found { slot, at, size, block }
    }

    /// Removes the block [`FreeBins::first_at_or_after`] found (nothing changed since): the
    /// oldest of its size, so the last of its group, without searching again.
    fn take(&mut self, found: Found) {
        let sizes = &mut self.bins[found.slot];
        let entry = sizes[found.at].1;
        if entry & SINGLE != 0 {
            debug_assert_eq!(entry & !SINGLE, found.block);
            remove_at(sizes, found.at);
            if sizes.is_empty() {
                let (p, bin) = (found.slot / BINS, found.slot % BINS);
                self.occupied[p][bin / 64] &= !(1 << (bin % 64));
            }
            return;
        }
        let blocks = &mut self.groups[entry as usize];
        let last = blocks.pop();
        debug_assert_eq!(last, Some(found.block));
        if let [only] = blocks[..] {
            blocks.clear();
            sizes[found.at].1 = SINGLE | only;
            self.spare.push(entry);
        }
    }
}

/// A free block found by best fit, with where its entry is.
#[derive(Debug, Clone, Copy)]
struct Found {
    /// Pool and bin: the index in [`FreeBins::bins`].
    slot: usize,
    /// The entry's index in its bin.
    at: usize,
    size: u64,
    block: u32,
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

/// One recorded event, as the replay needs it: a request already rounded (0 for a free), the
/// tensor, and for a request the index of what it was for in [`Recording::causes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Op {
    rounded: u64,
    tid: u32,
    cause: u32,
}

/// The allocation stream of a step as the caching allocator replays it: what
/// [`CachingAllocator`] records, and what [`replay`] needs (with an [`AllocConf`]).
///
/// Two recordings that are equal replay alike under the same settings: a search that
/// estimates setups whose streams coincide (settings that change nothing the allocator sees)
/// replays the stream once ([`Recording::fingerprint`] finds the candidates cheaply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recording {
    /// The `roundup_power2_divisions` the requests were rounded with (the only setting that
    /// `round_size` reads).
    rounding: [u64; 16],
    setup: Vec<Op>,
    step: Vec<Op>,
    /// The first `OptimizerStep` phase of the step: the index of the event it precedes.
    optimizer_step_at: Option<usize>,
    /// Per request: its bytes, component and phase (read when it sets the reserved peak).
    causes: Vec<(u64, Component, Phase)>,
    /// The largest tensor id seen.
    max_tid: u32,
}

impl Recording {
    /// A hash of the recording's contents (not of the rounding), cheap next to a replay: equal
    /// recordings have equal fingerprints.
    pub(crate) fn fingerprint(&self) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mix = |h: u64, x: u64| (h.rotate_left(5) ^ x).wrapping_mul(K);
        let mut h = mix(self.optimizer_step_at.map_or(u64::MAX, |a| a as u64), self.max_tid.into());
        for op in self.setup.iter().chain(&self.step) {
            h = mix(h, op.rounded);
            h = mix(h, (u64::from(op.tid) << 32) | u64::from(op.cause));
        }
        for &(bytes, component, phase) in &self.causes {
            h = mix(h, bytes);
            h = mix(h, ((component as u64) << 8) | phase as u64);
        }
        mix(h, self.setup.len() as u64)
    }

    /// Bytes the recording holds (for a cache that bounds what it keeps).
    pub(crate) fn heap_bytes(&self) -> usize {
        (self.setup.capacity() + self.step.capacity()) * std::mem::size_of::<Op>()
            + self.causes.capacity() * std::mem::size_of::<(u64, Component, Phase)>()
    }
}

/// The caching allocator as an observer of the allocation stream.
///
/// The stream starts with the model's setup (parameters, workspaces, the optimizer state)
/// until the step's first `Phase(Forward)` after the initial one; the rest is one iteration.
/// Each event is recorded once, compactly (requests rounded, phases reduced to where
/// `optimizer.step()` begins), and replayed for every iteration.
#[derive(Debug, Clone)]
pub(crate) struct CachingAllocator {
    conf: AllocConf,
    /// Phase events seen.
    phases: u32,
    recording: Recording,
}

impl CachingAllocator {
    pub(crate) fn new(conf: AllocConf) -> CachingAllocator {
        CachingAllocator {
            conf,
            phases: 0,
            recording: Recording {
                rounding: conf.roundup_power2_divisions,
                setup: Vec::new(),
                step: Vec::with_capacity(1 << 14),
                optimizer_step_at: None,
                causes: Vec::with_capacity(1 << 13),
                max_tid: 0,
            },
        }
    }

    /// Replays the run ([`replay`]) under the settings it was recorded with.
    pub(crate) fn finish(self) -> Reserved {
        replay(&self.recording, self.conf)
    }

    /// The stream recorded, for [`replay`].
    pub(crate) fn into_recording(self) -> Recording {
        self.recording
    }
}

/// Replays a recorded run under `conf`: setup without the optimizer state, the first
/// iteration creating it at the start of `optimizer.step()`, then iterations until reserved
/// memory stops growing.
pub(crate) fn replay(recording: &Recording, conf: AllocConf) -> Reserved {
    if recording.rounding != conf.roundup_power2_divisions {
        // Requests rounded otherwise: rounded again, as recorded under `conf`.
        let causes = &recording.causes;
        let round = |ops: &[Op]| -> Vec<Op> {
            ops.iter()
                .map(|&op| match op.cause {
                    NONE => op,
                    c => Op { rounded: conf.round_size(causes[c as usize].0), ..op },
                })
                .collect()
        };
        let again = Recording {
            rounding: conf.roundup_power2_divisions,
            setup: round(&recording.setup),
            step: round(&recording.step),
            causes: Vec::new(),
            ..*recording
        };
        return replay_rounded(&again, causes, conf);
    }
    replay_rounded(recording, &recording.causes, conf)
}

fn replay_rounded(
    recording: &Recording,
    causes: &[(u64, Component, Phase)],
    conf: AllocConf,
) -> Reserved {
    let mut cache = Cache::new(conf);
    // A block is made per segment and per split: at most one per request replayed, and
    // two iterations are the usual run.
    cache.blocks.reserve(recording.setup.len() + recording.step.len());
    let mut map: Vec<u32> = vec![NONE; recording.max_tid as usize + 1];
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
    let play = |cache: &mut Cache, map: &mut [u32], ops: &[Op], it: u32, best: &mut Reserved| {
        for &Op { rounded, tid, cause } in ops {
            let slot = &mut map[tid as usize];
            if cause == NONE {
                let block = std::mem::replace(slot, NONE);
                if block != NONE {
                    cache.release(block);
                }
                continue;
            }
            let (block, grew) = cache.malloc_rounded(rounded);
            *slot = block;
            best.peak_allocated_blocks = best.peak_allocated_blocks.max(cache.allocated);
            if grew && cache.reserved > best.peak_reserved {
                best.peak_reserved = cache.reserved;
                best.fragmentation = cache.reserved - cache.allocated;
                let (bytes, component, phase) = causes[cause as usize];
                best.set_by = ReservedPeakCause { bytes, component, phase, iteration: it };
            }
        }
    };
    let (state_ops, setup_ops): (Vec<Op>, Vec<Op>) = recording.setup.iter().partition(|op| {
        op.cause != NONE && causes[op.cause as usize].1 == Component::OptimizerState
    });
    play(&mut cache, &mut map, &setup_ops, 1, &mut best);
    let step = &recording.step;
    let mut iteration = 1;
    loop {
        let before = cache.reserved;
        match recording.optimizer_step_at.filter(|_| iteration == 1) {
            Some(at) => {
                play(&mut cache, &mut map, &step[..at], iteration, &mut best);
                play(&mut cache, &mut map, &state_ops, iteration, &mut best);
                play(&mut cache, &mut map, &step[at..], iteration, &mut best);
            }
            None => play(&mut cache, &mut map, step, iteration, &mut best),
        }
        best.iterations = iteration;
        if (iteration > 1 && cache.reserved == before) || iteration >= MAX_ITERATIONS {
            break;
        }
        iteration += 1;
    }
    best
}

impl StreamObserver for CachingAllocator {
    fn observe(&mut self, event: StreamEvent, state: StreamState<'_>) {
        let op = match event {
            // An empty storage (a view's handle) takes no block: the caching allocator hands
            // out a null pointer for zero bytes.
            StreamEvent::Alloc { bytes: 0, .. } => return,
            StreamEvent::Alloc { tid, bytes, component } => {
                let r = &mut self.recording;
                let cause = u32::try_from(r.causes.len()).ok().filter(|&c| c != NONE);
                r.causes.push((bytes, component, state.phase));
                Op {
                    rounded: self.conf.round_size(bytes),
                    tid: tid.index() as u32,
                    cause: cause.expect("fewer than 2^32 - 1 allocations"),
                }
            }
            StreamEvent::Free { tid, .. } => {
                Op { rounded: 0, tid: tid.index() as u32, cause: NONE }
            }
            StreamEvent::Phase(p) => {
                self.phases += 1;
                let r = &mut self.recording;
                if self.phases > 1 && p == Phase::OptimizerStep && r.optimizer_step_at.is_none() {
                    r.optimizer_step_at = Some(r.step.len());
                }
                return;
            }
            StreamEvent::Recategorize { .. } => return,
        };
        let r = &mut self.recording;
        r.max_tid = r.max_tid.max(op.tid);
        // The initial phase event, then the setup; the step begins at the next `Forward`.
        if self.phases <= 1 {
            r.setup.push(op);
        } else {
            r.step.push(op);
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

    /// A stream recorded once replays under any settings as a stream recorded under them:
    /// requests rounded otherwise are rounded again. Equal streams have equal fingerprints.
    #[test]
    fn a_recorded_stream_replays_under_other_settings_as_one_recorded_under_them() {
        use crate::setup::{Checkpointing, Precision, TrainSetup};
        let confs = [
            AllocConf::DEFAULT,
            AllocConf::parse("expandable_segments:True").unwrap(),
            AllocConf::parse("max_split_size_mb:20,max_non_split_rounding_mb:64").unwrap(),
            AllocConf::parse("roundup_power2_divisions:4").unwrap(),
            AllocConf::parse("roundup_power2_divisions:[256:1,512:2,>:8]").unwrap(),
        ];
        for (model, checkpointing) in
            [("gpt2", Checkpointing::None), ("llama-3.2-1b", Checkpointing::Full)]
        {
            let s = spec(model);
            let setup = TrainSetup {
                micro_batch: 3,
                seq_len: 1000,
                precision: Precision::Bf16Mixed,
                checkpointing,
                ..TrainSetup::default()
            };
            let record = |conf: AllocConf| {
                let mut allocator = CachingAllocator::new(conf);
                crate::step::simulate(&s, &setup, &crate::Device::CUDA, vec![&mut allocator])
                    .unwrap();
                allocator.into_recording()
            };
            let once = record(AllocConf::DEFAULT);
            assert_eq!(once.fingerprint(), record(AllocConf::DEFAULT).fingerprint());
            for conf in confs {
                let own = record(conf);
                assert_eq!(replay(&once, conf), replay(&own, conf), "{model} {conf:?}");
                assert_eq!(replay(&own, AllocConf::DEFAULT), replay(&once, AllocConf::DEFAULT));
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]
        /// What the planner does for a full estimate — the step simulated without the
        /// allocator, its stream recorded, replayed later under the candidate's settings — gives
        /// `estimate_on`'s estimate, to the byte, on random setups.
        #[test]
        fn a_recorded_stream_replayed_later_gives_the_full_estimate(
            model in 0usize..4,
            micro_batch in 1u64..4,
            seq in 0usize..3,
            bf16 in proptest::bool::ANY,
            full in proptest::bool::ANY,
            strategy in 0usize..5,
            optimizer_impl in 0usize..3,
            conf in 0usize..4,
        ) {
            use crate::parallel::{Parallel, Strategy};
            use crate::setup::{Checkpointing, OptimizerImpl, Precision, TrainSetup};
            let name = ["gpt2", "llama-3.2-1b", "qwen3-0.6b", "bert-base-uncased"][model];
            let s = spec(name);
            let strategy =
                [Strategy::None, Strategy::Ddp, Strategy::Zero2, Strategy::Zero3, Strategy::Fsdp]
                    [strategy];
            let setup = TrainSetup {
                micro_batch,
                seq_len: [128, 256, 512][seq],
                precision: if bf16 { Precision::Bf16Mixed } else { Precision::Fp32 },
                checkpointing: if full { Checkpointing::Full } else { Checkpointing::None },
                optimizer_impl: [OptimizerImpl::Foreach, OptimizerImpl::ForLoop, OptimizerImpl::Fused]
                    [optimizer_impl],
                parallel: Parallel {
                    gpus_per_node: if strategy == Strategy::None { 1 } else { 4 },
                    strategy,
                    ..Parallel::default()
                },
                ..TrainSetup::default()
            };
            let conf = [
                "",
                "expandable_segments:True",
                "max_split_size_mb:64",
                "roundup_power2_divisions:[256:1,512:2,>:8]",
            ][conf];
            let conf = AllocConf::parse(conf).unwrap();
            let allocated_only = crate::Device { allocator: None, ..crate::Device::CUDA };
            let recorded = crate::estimate::simulate_recorded(&s, &setup, &allocated_only);
            let full = crate::Device { allocator: Some(conf), ..crate::Device::CUDA };
            let direct = crate::estimate_on(&s, &setup, &full);
            proptest::prop_assert_eq!(recorded.is_ok(), direct.is_ok());
            let (Ok((step, recording)), Ok(direct)) = (recorded, direct) else {
                return Ok(());
            };
            let later =
                crate::estimate::summarize(&s, &setup, step, Some(replay(&recording, conf)));
            proptest::prop_assert_eq!(later, direct, "{} {:?}", name, setup);
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
