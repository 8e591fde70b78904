//! The public estimate: run the simulated step and report its peak, the phase of the peak,
//! the breakdown at the peak and the peak of every phase.

use serde::Serialize;

use crate::allocator::CachingAllocator;
use crate::device::Device;
use crate::model::ModelSpec;
use crate::optim::OptimizerRun;
use crate::setup::TrainSetup;
use crate::step::{StepResult, simulate, simulated_micro_batches};
use crate::timeline::{ByComponent, Component, Phase, Recorder, StreamObserver};
use crate::units::{Bytes, Overflow};
use crate::warning::Warning;

/// The largest sequence length accepted (16M tokens).
pub const MAX_SEQ_LEN: u64 = 1 << 24;
/// The largest micro-batch accepted.
pub const MAX_MICRO_BATCH: u64 = 1 << 20;
/// The largest gradient-accumulation count accepted.
pub const MAX_GRAD_ACCUM: u64 = 1 << 16;

/// The largest layer interval of `every-N` checkpointing accepted.
pub const MAX_CHECKPOINT_INTERVAL: u64 = 1 << 16;

/// Why an estimate cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EstimateError {
    /// A setup value is zero or absurd.
    #[error("{field} = {value} is out of range (1..={max})")]
    OutOfRange {
        /// The setup field (`batch`, `seq-len`, `grad-accum`).
        field: &'static str,
        /// The value given.
        value: u64,
        /// Largest accepted.
        max: u64,
    },
    /// A byte count overflows 64 bits.
    #[error("the memory needed overflows 64 bits")]
    Overflow,
    /// The parameter count is zero.
    #[error("the parameter count must be positive")]
    NoParameters,
    /// A freeze or LoRA choice the model cannot take.
    #[error(transparent)]
    Peft(#[from] crate::peft::PeftError),
    /// GPUs, a strategy or offload that cannot run together.
    #[error(transparent)]
    Parallel(#[from] crate::parallel::ParallelError),
    /// `--target-len` for a model without a decoder stack.
    #[error("--target-len is for encoder-decoder models, and {architecture} has no decoder side")]
    TargetLenWithoutDecoder {
        /// The model's architecture.
        architecture: crate::model::Architecture,
    },
    /// A setting an encoder-decoder model cannot take, or that vramfit does not model for
    /// one yet.
    #[error("{architecture}: {problem}")]
    Seq2Seq {
        /// The model's architecture.
        architecture: crate::model::Architecture,
        /// What is refused, and why.
        problem: &'static str,
    },
}

impl From<Overflow> for EstimateError {
    fn from(_: Overflow) -> Self {
        EstimateError::Overflow
    }
}

/// Bytes by component (at the peak).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Components {
    /// Weights and buffers.
    pub parameters: Bytes,
    /// `.grad` tensors.
    pub gradients: Bytes,
    /// Persistent optimizer state.
    pub optimizer_state: Bytes,
    /// Tensors saved for backward.
    pub activations: Bytes,
    /// Transients: logits and loss buffers, gradients in flight, optimizer-step buffers.
    pub temporaries: Bytes,
    /// Autocast's low-precision weight copies.
    pub autocast_cache: Bytes,
    /// Library workspaces.
    pub workspace: Bytes,
}

impl Components {
    pub(crate) fn from_array(a: ByComponent) -> Components {
        let get = |c: Component| Bytes(a[c as usize]);
        Components {
            parameters: get(Component::Parameters),
            gradients: get(Component::Gradients),
            optimizer_state: get(Component::OptimizerState),
            activations: get(Component::Activations),
            temporaries: get(Component::Temporaries),
            autocast_cache: get(Component::AutocastCache),
            workspace: get(Component::Workspace),
        }
    }

