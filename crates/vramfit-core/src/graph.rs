//! A miniature autograd: forward ops allocate outputs and record what they save; backward
//! walks the recorded nodes in reverse, allocating input gradients before it frees the saved
//! tensors and the incoming gradient, as PyTorch's engine does.
//!
//! Every allocation and free goes through the [`Timeline`], so the forward, the backward and
//! the optimizer step are one stream.

use crate::timeline::{Component, Tid, Timeline};
use crate::units::{DType, Overflow};

/// A parameter tensor of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamId(pub(crate) usize);

/// How a node produces the gradient of one of its inputs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Grad {
    /// A new tensor of this many bytes.
    New(Tid, u64),
    /// The incoming gradient itself (add, views, dtype-preserving pass-through).
    Pass(Tid),
    /// The gradient of a parameter the op used as it is (norms, the embedding lookup).
    Param(ParamId, u64),
    /// The gradient of a parameter a matmul used through autocast's cached low-precision copy:
    /// `bytes` in the compute dtype, then cast to the parameter's dtype by the copy's node
    /// (when the parameter has such a copy).
    ParamCast(ParamId, u64),
    /// A gradient the op computed during its forward and saved (a fused loss): backward
    /// hands that tensor on as the input's gradient, allocating nothing.
    Ready(Tid, Tid),
    /// As [`Grad::Ready`], for a parameter (in the parameter's dtype).
    ParamReady(ParamId, Tid),
    /// Not a gradient: a temporary of this many bytes the backward allocates at this point
    /// and frees once it has made the gradients listed after it (a quantised weight
    /// dequantised for the input's gradient).
    Scratch(u64),
}

#[derive(Debug, Clone, Copy)]
enum Node {
    /// An op: its output, what it saved and how it makes its inputs' gradients (ranges into
    /// the graph's pools, so recording allocates nothing per node).
    Op { output: Tid, saved: (u32, u32), grads: (u32, u32) },
    /// The forward entered a layer; backward leaves it here.
    LayerStart { layer: usize },
    /// The forward left a layer; backward enters it here. A checkpointed layer recorded no
    /// op and holds only its input and the tensors it was called with (`held`, a pool range).
    LayerEnd { layer: usize, checkpoint: Option<(Tid, Tid, (u32, u32))> },
}

/// A layer boundary backward has reached: where the step code acts (a checkpointed layer is
/// replayed; sharding will gather and free a layer's parameters here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Boundary {
    /// Backward is about to enter a layer.
    LayerEnd {
        /// The layer.
        layer: usize,
        /// For a checkpointed layer, what it kept.
        checkpoint: Option<Checkpoint>,
    },
    /// Backward has left a layer.
    LayerStart {
        /// The layer.
        layer: usize,
    },
}

/// What a checkpointed layer keeps until its backward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    /// The layer's input (one reference held).
    pub(crate) input: Tid,
    /// The output its first forward produced (its gradient arrives here).
    pub(crate) output: Tid,
    /// The other tensors it was called with (one reference each): the model-level attention
    /// mask, rotary cos/sin, position ids.
    pub(crate) held: Vec<Tid>,
}

impl ParamState {
    /// Bytes of its gradient (`numel × dtype`: PyTorch's `.grad` has the parameter's dtype).
    pub(crate) fn grad_bytes(&self) -> u64 {
        // `add_param` checked `numel × dtype` for the resident size of a plain parameter.
        self.numel.saturating_mul(self.dtype.size())
    }
}

