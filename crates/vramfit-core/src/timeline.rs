//! The allocation stream: tensors appear and disappear in program order, and the peak, its
//! phase and the breakdown at the peak are read from that one stream.
//!
//! A [`Timeline`] holds live storages with reference counts (a Python variable, a tensor
//! autograd saved, a gradient buffer each hold one), so a storage referenced twice costs once
//! and is freed when its last reference goes. Every byte count is checked.

use serde::Serialize;

use crate::units::Overflow;

/// Where in the training step memory is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The forward pass through the layers.
    Forward,
    /// The output head, the logits and the loss.
    Loss,
    /// The backward pass.
    Backward,
    /// `optimizer.step()` and `zero_grad()`.
    OptimizerStep,
}

impl Phase {
    /// All phases in step order.
    pub const ALL: [Phase; 4] =
        [Phase::Forward, Phase::Loss, Phase::Backward, Phase::OptimizerStep];

    /// The name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Loss => "loss",
            Phase::Backward => "backward",
            Phase::OptimizerStep => "optimizer_step",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What a piece of memory is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Model weights and buffers.
    Parameters,
    /// Parameter gradients (`.grad`).
    Gradients,
    /// Persistent optimizer state.
    OptimizerState,
    /// Tensors autograd saved for backward (and the inputs checkpointing keeps).
    Activations,
    /// Everything transient: forward outputs not saved, logits and loss buffers, gradients
    /// flowing through backward, the optimizer step's buffers.
    Temporaries,
    /// Autocast's low-precision copies of the weights.
    AutocastCache,
    /// Library workspaces (cuBLAS).
    Workspace,
}

impl Component {
    /// All components in display order.
    pub const ALL: [Component; 7] = [
        Component::Parameters,
        Component::Gradients,
        Component::OptimizerState,
        Component::Activations,
        Component::Temporaries,
        Component::AutocastCache,
        Component::Workspace,
    ];

    /// The name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Component::Parameters => "parameters",
            Component::Gradients => "gradients",
            Component::OptimizerState => "optimizer_state",
            Component::Activations => "activations",
            Component::Temporaries => "temporaries",
            Component::AutocastCache => "autocast_cache",
            Component::Workspace => "workspace",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A handle to a live (or freed) storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Tid(u32);

impl Tid {
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    bytes: u64,
    component: Component,
    refs: u32,
}

/// Bytes by component.
pub(crate) type ByComponent = [u64; 7];

/// The stream's state and its high-water marks.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    slots: Vec<Slot>,
    live: ByComponent,
    total: u64,
    phase: Phase,
    peak: u64,
    peak_phase: Phase,
    peak_live: ByComponent,
    phase_peaks: [u64; 4],
    granularity: u64,
}

impl Timeline {
    /// A timeline whose allocations are rounded up to `granularity` bytes (512 for CUDA's
    /// caching allocator, whose `max_memory_allocated` counts rounded blocks; 1 to count
    /// requested bytes as the CPU oracle does).
    pub(crate) fn new(granularity: u64) -> Timeline {
        Timeline {
            granularity: granularity.max(1),
            slots: Vec::with_capacity(4096),
            live: [0; 7],
            total: 0,
            phase: Phase::Forward,
            peak: 0,
            peak_phase: Phase::Forward,
            peak_live: [0; 7],
            phase_peaks: [0; 4],
        }
    }

    pub(crate) fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        self.note_peak();
    }

    fn note_peak(&mut self) {
        let p = &mut self.phase_peaks[self.phase.index()];
        *p = (*p).max(self.total);
        if self.total > self.peak {
            self.peak = self.total;
            self.peak_phase = self.phase;
            self.peak_live = self.live;
        }
    }

    /// Allocates a storage with one reference.
    pub(crate) fn alloc(&mut self, component: Component, bytes: u64) -> Result<Tid, Overflow> {
        let bytes =
            bytes.div_ceil(self.granularity).checked_mul(self.granularity).ok_or(Overflow)?;
        self.total = self.total.checked_add(bytes).ok_or(Overflow)?;
        self.live[component.index()] += bytes;
        let id = Tid(u32::try_from(self.slots.len()).map_err(|_| Overflow)?);
        self.slots.push(Slot { bytes, component, refs: 1 });
        self.note_peak();
        Ok(id)
    }

    /// Adds a reference.
    pub(crate) fn retain(&mut self, t: Tid) {
        if let Some(s) = self.slots.get_mut(t.0 as usize) {
            s.refs += 1;
        }
    }

    /// Drops a reference; frees the storage when it was the last.
    pub(crate) fn release(&mut self, t: Tid) {
        let Some(s) = self.slots.get_mut(t.0 as usize) else { return };
        if s.refs == 0 {
            return;
        }
        s.refs -= 1;
        if s.refs == 0 {
            self.total -= s.bytes;
            self.live[s.component.index()] -= s.bytes;
        }
    }

    /// Moves a live storage to another component (a forward output autograd decided to save).
    pub(crate) fn recategorize(&mut self, t: Tid, component: Component) {
        let Some(s) = self.slots.get_mut(t.0 as usize) else { return };
        if s.refs > 0 {
            self.live[s.component.index()] -= s.bytes;
            self.live[component.index()] += s.bytes;
        }
        s.component = component;
    }

    pub(crate) fn component_of(&self, t: Tid) -> Option<Component> {
        self.slots.get(t.0 as usize).map(|s| s.component)
    }

    pub(crate) fn peak(&self) -> (u64, Phase, ByComponent) {
        (self.peak, self.peak_phase, self.peak_live)
    }

    pub(crate) fn phase_peaks(&self) -> [u64; 4] {
        self.phase_peaks
    }
}
