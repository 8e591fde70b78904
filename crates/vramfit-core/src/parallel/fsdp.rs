//! FSDP2 (`fully_shard`) on one rank, as `torch/distributed/fsdp/_fully_shard/` (torch 2.15.0)
//! allocates: every decoder layer is a unit and the root (embeddings, final norm, head) is
//! another.
//!
//! * Each parameter's padded dim-0 shard is resident (`_sharded_param_data`), in the master
//!   dtype (fp32 under `MixedPrecisionPolicy(param_dtype=bf16)`).
//! * **Unshard** (`FSDPParamGroup.unshard` → `foreach_all_gather`): under mixed precision a flat
//!   cast copy of the unit's shards (`flat_foreach_copy_input`), then one all-gather output of
//!   `world × Σ padded shard` elements in the compute dtype; the copy is freed.
//! * **Copy-out** (`wait_for_unshard` → `foreach_all_gather_copy_out`): one unsharded storage
//!   per parameter (`alloc_all_gather_outputs`, padded). In forward the all-gather output is
//!   kept until the next unit's copy-out (`comm_ctx.all_gather_state`, the copy-in overlap) and
//!   the root's post-forward releases the last; in backward it is freed at once.
//! * **Prefetch**: the forward relies on the copy-in overlap above; in backward each unit's
//!   pre-backward unshards the unit before it in post-forward order (`_backward_prefetch`), the
//!   root's pre-backward the last layer.
//! * **Reshard**: a layer's unsharded storages are freed in its post-forward
//!   (`reshard_after_forward`, FULL_SHARD) and in its post-backward; the root keeps its
//!   parameters unsharded through forward and backward.
//! * **Post-backward** (`post_backward` → `foreach_reduce`): the reduce-scatter input kept for
//!   the previous unit is freed (`reduce_scatter_max_input_buffers` = 1), a flat input of
//!   `world × Σ padded` elements in the reduce dtype is allocated, the unsharded gradients are
//!   freed, and the output (`Σ padded` elements) becomes the unit's sharded gradients (added
//!   into them under accumulation). The root's runs in the final callback of backward, which
//!   then releases the last reduce-scatter input (`_end_backward_iteration`).
//! * **CPU offload** (`CPUOffloadPolicy`): shards, sharded gradients and the optimizer step
//!   live on the host; each unshard copies the unit's shards to the device first, and each
//!   reduce-scatter output is copied back and freed.
//!
//! The order of these allocations is the one the CPU thread issues (what the caching allocator
//! sees), which on a single process over a fake process group is also what `FSDPMemTracker`
//! records; `validation/oracle_sharded.py` holds this model to it.

use super::Dtypes;
use super::shard::fsdp_padded_shard;
use crate::graph::{Graph, ParamId};
use crate::optim::Stepped;
use crate::timeline::{Component, Tid};
use crate::units::{DType, Overflow};

type Result<T> = std::result::Result<T, Overflow>;

fn bytes(numel: u64, dtype: DType) -> Result<u64> {
    numel.checked_mul(dtype.size()).ok_or(Overflow)
}

/// One `fully_shard` unit.
#[derive(Debug, Default)]
struct Unit {
    params: Vec<ParamId>,
    /// Each parameter's padded shard, in elements.
    padded: Vec<u64>,
    /// An all-gather issued and not yet copied out (a prefetch).
    all_gather: Option<Tid>,
    /// The gathered parameters (empty while sharded).
    unsharded: Vec<Tid>,
    /// The reduce-scatter output: the unit's sharded gradients.
    sharded_grad: Option<Tid>,
}

impl Unit {
    fn padded_total(&self) -> Result<u64> {
        self.padded.iter().try_fold(0u64, |a, &b| a.checked_add(b)).ok_or(Overflow)
    }
}

/// FSDP's state across one rank's step.
#[derive(Debug)]
pub(crate) struct Fsdp {
    world: u64,
    reshard_after_forward: bool,
    offload: bool,
    dtypes: Dtypes,
    /// Layers `0..n`, then the root.
    units: Vec<Unit>,
    /// The last all-gather output of the forward, kept for the next copy-in.
    all_gather_state: Option<Tid>,
    /// Reduce-scatter inputs kept until the next unit's post-backward.
    reduce_scatter_inputs: Vec<Tid>,
}