    /// `(name, bytes)` in display order.
    pub fn entries(&self) -> [(&'static str, Bytes); 7] {
        [
            ("parameters", self.parameters),
            ("gradients", self.gradients),
            ("optimizer_state", self.optimizer_state),
            ("activations", self.activations),
            ("temporaries", self.temporaries),
            ("autocast_cache", self.autocast_cache),
            ("workspace", self.workspace),
        ]
    }

    /// The sum.
    pub fn total(&self) -> Bytes {
        self.entries().into_iter().map(|(_, b)| b).sum()
    }
}

/// The peak of each phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PhasePeaks {
    /// Through the layers.
    pub forward: Bytes,
    /// Head, logits, loss.
    pub loss: Bytes,
    /// Backward.
    pub backward: Bytes,
    /// `optimizer.step()` and `zero_grad()`.
    pub optimizer_step: Bytes,
}

impl PhasePeaks {
    /// `(phase name, peak)` in step order; the names are [`Phase::name`]'s.
    pub fn entries(&self) -> [(&'static str, Bytes); 4] {
        [
            (Phase::Forward.name(), self.forward),
            (Phase::Loss.name(), self.loss),
            (Phase::Backward.name(), self.backward),
            (Phase::OptimizerStep.name(), self.optimizer_step),
        ]
    }
}

/// Parameters, gradients and optimizer state: what `--params` alone can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModelStates {
    /// Weights.
    pub parameters: Bytes,
    /// Gradients (same dtype as the weights).
    pub gradients: Bytes,
    /// Optimizer state.
    pub optimizer_state: Bytes,
    /// The sum.
    pub total: Bytes,
}

/// The result of [`estimate`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Peak of `torch.cuda.max_memory_allocated()` over a steady-state step.
    pub peak_allocated: Bytes,
    /// Where in the step the peak falls.
    pub peak_phase: Phase,
    /// What is live at the peak.
    pub components_at_peak: Components,
    /// Parameters + gradients + optimizer state.
    pub model_states: Bytes,
    /// The three model states separately.
    pub model_states_detail: ModelStates,
    /// The peak of each phase.
    pub phase_peaks: PhasePeaks,
    /// Trainable parameters.
    pub parameters: u64,
    /// What PyTorch's caching allocator reserves for the run (`None` on a device without
    /// one: the CPU oracle).
    pub reserved: Option<crate::allocator::Reserved>,
    /// Things the user should know (unsupported combinations, caveats).
    pub warnings: Vec<Warning>,
    /// Where this rank stands among the data-parallel ranks.
    pub ranks: RankReport,
}

/// The estimate among several GPUs: which rank it is, the batch all ranks make together, and
/// what lies outside the GPU's allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RankReport {
    /// Data-parallel ranks (GPUs × nodes).
    pub data_parallel_ranks: u64,
    /// `B_effective = B_micro × k × GPUs`: sequences per optimizer step over all ranks.
    pub effective_batch: u64,
    /// The rank the figures are for.
    pub worst_rank: crate::parallel::WorstRank,
    /// Host memory offloading needs (`None` without offload).
    pub host_memory: Option<crate::parallel::HostMemory>,
    /// NCCL's buffers, outside PyTorch's allocator (an allowance per communicator).
    pub nccl_allowance: Bytes,
}

pub(crate) fn check_setup(setup: &TrainSetup) -> Result<(), EstimateError> {
    let check = |field: &'static str, value: u64, max: u64| {
        if value == 0 || value > max {
            Err(EstimateError::OutOfRange { field, value, max })
        } else {
            Ok(())
        }
    };
    check("batch", setup.micro_batch, MAX_MICRO_BATCH)?;
    check("seq-len", setup.seq_len, MAX_SEQ_LEN)?;
    check("grad-accum", setup.grad_accum, MAX_GRAD_ACCUM)?;
    if let crate::setup::Checkpointing::Every(n) = setup.checkpointing {
        check("checkpointing every-N", n, MAX_CHECKPOINT_INTERVAL)?;
    }
    crate::parallel::check(setup)?;
    crate::parallel::effective_batch(setup).ok_or(EstimateError::Overflow)?;
    Ok(())
}