/// A parameter's bookkeeping during a step.
#[derive(Debug, Clone)]
pub(crate) struct ParamState {
    /// Elements.
    pub(crate) numel: u64,
    /// The dtype it is stored and trained in (its gradient's dtype too).
    pub(crate) dtype: DType,
    /// Whether it requires a gradient (frozen parameters get none, and no optimizer state).
    pub(crate) trains: bool,
    /// Bytes it occupies on the device (`numel × dtype` unless stored otherwise).
    pub(crate) resident: u64,
    /// Bytes of autocast's low-precision copy (0: no copy).
    pub(crate) cast_bytes: u64,
    /// The cached low-precision copy during this forward.
    pub(crate) cast: Option<Tid>,
    /// `.grad`.
    pub(crate) grad: Option<Tid>,
    /// `(rows, cols)` of a 2-D parameter; `None` for vectors.
    pub(crate) matrix: Option<(u64, u64)>,
    /// Used twice per forward (tied input and output embeddings): backward sums the two
    /// contributions in autograd's input buffer before `AccumulateGrad` sees them.
    pub(crate) shared: bool,
    /// The first contribution of a shared parameter, waiting in the input buffer.
    pub(crate) pending: Option<Tid>,
    /// Several ops of one forward use it (a chunked-output loss's output layer, once per
    /// chunk): as for `shared`, autograd's input buffer adds the first two contributions out
    /// of place, later ones into the sum.
    pub(crate) several_uses: bool,
    /// This backward's first two contributions of a shared parameter have been summed: the
    /// sum is contiguous and autograd's only reference, so later contributions (a
    /// chunked-output loss applies the output layer once per chunk) are added into it.
    pub(crate) summed: bool,
    /// The layer it belongs to (`None`: the embeddings, the head, the root of a sharded model).
    pub(crate) layer: Option<u64>,
    /// torch's first dimension (the one FSDP shards); `numel` for a vector.
    pub(crate) dim0: u64,
    /// Its gradient is copied into a communication buffer the moment it is ready and freed
    /// (DDP's bucket views, ZeRO's contiguous gradients), so no `.grad` stays.
    pub(crate) grad_to_buffer: bool,
}

pub(crate) struct Graph<'o> {
    pub(crate) tl: Timeline<'o>,
    nodes: Vec<Node>,
    saved_pool: Vec<Tid>,
    grad_pool: Vec<Grad>,
    scratch: Vec<(Tid, Tid)>,
    param_scratch: Vec<(ParamId, Tid, bool)>,
    grad_of: Vec<Option<Tid>>,
    /// Whether each tensor requires a gradient (indexed by storage; false until an op that
    /// records a node produces it).
    requires_grad: Vec<bool>,
    pub(crate) params: Vec<ParamState>,
    /// The parameters with a cached low-precision copy in this forward, in the order the
    /// copies were made.
    cast_params: Vec<usize>,
    /// While false (inside a checkpointed segment's first forward), nothing is saved.
    pub(crate) saving: bool,
    /// Storages the model's output object will hold besides the logits and the loss (the KV
    /// cache's keys and values), one reference each, gathered during the forward.
    pub(crate) outputs: Vec<Tid>,
    /// Storages an autograd node keeps as a Python attribute rather than a saved tensor
    /// (bitsandbytes' `ctx.tensors`): backward does not free them, nor do checkpointing's
    /// saved-tensor hooks see them; the graph's destruction does (one reference each).
    pub(crate) graph_held: Vec<Tid>,
    /// A checkpointed layer's forward is being replayed (its graph dies when the replay
    /// ends, and what its nodes hold as attributes with it).
    pub(crate) replaying: bool,
}