impl Fsdp {
    /// Shards the registered parameters: each one's padded shard becomes resident (unless
    /// offloaded).
    pub(crate) fn new(
        g: &mut Graph,
        n_layers: u64,
        world: u64,
        reshard_after_forward: bool,
        offload: bool,
        dtypes: Dtypes,
    ) -> Result<Fsdp> {
        let n = usize::try_from(n_layers).map_err(|_| Overflow)?;
        let mut units: Vec<Unit> = (0..=n).map(|_| Unit::default()).collect();
        for i in 0..g.params.len() {
            let p = &g.params[i];
            let padded = fsdp_padded_shard(p.numel, p.dim0, world);
            let unit = p.layer.map_or(n, |l| l as usize);
            let resident = if offload { 0 } else { bytes(padded, dtypes.master)? };
            g.params[i].resident = resident;
            if resident > 0 {
                g.tl.alloc(Component::Parameters, resident)?;
            }
            units[unit].params.push(ParamId(i));
            units[unit].padded.push(padded);
        }
        Ok(Fsdp {
            world,
            reshard_after_forward,
            offload,
            dtypes,
            units,
            all_gather_state: None,
            reduce_scatter_inputs: Vec::new(),
        })
    }

    fn root(&self) -> usize {
        self.units.len() - 1
    }

    /// The all-gather of a unit, unless it is gathered or already being gathered.
    fn unshard(&mut self, g: &mut Graph, u: usize) -> Result<()> {
        let unit = &self.units[u];
        if !unit.unsharded.is_empty() || unit.all_gather.is_some() || unit.params.is_empty() {
            return Ok(());
        }
        if self.world == 1 {
            return Ok(());
        }
        let total = unit.padded_total()?;
        let mut inputs = Vec::with_capacity(2);
        if self.offload {
            // `all_gather_inputs`: the shards copied to the device.
            inputs.push(g.tl.alloc(Component::Temporaries, bytes(total, self.dtypes.master)?)?);
        }
        if self.dtypes.compute != self.dtypes.master {
            // `flat_foreach_copy_input`: the shards cast to `param_dtype`.
            inputs.push(g.tl.alloc(Component::Temporaries, bytes(total, self.dtypes.compute)?)?);
        }
        let gathered = total.checked_mul(self.world).ok_or(Overflow)?;
        let output = g.tl.alloc(Component::Parameters, bytes(gathered, self.dtypes.compute)?)?;
        for t in inputs {
            g.tl.release(t);
        }
        self.units[u].all_gather = Some(output);
        Ok(())
    }

    /// The copy-out: the unit's parameters gathered, one storage each.
    fn wait_for_unshard(&mut self, g: &mut Graph, u: usize, forward: bool) -> Result<()> {
        if !self.units[u].unsharded.is_empty() || self.units[u].params.is_empty() {
            return Ok(());
        }
        let pending = self.units[u].all_gather.take();
        if self.world > 1 && pending.is_none() {
            return Ok(());
        }
        if forward && let Some(previous) = self.all_gather_state.take() {
            g.tl.release(previous);
        }
        let compute = self.dtypes.compute;
        for k in 0..self.units[u].padded.len() {
            let elements = self.units[u].padded[k].checked_mul(self.world).ok_or(Overflow)?;
            // One process: each shard is copied (and cast) into its own storage.
            let cast = if self.world == 1 && compute != self.dtypes.master {
                Some(g.tl.alloc(Component::Temporaries, bytes(elements, compute)?)?)
            } else {
                None
            };
            let t = g.tl.alloc(Component::Parameters, bytes(elements, compute)?)?;
            if let Some(c) = cast {
                g.tl.release(c);
            }
            self.units[u].unsharded.push(t);
        }
        if let Some(output) = pending {
            if forward {
                self.all_gather_state = Some(output);
            } else {
                g.tl.release(output);
            }
        }
        Ok(())
    }

    fn reshard(&mut self, g: &mut Graph, u: usize) {
        for t in self.units[u].unsharded.drain(..) {
            g.tl.release(t);
        }
    }

    /// The root's pre-forward.
    pub(crate) fn forward_start(&mut self, g: &mut Graph) -> Result<()> {
        let root = self.root();
        self.unshard(g, root)?;
        self.wait_for_unshard(g, root, true)
    }