/// The setup against the model: `--target-len` only with a decoder stack, and on an
/// encoder-decoder (T5) only what is modelled for it: eager attention (transformers has no
/// FlashAttention-2 for T5; its SDPA path turns the position bias into a mask per layer, not
/// modelled yet), full fine-tuning or LoRA (no quantised base or frozen layers), the
/// model's own loss.
pub(crate) fn check_model(spec: &ModelSpec, setup: &TrainSetup) -> Result<(), EstimateError> {
    let architecture = spec.architecture;
    if !spec.is_encoder_decoder() {
        return match setup.target_len {
            Some(_) => Err(EstimateError::TargetLenWithoutDecoder { architecture }),
            None => Ok(()),
        };
    }
    if let Some(t) = setup.target_len
        && (t == 0 || t > MAX_SEQ_LEN)
    {
        return Err(EstimateError::OutOfRange { field: "target-len", value: t, max: MAX_SEQ_LEN });
    }
    let refuse = |problem| Err(EstimateError::Seq2Seq { architecture, problem });
    match setup.attention {
        crate::setup::Attention::Eager => {}
        crate::setup::Attention::Flash => {
            return refuse(
                "transformers has no FlashAttention-2 for this model (use --attention eager)",
            );
        }
        crate::setup::Attention::Sdpa => {
            return refuse(
                "--attention sdpa is not modelled for encoder-decoder models yet (its position bias becomes a mask per layer); use --attention eager",
            );
        }
    }
    if setup.quantization.is_some() || setup.freeze.first_layers > 0 {
        return refuse(
            "quantised bases and frozen layers are not modelled for encoder-decoder models yet",
        );
    }
    if setup.loss != crate::setup::LossKernel::Standard {
        return refuse("--loss other than standard is a decoder-only language model's");
    }
    Ok(())
}

/// Predicts the peak memory of one steady-state training step on a CUDA GPU.
pub fn estimate(spec: &ModelSpec, setup: &TrainSetup) -> Result<Estimate, EstimateError> {
    estimate_on(spec, setup, &Device::CUDA)
}

/// As [`estimate`], on the given device (the validation tests use [`Device::CPU_ORACLE`], and
/// that device with CUDA's autocast lists, which the oracle can emulate).
pub fn estimate_on(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
) -> Result<Estimate, EstimateError> {
    run(spec, setup, device, None).map(|(estimate, _)| estimate)
}

/// As [`estimate`], also recording the step's allocated memory over its events, in at most
/// `max_points` points (for a chart). Recording costs a few percent; the estimate is the same.
pub fn estimate_timeline(
    spec: &ModelSpec,
    setup: &TrainSetup,
    max_points: usize,
) -> Result<(Estimate, crate::timeline::StepTimeline), EstimateError> {
    estimate_timeline_on(spec, setup, &Device::CUDA, max_points)
}

/// As [`estimate_timeline`], on the given device (a CUDA GPU with its allocator settings).
pub fn estimate_timeline_on(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
    max_points: usize,
) -> Result<(Estimate, crate::timeline::StepTimeline), EstimateError> {
    let (estimate, timeline) = run(spec, setup, device, Some(max_points))?;
    Ok((estimate, timeline.unwrap_or_default()))
}

/// What a setup must pass before its step is simulated; the parameter layout it was checked
/// against.
fn check_run(
    spec: &ModelSpec,
    setup: &TrainSetup,
) -> Result<crate::layout::ParameterLayout, EstimateError> {
    check_setup(setup)?;
    check_model(spec, setup)?;
    let layout = spec.parameter_layout();
    crate::peft::check(&layout, setup)?;
    crate::parallel::fsdp_padding(spec, &layout, setup)?;
    Ok(layout)
}

