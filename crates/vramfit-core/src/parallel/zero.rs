//! DeepSpeed ZeRO on one rank (DeepSpeed 0.19.8, `deepspeed/runtime/zero/`), with its 16-bit
//! modes (`bf16`/`fp16` enabled): the module runs in 16 bits and the optimizer steps fp32
//! master partitions.
//!
//! **Stages 1 and 2** (`stage_1_and_2.py`, `DeepSpeedZeroOptimizer`):
//! * the trainable 16-bit parameters live in one flat buffer padded to a multiple of
//!   `2 · ranks` elements (`flatten_dense_tensors_aligned`, `bit16_groups_flat`), frozen ones
//!   as they are; each rank clones its partition to fp32 (`single_partition_of_fp32_groups`)
//!   and the optimizer's state lives on that partition;
//! * ZeRO-2 copies each gradient into the contiguous reduce bucket (`reduce_bucket_size`
//!   elements, `ipg_buckets`, allocated at the first gradient of a backward and released by
//!   its epilogue) as it is produced, reduces it, and keeps the gradients of the parameters
//!   that overlap its partition in `grads_in_partition` — whole parameters, so a rank whose
//!   partition cuts through large ones holds more than its share; ZeRO-1 keeps every
//!   `.grad` until the end of the last micro-batch;
//! * `step()` flattens the rank's gradients (16 bits), casts them to an fp32 partition, frees
//!   the 16-bit ones, steps, frees the fp32 gradient, and copies the master partition back into
//!   the flat buffer, which is all-gathered in place (`runtime/utils.py`,
//!   `all_gather_into_tensor_dp_groups`: no buffer; `allgather_bucket_size` only chunks the
//!   older shard-list path, for NCCL without `all_gather_into_tensor`).
//!
//! **Stage 3** (`stage3.py`, `partition_parameters.py`, `partitioned_param_coordinator.py`):
//! * every parameter keeps `ceil(numel / ranks)` elements (`ds_tensor`, contiguous in
//!   `lp_param_buffer`); parameters of at most `stage3_param_persistence_threshold` elements are
//!   also kept whole (`ds_persist`); the fp32 master partitions are flat per sub-group of
//!   `sub_group_size` elements;
//! * at construction: the reduce bucket (`reduce_bucket_size` elements, `contiguous_gradients`)
//!   and the gradient partitions (`grad_partitions_flat_buffer`), both kept for the run;
//!   gradients are copied into the bucket as they are produced and freed;
//! * a layer's parameters are gathered (one flat buffer per all-gather, each parameter a view
//!   into it) when it runs and released after, unless used again within
//!   `stage3_max_reuse_distance` elements of parameters (then kept); upcoming parameters are
//!   prefetched, whole, until `stage3_prefetch_bucket_size` elements (and no more than
//!   `stage3_max_live_parameters` gathered at once). DeepSpeed fetches per submodule; vramfit
//!   gathers a whole layer at its boundary (the embeddings and the head are units of their own),
//!   which holds up to one layer's 16-bit weights more than DeepSpeed would at a time;
//! * `step()` walks the sub-groups: a flat 16-bit copy of the sub-group's gradients cast to an
//!   fp32 gradient, the step, the fp32 gradient freed.
//!
//! Offloading the optimizer moves the master partitions, the optimizer state, the step and
//! (stage 3) the gradient partitions to the host; offloading the parameters (stage 3) moves the
//! 16-bit partitions there too.

use super::shard::{zero_flat_partition, zero3_partition};
use super::{Dtypes, Offload, ZeroConfig};
use crate::graph::Graph;
use crate::optim::{OptimizerRun, Stepped};
use crate::timeline::{Component, Tid};
use crate::units::{DType, Overflow};

type Result<T> = std::result::Result<T, Overflow>;

fn bytes(numel: u64, dtype: DType) -> Result<u64> {
    numel.checked_mul(dtype.size()).ok_or(Overflow)
}

fn sum(values: impl IntoIterator<Item = u64>) -> Result<u64> {
    values.into_iter().try_fold(0u64, u64::checked_add).ok_or(Overflow)
}