impl<'o> Graph<'o> {
    pub(crate) fn new(tl: Timeline<'o>) -> Graph<'o> {
        Graph {
            tl,
            nodes: Vec::with_capacity(4096),
            saved_pool: Vec::with_capacity(8192),
            grad_pool: Vec::with_capacity(8192),
            scratch: Vec::new(),
            param_scratch: Vec::new(),
            grad_of: Vec::new(),
            requires_grad: Vec::new(),
            params: Vec::new(),
            cast_params: Vec::new(),
            saving: true,
            outputs: Vec::new(),
            graph_held: Vec::new(),
            replaying: false,
        }
    }

    /// Registers a parameter of `numel` elements stored in `dtype`.
    pub(crate) fn add_param(
        &mut self,
        numel: u64,
        dtype: DType,
        trains: bool,
        cast_bytes: u64,
    ) -> Result<ParamId, Overflow> {
        let resident = numel.checked_mul(dtype.size()).ok_or(Overflow)?;
        self.params.push(ParamState {
            numel,
            dtype,
            trains,
            resident,
            cast_bytes,
            cast: None,
            grad: None,
            matrix: None,
            shared: false,
            pending: None,
            several_uses: false,
            summed: false,
            layer: None,
            dim0: numel,
            grad_to_buffer: false,
        });
        Ok(ParamId(self.params.len() - 1))
    }

    /// Where a parameter sits: its layer and torch's first dimension.
    /// Sets the bytes a parameter occupies when it is stored otherwise than `numel × dtype`
    /// (a quantised weight's packed storage).
    pub(crate) fn set_resident(&mut self, p: ParamId, bytes: u64) {
        self.params[p.0].resident = bytes;
    }

    pub(crate) fn place_param(&mut self, p: ParamId, layer: Option<u64>, dim0: u64) {
        let state = &mut self.params[p.0];
        state.layer = layer;
        state.dim0 = dim0;
    }

    /// A parameter's state.
    pub(crate) fn param(&self, p: ParamId) -> &ParamState {
        &self.params[p.0]
    }

    /// Whether a tensor requires a gradient.
    pub(crate) fn requires_grad(&self, t: Tid) -> bool {
        self.requires_grad.get(t.index()).copied().unwrap_or(false)
    }

    fn set_requires_grad(&mut self, t: Tid) {
        let i = t.index();
        if self.requires_grad.len() <= i {
            // Storages are numbered in allocation order: grow ahead, not one slot at a time.
            let len = (i + 1).max(2 * self.requires_grad.len());
            self.requires_grad.resize(len, false);
        }
        self.requires_grad[i] = true;
    }

    /// Marks a parameter used by several ops of one forward (see `ParamState::several_uses`).
    pub(crate) fn set_several_uses(&mut self, p: ParamId) {
        self.params[p.0].several_uses = true;
    }

    /// Marks a parameter used twice per forward (tied embeddings).
    pub(crate) fn set_shared(&mut self, p: ParamId) {
        self.params[p.0].shared = true;
    }

    pub(crate) fn set_matrix(&mut self, p: ParamId, rows: u64, cols: u64) {
        self.params[p.0].matrix = Some((rows, cols));
    }

    /// A new forward tensor (one reference: the Python variable).
    pub(crate) fn alloc(&mut self, bytes: u64) -> Result<Tid, Overflow> {
        self.tl.alloc(Component::Temporaries, bytes)
    }

    /// Drops the Python variable's reference.
    pub(crate) fn drop(&mut self, t: Tid) {
        self.tl.release(t);
    }

    /// The weight as a matmul sees it: under autocast, the cached low-precision copy
    /// (created on first use in this forward), which the node then saves.
    pub(crate) fn weight_for_matmul(&mut self, p: ParamId) -> Result<Option<Tid>, Overflow> {
        let state = &self.params[p.0];
        if state.cast_bytes == 0 {
            return Ok(None);
        }
        if let Some(t) = state.cast {
            return Ok(Some(t));
        }
        let bytes = state.cast_bytes;
        let t = self.tl.alloc(Component::AutocastCache, bytes)?;
        self.params[p.0].cast = Some(t);
        self.cast_params.push(p.0);
        Ok(Some(t))
    }

    /// Autocast exits: the cache drops its references (copies saved by nodes live on).
    pub(crate) fn clear_autocast_cache(&mut self) {
        // Released in the parameters' order (the cache's), not the order of first use.
        let mut casts = std::mem::take(&mut self.cast_params);
        casts.sort_unstable();
        for &p in &casts {
            let t = self.params[p].cast.take().expect("a cached copy");
            self.tl.release(t);
        }
        casts.clear();
        self.cast_params = casts;
    }

    /// Records an op producing `output`, as autograd does: only the gradients of inputs that
    /// require one and of parameters that train are made, and when there is none the op
    /// records no node and saves nothing (its output then requires no gradient either).
    /// Saved tensors gain a reference (and count as activations).
    pub(crate) fn record(&mut self, outputs: &[Tid], saved: &[Tid], grads: &[Grad]) {
        let [output] = outputs else { panic!("an op records exactly one output") };
        let output = *output;
        let needed = |graph: &Graph<'o>, grad: &Grad| match *grad {
            Grad::New(t, _) | Grad::Pass(t) | Grad::Ready(t, _) => graph.requires_grad(t),
            Grad::Param(p, _) | Grad::ParamCast(p, _) | Grad::ParamReady(p, _) => {
                graph.params[p.0].trains
            }
            // A temporary of the backward is run when the node is, never the reason for it.
            Grad::Scratch(_) => false,
        };
        if !grads.iter().any(|grad| needed(self, grad)) {
            return;
        }
        self.set_requires_grad(output);
        let saved_start = self.saved_pool.len() as u32;
        if self.saving {
            for &s in saved {
                self.tl.retain(s);
                if self.tl.component_of(s) == Component::Temporaries {
                    self.tl.recategorize(s, Component::Activations);
                }
                self.saved_pool.push(s);
            }
        }
        let saved_len = self.saved_pool.len() as u32 - saved_start;
        let grads_start = self.grad_pool.len() as u32;
        for grad in grads {
            if matches!(grad, Grad::Scratch(_)) || needed(self, grad) {
                self.grad_pool.push(*grad);
            }
        }
        let grads_len = self.grad_pool.len() as u32 - grads_start;
        self.nodes.push(Node::Op {
            output,
            saved: (saved_start, saved_len),
            grads: (grads_start, grads_len),
        });
    }