/// Checks the setup, simulates the step (recording it when `record` gives a size) and sums up.
fn run(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
    record: Option<usize>,
) -> Result<(Estimate, Option<crate::timeline::StepTimeline>), EstimateError> {
    // The layout lives through the simulation: freed before it, it leaves the heap shaped so
    // that glibc's malloc gives pages back and takes them again (brk) in every estimate (six
    // times the page faults, a sixth more time for the 70B bench).
    let _layout = check_run(spec, setup)?;
    let mut recorder = record.map(|points| Recorder::new(points, simulated_micro_batches(setup)));
    let mut allocator = device.allocator.map(CachingAllocator::new);
    let mut observers: Vec<&mut dyn StreamObserver> = Vec::new();
    if let Some(r) = &mut recorder {
        observers.push(r);
    }
    if let Some(a) = &mut allocator {
        observers.push(a);
    }
    let step = simulate(spec, setup, device, observers)?;
    let reserved = allocator.map(CachingAllocator::finish);
    Ok((summarize(spec, setup, step, reserved), recorder.map(Recorder::finish)))
}

/// A step simulated for a search that estimates it later under several allocator settings:
/// its figures and its allocation stream, recorded for [`crate::allocator::replay`]
/// (`device.allocator`'s rounding, or the default's). [`summarize`] with the replay under
/// `device.allocator` gives what [`estimate_on`] gives.
pub(crate) fn simulate_recorded(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
) -> Result<(StepResult, crate::allocator::Recording), EstimateError> {
    let _layout = check_run(spec, setup)?;
    let mut allocator = CachingAllocator::new(device.allocator.unwrap_or_default());
    let step = simulate(spec, setup, device, vec![&mut allocator])?;
    Ok((step, allocator.into_recording()))
}

/// The estimate of a simulated step with what the caching allocator reserves (`None`: a
/// device without one).
pub(crate) fn summarize(
    spec: &ModelSpec,
    setup: &TrainSetup,
    step: StepResult,
    reserved: Option<crate::allocator::Reserved>,
) -> Estimate {
    let StepResult {
        peak,
        peak_phase: phase,
        at_peak,
        phase_peaks: pp,
        model_states: states,
        worst_rank,
        host_memory,
    } = step;
    Estimate {
        peak_allocated: Bytes(peak),
        peak_phase: phase,
        components_at_peak: Components::from_array(at_peak),
        model_states: states.total,
        model_states_detail: states,
        phase_peaks: PhasePeaks {
            forward: Bytes(pp[0]),
            loss: Bytes(pp[1]),
            backward: Bytes(pp[2]),
            optimizer_step: Bytes(pp[3]),
        },
        parameters: spec.parameter_count(),
        reserved,
        warnings: crate::warning::warnings(spec, setup),
        ranks: RankReport {
            data_parallel_ranks: setup.parallel.ranks(),
            effective_batch: crate::parallel::effective_batch(setup).unwrap_or(u64::MAX),
            worst_rank,
            host_memory,
            nccl_allowance: setup.parallel.nccl_allowance(),
        },
    }
}

/// Model states for a bare parameter count (`--params 1B`): weights and gradients in the
/// parameter dtype, optimizer state per parameter, as one rank holds them under the setup's
/// strategy (the count taken as one flat parameter). Activations cannot be known without the
/// architecture. With `--optimizer-state-dtype int8` Adam's two states take 1 byte each (the
/// idealisation of 8-bit Adam); `adamw-8bit` adds bitsandbytes' block-wise absmax.
pub fn model_states_for_params(
    params: u64,
    setup: &TrainSetup,
) -> Result<ModelStates, EstimateError> {
    if params == 0 {
        return Err(EstimateError::NoParameters);
    }
    crate::parallel::check(setup)?;
    // The same strategy code as the simulated step, over one parameter.
    let dtypes = crate::parallel::Dtypes::of(setup);
    let mut g = crate::graph::Graph::new(crate::timeline::Timeline::new(1, Vec::new()));
    g.add_param(params, dtypes.compute, true, 0)?;
    let ranks = crate::parallel::runtime::Ranks::new(&mut g, setup, None)?;
    let opt = OptimizerRun::new(setup, ranks.stepped(&g), &crate::device::Device::CUDA)?;
    Ok(ranks.model_states(&g, &opt)?)
}