/// The most elements of whole parameters overlapping any rank's partition of a flat buffer
/// of `numels` (in order) split into partitions of `partition` elements: the gradients
/// ZeRO-2 keeps on its worst rank. Only ranks whose partition holds a parameter boundary (or
/// lies inside one parameter) can be the worst, so those are the candidates.
pub(crate) fn worst_partition_overlap(numels: &[u64], partition: u64) -> u64 {
    if partition == 0 || numels.is_empty() {
        return 0;
    }
    // ends[i] = one past the last element of parameter i.
    let mut ends = Vec::with_capacity(numels.len());
    let mut end = 0u64;
    for &n in numels {
        end = end.saturating_add(n);
        ends.push(end);
    }
    let total = end;
    let containing = |element: u64| ends.partition_point(|&e| e <= element);
    let overlap = |rank: u64| -> u64 {
        let start = rank.saturating_mul(partition);
        if start >= total {
            return 0;
        }
        let last = start.saturating_add(partition).min(total) - 1;
        numels[containing(start)..=containing(last)].iter().fold(0u64, |a, &n| a.saturating_add(n))
    };
    let mut worst = overlap(0);
    let mut start = 0u64;
    for (&n, &e) in numels.iter().zip(&ends) {
        worst = worst.max(overlap(start / partition));
        if n > 0 {
            worst = worst.max(overlap((e - 1) / partition));
        }
        start = e;
    }
    worst
}

/// A stage-3 gather unit: a layer, the embeddings, or the head.
#[derive(Debug, Default)]
struct Unit {
    /// Each non-persistent parameter: `(numel, partition elements)`, in use order.
    params: Vec<(u64, u64)>,
    /// How many of them are gathered (always a prefix).
    gathered: usize,
    /// How many of that prefix another unit gathered (the head's tied embedding, still
    /// gathered by the embeddings' unit).
    borrowed: usize,
    /// The all-gather buffers holding them.
    buffers: Vec<Tid>,
}

impl Unit {
    fn numel(&self) -> u64 {
        self.params.iter().fold(0u64, |a, &(n, _)| a.saturating_add(n))
    }
}

/// ZeRO's state across one rank's step.
#[derive(Debug)]
pub(crate) struct Zero {
    stage: u8,
    world: u64,
    offload: Offload,
    dtypes: Dtypes,
    config: ZeroConfig,
    /// Stages 1/2: the flat partition's elements; stage 3: each sub-group's partition elements.
    partitions: Vec<u64>,
    /// Stage 2: the worst rank's whole-parameter gradient store, in elements.
    grads_in_partition_elements: u64,
    grads_in_partition: Option<Tid>,
    /// The reduce bucket while it is allocated (stages 1/2).
    bucket: Option<Tid>,
    /// Stage 3: layers `0..n`, then the embeddings, then the head.
    units: Vec<Unit>,
    /// Stage 3: elements gathered now.
    live: u64,
    /// Parameter bytes held outside `ParamState::resident` (flat buffers, master partitions,
    /// persistent copies).
    flat_parameter_bytes: u64,
    /// Gradient bytes a rank holds at the step.
    gradient_bytes: u64,
    /// A bare parameter count (`--params`), not a model: no parameter boundaries.
    bare_count: bool,
    /// Stage 3: the head's weight is the embedding table.
    tied: bool,
}

impl Zero {
    /// Partitions the registered parameters and allocates what ZeRO keeps for the run.
    pub(crate) fn new(
        g: &mut Graph,
        n_layers: Option<u64>,
        stage: u8,
        world: u64,
        offload: Offload,
        dtypes: Dtypes,
        config: ZeroConfig,
    ) -> Result<Zero> {
        let mut zero = Zero {
            stage,
            world,
            offload,
            dtypes,
            config,
            partitions: Vec::new(),
            grads_in_partition_elements: 0,
            grads_in_partition: None,
            bucket: None,
            units: Vec::new(),
            live: 0,
            flat_parameter_bytes: 0,
            gradient_bytes: 0,
            bare_count: n_layers.is_none(),
            tied: false,
        };
        if stage == 3 {
            zero.partition_stage3(g, n_layers.unwrap_or(0))?;
        } else {
            zero.partition_flat(g)?;
        }
        Ok(zero)
    }