    /// The number of recorded nodes (a mark for [`Graph::truncate`]).
    pub(crate) fn mark(&self) -> usize {
        self.nodes.len()
    }

    /// Forgets the nodes recorded since `mark` (a checkpointed segment's first forward, which
    /// saved nothing).
    pub(crate) fn truncate(&mut self, mark: usize) {
        while self.nodes.len() > mark {
            self.pop_node();
        }
    }

    fn pop_node(&mut self) -> Option<Node> {
        let node = self.nodes.pop()?;
        match node {
            Node::Op { saved, grads, .. } => {
                self.saved_pool.truncate(saved.0 as usize);
                self.grad_pool.truncate(grads.0 as usize);
            }
            Node::LayerEnd { checkpoint: Some((_, _, held)), .. } => {
                self.saved_pool.truncate(held.0 as usize);
            }
            Node::LayerEnd { checkpoint: None, .. } | Node::LayerStart { .. } => {}
        }
        Some(node)
    }

    /// The forward enters a layer.
    pub(crate) fn begin_layer(&mut self, layer: usize) {
        self.nodes.push(Node::LayerStart { layer });
    }

    /// The forward leaves a layer whose ops were recorded.
    pub(crate) fn end_layer(&mut self, layer: usize) {
        self.nodes.push(Node::LayerEnd { layer, checkpoint: None });
    }

    /// The forward leaves a checkpointed layer (whose ops saved nothing and were forgotten):
    /// it keeps its input and the other tensors it was called with (`shared`: the
    /// model-level attention mask, rotary cos/sin, position ids), each until its backward.
    pub(crate) fn end_checkpointed_layer(
        &mut self,
        layer: usize,
        input: Tid,
        output: Tid,
        shared: &[Tid],
    ) {
        self.tl.retain(input);
        if self.tl.component_of(input) == Component::Temporaries {
            self.tl.recategorize(input, Component::Activations);
        }
        let start = self.saved_pool.len() as u32;
        for &t in shared {
            self.tl.retain(t);
            self.saved_pool.push(t);
        }
        let held = (start, self.saved_pool.len() as u32 - start);
        self.nodes.push(Node::LayerEnd { layer, checkpoint: Some((input, output, held)) });
    }

    fn grad_slot(&mut self, t: Tid) -> &mut Option<Tid> {
        let i = t.index();
        if self.grad_of.len() <= i {
            let len = (i + 1).max(2 * self.grad_of.len());
            self.grad_of.resize(len, None);
        }
        &mut self.grad_of[i]
    }

    /// Adds `g` to the gradient of `t` (in place when one exists, as autograd's input buffer
    /// does).
    fn deposit(&mut self, t: Tid, g: Tid) {
        let slot = self.grad_slot(t);
        if slot.is_some() {
            self.tl.release(g);
        } else {
            *slot = Some(g);
        }
    }

    /// Seeds the gradient of the loss.
    pub(crate) fn seed_grad(&mut self, t: Tid, bytes: u64) -> Result<(), Overflow> {
        for p in &mut self.params {
            p.summed = false;
        }
        assert!(self.requires_grad(t), "backward of a loss that requires no gradient");
        let g = self.tl.alloc(Component::Temporaries, bytes)?;
        self.deposit(t, g);
        Ok(())
    }

    pub(crate) fn take_grad(&mut self, t: Tid) -> Option<Tid> {
        self.grad_slot(t).take()
    }