/// The model states of a setup without simulating its step (for a planner's bounds), and
/// the host memory its offloading needs.
pub(crate) fn model_states_on(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
) -> Result<(ModelStates, Option<crate::parallel::HostMemory>), EstimateError> {
    check_setup(setup)?;
    check_model(spec, setup)?;
    crate::peft::check(&spec.parameter_layout(), setup)?;
    let (states, _, host) = crate::step::model_states_only(spec, setup, device)?;
    Ok((states, host))
}

/// A lower bound of the step's allocated peak, without simulating it (a planner prunes with
/// it), from the setup's model states ([`model_states_on`]). Two moments of the step are
/// certain: when `optimizer.step()` starts, every parameter, gradient and optimizer state is
/// alive; and while the standard loss runs, the parameters, the optimizer state (the steady
/// state has it), the gradients of earlier micro-batches (with accumulation) and the
/// log-probabilities (`tokens × vocabulary`, fp32 when the logits are upcast) are. The
/// device's workspaces are alive throughout.
pub(crate) fn peak_lower_bound(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
    states: &ModelStates,
) -> u64 {
    let workspaces = device.workspaces.iter().fold(0u64, |a, &w| a.saturating_add(w));
    let mut at_loss = 0u64;
    let autocast = setup.precision.autocast();
    let dtype_size = setup.precision.compute_dtype().size();
    let log_probs_size = match setup.loss {
        // The summed logits save nothing: their gradient comes in backward, after the loss.
        crate::setup::LossKernel::LogitsSum => None,
        crate::setup::LossKernel::Standard => {
            Some(if spec.loss_upcasts_logits || autocast { 4 } else { dtype_size })
        }
        crate::setup::LossKernel::ChunkedOutput => Some(4),
        crate::setup::LossKernel::ChunkedOutputLitgpt => {
            Some(if autocast { 4 } else { dtype_size })
        }
        crate::setup::LossKernel::Chunked => None,
    };
    if let Some(size) = log_probs_size {
        let log_probs = setup
            .micro_batch
            .saturating_mul(setup.seq_len)
            .saturating_mul(spec.vocab_size)
            .saturating_mul(size);
        let grads = if setup.grad_accum > 1 { states.gradients.get() } else { 0 };
        at_loss = states
            .parameters
            .get()
            .saturating_add(states.optimizer_state.get())
            .saturating_add(grads)
            .saturating_add(log_probs);
    }
    workspaces.saturating_add(states.total.get().max(at_loss))
}

/// The most bytes the step's own tensors hold at once while it runs forward, loss and
/// backward: what autograd saves (and checkpointing keeps), the temporaries of the ops and of
/// backward's gradients until they land in `.grad` or a strategy's buffer, and autocast's
/// casts — everything but the parameters, gradients, optimizer state, workspaces and what a
/// strategy allocates. (A planner's activation bound: see [`peak_lower_bound_with`].)
///
/// These tensors are the model's program: the strategy and its offload act only at the layer
/// boundaries, on parameters and gradients, so every setup that computes in the same dtypes
/// (the parameters' and autocast, [`crate::parallel::Dtypes`]) with the same micro-batch,
/// sequence, attention, checkpointing, loss and adapters has the same stream of them, and one
/// simulation serves all its strategies, offloads and optimizers. Strategies that allocate
/// temporaries of their own in the forward or backward (FSDP's all-gather inputs) only add to
/// that stream; a setup whose strategy is `None`, DDP or ZeRO allocates none.
pub(crate) fn activation_peak(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
) -> Result<u64, EstimateError> {
    let _layout = check_run(spec, setup)?;
    let mut own = OwnTensors::default();
    simulate(spec, setup, device, vec![&mut own])?;
    Ok(own.peak)
}

/// The high-water mark of the step's own tensors (activations, temporaries, autocast's
/// cache) in the forward, loss and backward.
#[derive(Default)]
struct OwnTensors {
    peak: u64,
}