    fn partition_flat(&mut self, g: &mut Graph) -> Result<()> {
        let compute = self.dtypes.compute;
        let numels: Vec<u64> = g.params.iter().filter(|p| p.trains).map(|p| p.numel).collect();
        let total = sum(numels.iter().copied())?;
        let partition = zero_flat_partition(total, self.world);
        let flat = partition.checked_mul(self.world).ok_or(Overflow)?;
        let mut parameters = 0u64;
        // The module's frozen parameters stay as they are; the trainable ones move into the
        // flat buffer.
        for p in &mut g.params {
            p.resident = if p.trains { 0 } else { bytes(p.numel, compute)? };
            if p.trains && self.stage == 2 {
                p.grad_to_buffer = true;
            }
        }
        for i in 0..g.params.len() {
            if !g.params[i].trains {
                g.tl.alloc(Component::Parameters, g.params[i].resident)?;
            }
        }
        let flat_bytes = bytes(flat, compute)?;
        g.tl.alloc(Component::Parameters, flat_bytes)?;
        parameters = parameters.checked_add(flat_bytes).ok_or(Overflow)?;
        let largest = numels.iter().copied().max().unwrap_or(0);
        // Model states count what scales with the model; the communication buffers (the
        // offload staging buffer, the reduce bucket) are in the stream, not in them.
        let mut gradients = 0u64;
        if self.offload.optimizer() {
            // `temp_grad_buffer_for_gpu_offload`: gradients pass through it to the host. A bare
            // parameter count has no largest parameter to size it by.
            if !self.bare_count {
                g.tl.alloc(Component::Gradients, bytes(largest, compute)?)?;
            }
        } else {
            let master = bytes(partition, self.dtypes.master)?;
            g.tl.alloc(Component::Parameters, master)?;
            parameters = parameters.checked_add(master).ok_or(Overflow)?;
            gradients = gradients.checked_add(master).ok_or(Overflow)?;
        }
        // ZeRO-2 keeps its partition's gradients on the device (unless they go to the host);
        // ZeRO-1 every gradient.
        let held = match (self.stage, self.offload.optimizer()) {
            (2, true) => 0,
            (2, false) => {
                // A bare parameter count has no boundaries for a partition to cut: its
                // partition's share.
                self.grads_in_partition_elements = if self.bare_count {
                    partition
                } else {
                    worst_partition_overlap(&numels, partition)
                };
                self.grads_in_partition_elements
            }
            _ => total,
        };
        gradients = gradients.checked_add(bytes(held, compute)?).ok_or(Overflow)?;
        self.partitions = vec![partition];
        self.flat_parameter_bytes = parameters;
        self.gradient_bytes = gradients;
        Ok(())
    }

    fn partition_stage3(&mut self, g: &mut Graph, n_layers: u64) -> Result<()> {
        let compute = self.dtypes.compute;
        let world = self.world;
        let n = usize::try_from(n_layers).map_err(|_| Overflow)?;
        let (before, after) = (n, n + 1);
        self.units = (0..n + 2).map(|_| Unit::default()).collect();
        let first_layer = g.params.iter().position(|p| p.layer.is_some()).unwrap_or(g.params.len());
        let mut lp = 0u64;
        let mut persistent = 0u64;
        let mut trainable_partitions = Vec::new();
        for (i, p) in g.params.iter_mut().enumerate() {
            let partition = zero3_partition(p.numel, world);
            lp = lp.checked_add(partition).ok_or(Overflow)?;
            p.resident = 0;
            if p.trains {
                p.grad_to_buffer = true;
                trainable_partitions.push(partition);
            }
            if p.numel <= self.config.param_persistence_threshold {
                persistent = persistent.checked_add(bytes(p.numel, compute)?).ok_or(Overflow)?;
                continue;
            }
            let unit = match p.layer {
                Some(l) => l as usize,
                None if i < first_layer => before,
                None => after,
            };
            self.units[unit].params.push((p.numel, partition));
            if p.shared && unit == before {
                // A tied embedding is the head's weight too (its first parameter).
                self.units[after].params.insert(0, (p.numel, partition));
                self.tied = true;
            }
        }
        let mut parameters = 0u64;
        if !self.offload.params() {
            let buffer = bytes(lp, compute)?;
            g.tl.alloc(Component::Parameters, buffer)?;
            parameters = buffer;
        }
        if persistent > 0 {
            g.tl.alloc(Component::Parameters, persistent)?;
            parameters = parameters.checked_add(persistent).ok_or(Overflow)?;
        }
        // Sub-groups close once they reach `sub_group_size` partition elements.
        let mut sub_groups = Vec::new();
        let mut open = 0u64;
        for (k, &part) in trainable_partitions.iter().enumerate() {
            open = open.checked_add(part).ok_or(Overflow)?;
            if open >= self.config.sub_group_size || k + 1 == trainable_partitions.len() {
                sub_groups.push(open);
                open = 0;
            }
        }
        let trainable = sum(trainable_partitions.iter().copied())?;
        let mut gradients = 0u64;
        if !self.offload.optimizer() {
            for &sub in &sub_groups {
                let master = bytes(sub, self.dtypes.master)?;
                g.tl.alloc(Component::Parameters, master)?;
                parameters = parameters.checked_add(master).ok_or(Overflow)?;
            }
        }
        // The reduce bucket: in the stream, not in the model states (a communication buffer).
        g.tl.alloc(Component::Gradients, bytes(self.config.reduce_bucket_size, compute)?)?;
        if !self.offload.optimizer() {
            let partitions = bytes(trainable, compute)?;
            g.tl.alloc(Component::Gradients, partitions)?;
            let largest = sub_groups.iter().copied().max().unwrap_or(0);
            gradients = gradients
                .checked_add(partitions)
                .and_then(|x| x.checked_add(bytes(largest, self.dtypes.master).ok()?))
                .ok_or(Overflow)?;
        }
        self.partitions = sub_groups;
        self.flat_parameter_bytes = parameters;
        self.gradient_bytes = gradients;
        Ok(())
    }