    /// A layer's pre-forward.
    pub(crate) fn pre_forward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        self.unshard(g, layer)?;
        self.wait_for_unshard(g, layer, true)
    }

    /// A layer's post-forward.
    pub(crate) fn post_forward(&mut self, g: &mut Graph, layer: usize) {
        if self.reshard_after_forward {
            self.reshard(g, layer);
        }
    }

    /// The root's post-forward (after the loss, which the model's forward computes).
    pub(crate) fn forward_end(&mut self, g: &mut Graph) {
        if let Some(t) = self.all_gather_state.take() {
            g.tl.release(t);
        }
    }

    /// The root's pre-backward (a hook on the loss): it prefetches the last layer.
    pub(crate) fn backward_start(&mut self, g: &mut Graph) -> Result<()> {
        let root = self.root();
        if root > 0 {
            self.unshard(g, root - 1)?;
        }
        Ok(())
    }

    /// A layer's pre-backward: its copy-out, then the prefetch of the layer before it.
    pub(crate) fn pre_backward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        self.unshard(g, layer)?;
        self.wait_for_unshard(g, layer, false)?;
        if layer > 0 {
            self.unshard(g, layer - 1)?;
        }
        Ok(())
    }

    /// A unit's post-backward: reshard, then reduce-scatter its gradients.
    pub(crate) fn post_backward(&mut self, g: &mut Graph, u: usize) -> Result<()> {
        let mut grads = Vec::new();
        let mut padded_with_grad = 0u64;
        for (k, &p) in self.units[u].params.iter().enumerate() {
            if let Some(grad) = g.params[p.0].grad.take() {
                grads.push(grad);
                padded_with_grad =
                    padded_with_grad.checked_add(self.units[u].padded[k]).ok_or(Overflow)?;
            }
        }
        self.reshard(g, u);
        for t in self.reduce_scatter_inputs.drain(..) {
            g.tl.release(t);
        }
        if grads.is_empty() {
            return Ok(());
        }
        let reduce = self.dtypes.reduce;
        let input_elements = padded_with_grad.checked_mul(self.world).ok_or(Overflow)?;
        let input = g.tl.alloc(Component::Gradients, bytes(input_elements, reduce)?)?;
        for grad in grads {
            g.tl.release(grad);
        }
        let output = g.tl.alloc(Component::Gradients, bytes(padded_with_grad, reduce)?)?;
        if self.offload || self.units[u].sharded_grad.is_some() {
            // Copied to the host, or added into the gradients of an earlier micro-batch.
            g.tl.release(output);
        } else {
            self.units[u].sharded_grad = Some(output);
        }
        self.reduce_scatter_inputs.push(input);
        Ok(())
    }

    /// The end of backward: the root's post-backward, then the last reduce-scatter input goes.
    pub(crate) fn backward_end(&mut self, g: &mut Graph) -> Result<()> {
        let root = self.root();
        self.post_backward(g, root)?;
        for t in self.reduce_scatter_inputs.drain(..) {
            g.tl.release(t);
        }
        Ok(())
    }

    /// What the optimizer steps on the device: rank 0's local shards (full `c`-row chunks).
    pub(crate) fn stepped(&self, g: &Graph) -> Vec<Stepped> {
        if self.offload { Vec::new() } else { self.local_shards(g) }
    }

    /// Rank 0's local shards of the parameters that train, wherever they live.
    fn local_shards(&self, g: &Graph) -> Vec<Stepped> {
        let mut stepped = Vec::new();
        for unit in &self.units {
            for (k, &p) in unit.params.iter().enumerate() {
                let state = &g.params[p.0];
                if !state.trains {
                    continue;
                }
                let rows = state.dim0.div_ceil(self.world);
                let matrix = state.matrix.map(|_| (rows, state.numel / state.dim0.max(1)));
                stepped.push(Stepped { numel: unit.padded[k], matrix, dtype: self.dtypes.master });
            }
        }
        stepped
    }

    /// The sharded gradients held at the step.
    pub(crate) fn gradient_bytes(&self, g: &Graph) -> Result<u64> {
        if self.offload { Ok(0) } else { self.sharded_gradient_bytes(g) }
    }

    fn sharded_gradient_bytes(&self, g: &Graph) -> Result<u64> {
        let mut total = 0u64;
        for unit in &self.units {
            for (k, &p) in unit.params.iter().enumerate() {
                if g.params[p.0].trains {
                    total = total
                        .checked_add(bytes(unit.padded[k], self.dtypes.reduce)?)
                        .ok_or(Overflow)?;
                }
            }
        }
        Ok(total)
    }

    /// `zero_grad(set_to_none=True)` on the sharded gradients.
    pub(crate) fn zero_grad(&mut self, g: &mut Graph) {
        for unit in &mut self.units {
            if let Some(t) = unit.sharded_grad.take() {
                g.tl.release(t);
            }
        }
    }

    /// Host memory with `CPUOffloadPolicy`: `(pinned, pageable)` bytes of one rank — the shards
    /// and sharded gradients (pinned), the optimizer state.
    pub(crate) fn host(&self, g: &Graph, setup: &crate::setup::TrainSetup) -> Result<(u64, u64)> {
        let shards = self
            .units
            .iter()
            .flat_map(|u| &u.padded)
            .try_fold(0u64, |a, &n| a.checked_add(bytes(n, self.dtypes.master).ok()?));
        let pinned =
            shards.ok_or(Overflow)?.checked_add(self.sharded_gradient_bytes(g)?).ok_or(Overflow)?;
        Ok((pinned, super::runtime::host_state(setup, &self.local_shards(g))?))
    }

    /// Whether some parameter's rows do not divide evenly (so ranks differ).
    pub(crate) fn uneven(&self, g: &Graph) -> bool {
        self.units
            .iter()
            .flat_map(|u| &u.params)
            .any(|p| !g.params[p.0].dim0.is_multiple_of(self.world))
    }
}