    pub(crate) fn set_grad(&mut self, t: Tid, g: Tid) {
        self.deposit(t, g);
    }

    fn accumulate_param(&mut self, p: ParamId, g: Tid, via_cast: bool) -> Result<(), Overflow> {
        let state = &self.params[p.0];
        let (bytes, cast) = (state.grad_bytes(), state.cast_bytes);
        // Autocast's copy node turns the low-precision gradient into the parameter's dtype.
        let g = if via_cast && cast > 0 {
            let full = self.tl.alloc(Component::Temporaries, bytes)?;
            self.tl.release(g);
            full
        } else {
            g
        };
        // A shared parameter's two contributions meet in autograd's input buffer, which adds
        // them out of place (`add`, checked on real CPU tensors: the transposed `mm` gradient
        // of the output projection cannot be added into): three buffers at once, then the sum.
        let g = if self.params[p.0].shared || self.params[p.0].several_uses {
            if self.params[p.0].summed {
                // Added into the sum in place.
                self.tl.release(g);
                return Ok(());
            }
            match self.params[p.0].pending.take() {
                None => {
                    self.params[p.0].pending = Some(g);
                    return Ok(());
                }
                Some(first) => {
                    let sum = self.tl.alloc(Component::Temporaries, bytes)?;
                    self.tl.release(first);
                    self.tl.release(g);
                    self.params[p.0].summed = true;
                    sum
                }
            }
        } else {
            g
        };
        if self.params[p.0].grad_to_buffer {
            // Copied into the bucket (or the gradient partition) and freed.
            self.tl.release(g);
            return Ok(());
        }
        let existing = self.params[p.0].grad;
        if existing.is_some() {
            // `.grad += new` in place.
            self.tl.release(g);
        } else {
            self.tl.recategorize(g, Component::Gradients);
            self.params[p.0].grad = Some(g);
        }
        Ok(())
    }

    /// Runs backward over the recorded nodes in reverse, draining them, until it reaches a
    /// layer boundary (returned, for the step code to act on) or runs out (`None`).
    pub(crate) fn backward_to_boundary(&mut self) -> Result<Option<Boundary>, Overflow> {
        while let Some(&node) = self.nodes.last() {
            match node {
                Node::Op { output, saved, grads } => self.backward_op(output, saved, grads)?,
                Node::LayerStart { layer } => {
                    self.pop_node();
                    return Ok(Some(Boundary::LayerStart { layer }));
                }
                Node::LayerEnd { layer, checkpoint } => {
                    let checkpoint = checkpoint.map(|(input, output, held)| Checkpoint {
                        input,
                        output,
                        held: self.saved_pool[held.0 as usize..(held.0 + held.1) as usize].to_vec(),
                    });
                    self.pop_node();
                    return Ok(Some(Boundary::LayerEnd { layer, checkpoint }));
                }
            }
        }
        Ok(None)
    }