    // Stage 3's gathering.

    /// Gathers the unit's parameters up to `upto` (one all-gather buffer).
    fn gather(&mut self, g: &mut Graph, u: usize, upto: usize) -> Result<()> {
        let (before, after) = (self.layers(), self.layers() + 1);
        if u == after
            && self.tied
            && self.units[after].gathered == 0
            && self.units[before].gathered > 0
        {
            // The tied embedding is still gathered: DeepSpeed does not gather it twice.
            self.units[after].gathered = 1;
            self.units[after].borrowed = 1;
        }
        let unit = &self.units[u];
        if upto <= unit.gathered {
            return Ok(());
        }
        let (mut elements, mut numel) = (0u64, 0u64);
        for &(n, part) in &unit.params[unit.gathered..upto] {
            elements = elements
                .checked_add(part.checked_mul(self.world).ok_or(Overflow)?)
                .ok_or(Overflow)?;
            numel = numel.saturating_add(n);
        }
        let t = g.tl.alloc(Component::Parameters, bytes(elements, self.dtypes.compute)?)?;
        let unit = &mut self.units[u];
        unit.buffers.push(t);
        unit.gathered = upto;
        self.live = self.live.saturating_add(numel);
        Ok(())
    }

    fn fetch(&mut self, g: &mut Graph, u: usize) -> Result<()> {
        let all = self.units[u].params.len();
        self.gather(g, u, all)
    }

    /// Prefetches the next unit's parameters, whole, until the prefetch bucket is reached
    /// (or the live cap).
    fn prefetch(&mut self, g: &mut Graph, u: usize) -> Result<()> {
        let budget = self
            .config
            .prefetch_bucket_size
            .min(self.config.max_live_parameters.saturating_sub(self.live));
        let unit = &self.units[u];
        let mut upto = unit.gathered;
        let mut fetched = 0u64;
        while upto < unit.params.len() && fetched < budget {
            fetched = fetched.saturating_add(unit.params[upto].0);
            upto += 1;
        }
        self.gather(g, u, upto)
    }

    fn release(&mut self, g: &mut Graph, u: usize) {
        let unit = &mut self.units[u];
        let numel: u64 = unit.params[unit.borrowed.min(unit.gathered)..unit.gathered]
            .iter()
            .fold(0u64, |a, &(n, _)| a.saturating_add(n));
        self.live = self.live.saturating_sub(numel);
        unit.borrowed = 0;
        unit.gathered = 0;
        for t in unit.buffers.drain(..) {
            g.tl.release(t);
        }
    }

    fn layers(&self) -> usize {
        self.units.len() - 2
    }

    /// Releases a unit after its forward unless it is used again within the reuse distance:
    /// the elements gathered in between (`traversed`).
    fn release_unless_reused(&mut self, g: &mut Graph, u: usize, traversed: u64) {
        if traversed >= self.config.max_reuse_distance {
            self.release(g, u);
        }
    }

    /// The elements of the layers after `layer`.
    fn numel_after(&self, layer: usize) -> u64 {
        self.units[layer + 1..self.layers()].iter().fold(0u64, |a, u| a.saturating_add(u.numel()))
    }