impl StreamObserver for OwnTensors {
    fn observe(
        &mut self,
        _event: crate::timeline::StreamEvent,
        state: crate::timeline::StreamState<'_>,
    ) {
        if state.phase == Phase::OptimizerStep {
            return;
        }
        let live = state.live;
        let own = live[Component::Activations as usize]
            + live[Component::Temporaries as usize]
            + live[Component::AutocastCache as usize];
        self.peak = self.peak.max(own);
    }
}

/// A lower bound of the step's allocated peak from its model states and the peak of its own
/// tensors ([`activation_peak`] of a setup with the same activations): while those peak, in
/// the forward, loss or backward of the last micro-batch, the rank holds its parameters (the
/// resident ones and a strategy's flat buffers and master copies), its optimizer state (the
/// steady state has it), on one GPU and under DDP the gradients accumulated by the earlier
/// micro-batches, and the workspaces. Never below [`peak_lower_bound`].
pub(crate) fn peak_lower_bound_with(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
    states: &ModelStates,
    activations: u64,
) -> u64 {
    let workspaces = device.workspaces.iter().fold(0u64, |a, &w| a.saturating_add(w));
    // One GPU and DDP accumulate into the `.grad`s (and DDP's buckets, kept for the run);
    // ZeRO's and FSDP's gradient states count buffers that exist only at the step.
    let accumulated = setup.grad_accum > 1 && !setup.parallel.strategy.owns_mixed_precision();
    let grads = if accumulated { states.gradients.get() } else { 0 };
    let during = workspaces
        .saturating_add(states.parameters.get())
        .saturating_add(states.optimizer_state.get())
        .saturating_add(grads)
        .saturating_add(activations);
    during.max(peak_lower_bound(spec, setup, device, states))
}

/// The optimizer state a paged optimizer keeps in CUDA managed memory, which the estimate's
/// peak leaves out (it stays on the GPU until memory runs short, then pages to the host).
pub(crate) fn paged_state_bytes(
    spec: &ModelSpec,
    setup: &TrainSetup,
) -> Result<Bytes, EstimateError> {
    check_setup(setup)?;
    check_model(spec, setup)?;
    let (_, paged, _) = crate::step::model_states_only(spec, setup, &Device::CUDA)?;
    Ok(Bytes(paged))
}

/// The largest micro-batch whose peak fits in `capacity` (0 if none does): exponential
/// search, then binary search.
pub fn max_micro_batch(
    spec: &ModelSpec,
    setup: &TrainSetup,
    capacity: Bytes,
) -> Result<u64, EstimateError> {
    // Only the allocated peak is compared: the caching-allocator replay (which observes the
    // stream and changes none of it) would be work for nothing.
    let device = Device { allocator: None, ..Device::CUDA };
    largest_micro_batch(spec, setup, &device, |e| e.peak_allocated <= capacity)
}

/// The largest micro-batch for which `fits` holds of the estimate on `device` (0 if none does):
/// exponential search, then binary search. Overflowing batches do not fit.
pub(crate) fn largest_micro_batch(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
    fits: impl Fn(&Estimate) -> bool,
) -> Result<u64, EstimateError> {
    let fits = |b: u64| -> Result<bool, EstimateError> {
        let s = TrainSetup { micro_batch: b, ..setup.clone() };
        match estimate_on(spec, &s, device) {
            Ok(e) => Ok(fits(&e)),
            Err(EstimateError::Overflow) => Ok(false),
            Err(e) => Err(e),
        }
    };
    let probe = TrainSetup { micro_batch: 1, ..setup.clone() };
    check_setup(&probe)?;
    if !fits(1)? {
        return Ok(0);
    }
    let mut lo = 1u64;
    let mut hi = 2u64;
    while hi <= MAX_MICRO_BATCH && fits(hi)? {
        lo = hi;
        hi *= 2;
    }
    if hi > MAX_MICRO_BATCH {
        return Ok(lo);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}