    /// One op's backward: allocate its inputs' gradients, then free what it saved and the
    /// incoming gradient, then hand the gradients on.
    fn backward_op(
        &mut self,
        output: Tid,
        saved: (u32, u32),
        grads: (u32, u32),
    ) -> Result<(), Overflow> {
        let Some(first) = self.take_grad(output) else {
            // Nothing flowed back here: release what was saved.
            for k in saved.0..saved.0 + saved.1 {
                let s = self.saved_pool[k as usize];
                self.tl.release(s);
            }
            self.pop_node();
            return Ok(());
        };
        self.scratch.clear();
        self.param_scratch.clear();
        let mut temporaries: [Option<Tid>; 2] = [None, None];
        for k in grads.0..grads.0 + grads.1 {
            match self.grad_pool[k as usize] {
                Grad::New(input, bytes) => {
                    let t = self.tl.alloc(Component::Temporaries, bytes)?;
                    self.scratch.push((input, t));
                }
                Grad::Pass(input) => {
                    self.tl.retain(first);
                    self.scratch.push((input, first));
                }
                Grad::Param(p, bytes) => {
                    let t = self.tl.alloc(Component::Temporaries, bytes)?;
                    self.param_scratch.push((p, t, false));
                }
                Grad::ParamCast(p, bytes) => {
                    let t = self.tl.alloc(Component::Temporaries, bytes)?;
                    self.param_scratch.push((p, t, true));
                }
                Grad::Ready(input, t) => {
                    // The saved tensor becomes the gradient: one more reference, which the
                    // release of what the node saved (below) leaves as the only one.
                    self.tl.retain(t);
                    self.tl.recategorize(t, Component::Temporaries);
                    self.scratch.push((input, t));
                }
                Grad::ParamReady(p, t) => {
                    self.tl.retain(t);
                    self.tl.recategorize(t, Component::Temporaries);
                    self.param_scratch.push((p, t, false));
                }
                Grad::Scratch(bytes) => {
                    let t = self.tl.alloc(Component::Temporaries, bytes)?;
                    match temporaries.iter_mut().find(|s| s.is_none()) {
                        Some(slot) => *slot = Some(t),
                        None => self.tl.release(t),
                    }
                }
            }
        }
        for t in temporaries.into_iter().flatten() {
            self.tl.release(t);
        }
        for k in saved.0..saved.0 + saved.1 {
            let s = self.saved_pool[k as usize];
            self.tl.release(s);
        }
        self.tl.release(first);
        self.pop_node();
        for k in 0..self.scratch.len() {
            let (input, t) = self.scratch[k];
            self.deposit(input, t);
        }
        for k in 0..self.param_scratch.len() {
            let (p, t, via_cast) = self.param_scratch[k];
            self.accumulate_param(p, t, via_cast)?;
        }
        Ok(())
    }

    /// The graph is destroyed (the loss, its last reference, goes): what its nodes held as
    /// attributes goes with it.
    pub(crate) fn release_graph_held(&mut self) {
        for t in std::mem::take(&mut self.graph_held) {
            self.tl.release(t);
        }
    }

    /// `zero_grad(set_to_none=True)`.
    pub(crate) fn zero_grad(&mut self) {
        let grads: Vec<Tid> = self.params.iter_mut().filter_map(|p| p.grad.take()).collect();
        for g in grads {
            self.tl.release(g);
        }
    }

    /// The gradients `zero_grad(set_to_none=False)` keeps from the previous step: every
    /// training parameter's `.grad`, allocated (and zeroed in place) before the forward;
    /// backward then adds into them.
    pub(crate) fn keep_gradients(&mut self) -> Result<(), Overflow> {
        for i in 0..self.params.len() {
            let p = &self.params[i];
            // A gradient copied into a strategy's buffer as soon as it is ready (DDP's bucket
            // views, ZeRO's contiguous gradients) has no `.grad` to keep.
            if p.trains && p.grad.is_none() && !p.grad_to_buffer {
                let bytes = p.grad_bytes();
                let t = self.tl.alloc(Component::Gradients, bytes)?;
                self.params[i].grad = Some(t);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Boundary, Checkpoint, Grad, Graph};
    use crate::timeline::{Component, Timeline};

    /// Backward meets the layers' boundaries in reverse order, a checkpointed layer with what
    /// it kept, and the ops between them are run on the way.
    #[test]
    fn backward_stops_at_each_layer_boundary_in_reverse() {
        let mut g = Graph::new(Timeline::new(1, Vec::new()));
        let p = g.add_param(4, crate::units::DType::F32, true, 0).unwrap();
        let x = g.alloc(16).unwrap();
        g.begin_layer(0);
        let y = g.alloc(16).unwrap();
        g.record(&[y], &[], &[Grad::Param(p, 16)]);
        g.end_layer(0);
        let mask = g.alloc(8).unwrap();
        g.begin_layer(1);
        let z = g.alloc(16).unwrap();
        g.end_checkpointed_layer(1, y, z, &[mask]);
        assert_eq!(g.tl.component_of(y), Component::Activations);
        let mut met = Vec::new();
        while let Some(b) = g.backward_to_boundary().unwrap() {
            met.push(b);
        }
        assert_eq!(
            met,
            vec![
                Boundary::LayerEnd {
                    layer: 1,
                    checkpoint: Some(Checkpoint { input: y, output: z, held: vec![mask] })
                },
                Boundary::LayerStart { layer: 1 },
                Boundary::LayerEnd { layer: 0, checkpoint: None },
                Boundary::LayerStart { layer: 0 },
            ]
        );
        let _ = x;
    }
}