    /// The step's forward starts: stage 3 fetches the embeddings.
    pub(crate) fn forward_start(&mut self, g: &mut Graph) -> Result<()> {
        if self.stage == 3 {
            let before = self.layers();
            self.fetch(g, before)?;
            if self.layers() > 0 {
                self.prefetch(g, 0)?;
            }
        }
        Ok(())
    }

    /// A layer's forward starts.
    pub(crate) fn pre_forward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        if self.stage != 3 {
            return Ok(());
        }
        let (n, before, after) = (self.layers(), self.layers(), self.layers() + 1);
        if layer == 0 {
            // The embeddings ran; a tied one is used again by the head, else in backward.
            let all: u64 = self.units[..n].iter().fold(0u64, |a, u| a.saturating_add(u.numel()));
            let head = self.units[after].numel();
            let traversed = if self.tied {
                all
            } else {
                all.saturating_mul(2).saturating_add(head.saturating_mul(2))
            };
            self.release_unless_reused(g, before, traversed);
        }
        self.fetch(g, layer)?;
        if layer + 1 < n { self.prefetch(g, layer + 1) } else { self.prefetch(g, after) }
    }

    /// A layer's forward ends: stage 3 releases it (unless backward reuses it soon), and after
    /// the last layer fetches the head.
    pub(crate) fn post_forward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        if self.stage != 3 {
            return Ok(());
        }
        let after = self.layers() + 1;
        let head = self.units[after].numel();
        let traversed = self.numel_after(layer).saturating_add(head).saturating_mul(2);
        self.release_unless_reused(g, layer, traversed);
        if layer + 1 == self.layers() {
            self.fetch(g, after)?;
        }
        Ok(())
    }

    /// Backward starts (the loss's gradient exists).
    pub(crate) fn backward_start(&mut self, g: &mut Graph) -> Result<()> {
        if self.stage == 2 && self.bucket.is_none() {
            self.bucket = Some(self.alloc_bucket(g)?);
            if self.grads_in_partition.is_none() && self.grads_in_partition_elements > 0 {
                let b = bytes(self.grads_in_partition_elements, self.dtypes.compute)?;
                self.grads_in_partition = Some(g.tl.alloc(Component::Gradients, b)?);
            }
        }
        if self.stage == 3 {
            let n = self.layers();
            if n > 0 {
                self.prefetch(g, n - 1)?;
            }
        }
        Ok(())
    }

    fn alloc_bucket(&self, g: &mut Graph) -> Result<Tid> {
        g.tl.alloc(
            Component::Gradients,
            bytes(self.config.reduce_bucket_size, self.dtypes.compute)?,
        )
    }

    /// Backward enters a layer.
    pub(crate) fn pre_backward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        if self.stage != 3 {
            return Ok(());
        }
        let (before, after) = (self.layers(), self.layers() + 1);
        if layer + 1 == self.layers() {
            self.release(g, after);
        }
        self.fetch(g, layer)?;
        if layer > 0 { self.prefetch(g, layer - 1) } else { self.prefetch(g, before) }
    }

    /// Backward leaves a layer.
    pub(crate) fn post_backward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        if self.stage == 3 {
            self.release(g, layer);
            if layer == 0 {
                let before = self.layers();
                self.fetch(g, before)?;
            }
        }
        Ok(())
    }

    /// Backward ends (its epilogue): the bucket goes (stage 2), everything gathered is
    /// released (stage 3).
    pub(crate) fn backward_end(&mut self, g: &mut Graph) {
        if let Some(t) = self.bucket.take() {
            g.tl.release(t);
        }
        for u in 0..self.units.len() {
            self.release(g, u);
        }
    }

    /// What the optimizer steps on the device: the fp32 partitions (none when offloaded).
    pub(crate) fn stepped(&self) -> Vec<Stepped> {
        if self.offload.optimizer() {
            return Vec::new();
        }
        self.partitions
            .iter()
            .map(|&numel| Stepped { numel, matrix: None, dtype: self.dtypes.master })
            .collect()
    }

    /// `engine.step()`: the gradients flattened and cast to fp32, the optimizer, the fp32
    /// gradient freed (sub-group by sub-group for stage 3).
    pub(crate) fn step(&mut self, g: &mut Graph, opt: &mut OptimizerRun) -> Result<()> {
        if self.offload.optimizer() {
            // The step runs on the host; stage 1/2's gradients went there through the staging
            // buffer.
            self.free_gradients(g);
            return opt.step(g);
        }
        if self.stage == 1 {
            // ZeRO-1 reduces the accumulated gradients now, through the bucket.
            let bucket = self.alloc_bucket(g)?;
            g.tl.release(bucket);
        }
        let compute = self.dtypes.compute;
        for k in 0..self.partitions.len() {
            let part = self.partitions[k];
            let flat = g.tl.alloc(Component::Temporaries, bytes(part, compute)?)?;
            let fp32 = g.tl.alloc(Component::Gradients, bytes(part, self.dtypes.master)?)?;
            g.tl.release(flat);
            if k == 0 {
                self.free_gradients(g);
            }
            opt.step_range(g, k..k + 1)?;
            g.tl.release(fp32);
        }
        Ok(())
    }

    fn free_gradients(&mut self, g: &mut Graph) {
        if let Some(t) = self.grads_in_partition.take() {
            g.tl.release(t);
        }
        if self.stage == 1 {
            let grads: Vec<Tid> = g.params.iter_mut().filter_map(|p| p.grad.take()).collect();
            for t in grads {
                g.tl.release(t);
            }
        }
    }

    /// Host memory with offload: `(pinned, pageable)` bytes of one rank.
    pub(crate) fn host(&self, g: &Graph, setup: &crate::setup::TrainSetup) -> Result<(u64, u64)> {
        let compute = self.dtypes.compute;
        let partitions = sum(self.partitions.iter().copied())?;
        let mut pinned = 0u64;
        let mut pageable = 0u64;
        if self.offload.optimizer() {
            let stepped: Vec<Stepped> = self
                .partitions
                .iter()
                .map(|&numel| Stepped { numel, matrix: None, dtype: self.dtypes.master })
                .collect();
            // The master partitions and their state; the fp32 gradients.
            pageable = bytes(partitions, self.dtypes.master)?
                .checked_add(super::runtime::host_state(setup, &stepped)?)
                .ok_or(Overflow)?;
            pinned = bytes(partitions, self.dtypes.master)?;
            // Stage 1/2: the 16-bit partition and the largest gradient staged; stage 3: the
            // 16-bit gradient partitions.
            let staging = if self.stage == 3 {
                bytes(partitions, compute)?
            } else {
                let largest =
                    g.params.iter().filter(|p| p.trains).map(|p| p.numel).max().unwrap_or(0);
                bytes(partitions, compute)?.checked_add(bytes(largest, compute)?).ok_or(Overflow)?
            };
            pinned = pinned.checked_add(staging).ok_or(Overflow)?;
        }
        if self.offload.params() {
            let lp = sum(g.params.iter().map(|p| zero3_partition(p.numel, self.world)))?;
            pinned = pinned.checked_add(bytes(lp, compute)?).ok_or(Overflow)?;
        }
        Ok((pinned, pageable))
    }

    /// Parameter bytes held in ZeRO's own buffers.
    pub(crate) fn flat_parameter_bytes(&self) -> u64 {
        self.flat_parameter_bytes
    }

    /// Gradient bytes a rank holds at the step.
    pub(crate) fn gradient_bytes(&self) -> u64 {
        self.gradient_bytes
    }

    /// Whether ranks differ (stage 2: a partition cutting through large parameters).
    pub(crate) fn uneven(&self) -> bool {
        self.stage == 2
            && self.partitions.first().is_some_and(|&p| self.grads_in_partition_elements > p)
    }
}

#[cfg(test)]
mod tests {
    use super::worst_partition_overlap;

    #[track_caller]
    fn check(numels: &[u64], partition: u64, expected: u64) {
        assert_eq!(worst_partition_overlap(numels, partition), expected);
        // Against every rank, one by one.
        let total: u64 = numels.iter().sum();
        let mut brute = 0;
        for rank in 0..total.div_ceil(partition) {
            let (lo, hi) = (rank * partition, (rank + 1) * partition);
            let mut start = 0;
            let mut held = 0;
            for &n in numels {
                if start < hi && start + n > lo {
                    held += n;
                }
                start += n;
            }
            brute = brute.max(held);
        }
        assert_eq!(expected, brute);
    }

    #[test]
    fn the_worst_rank_holds_the_parameters_its_partition_cuts() {
        check(&[10, 10, 10, 10], 10, 10);
        check(&[10, 10, 10, 10], 15, 20);
        check(&[100, 1, 1, 1, 100], 50, 103);
        check(&[7], 2, 7);
        check(&[3, 3, 3, 3, 3, 3, 3], 5, 9);
    }
}
