//! The training step as a program: forward layer by layer, the loss, backward, the optimizer
//! step and `zero_grad`, each op allocating and saving what PyTorch does. The programs follow
//! `transformers`' modules (`modeling_llama.py` and relatives) op by op; the dtype each tensor
//! gets follows autocast's rules.

mod attention;
mod embeddings;
mod head;
mod layer;
mod mla;
mod ops;
mod param_wrapper;
mod parameters;
mod seq2seq;

use self::embeddings::{embed, layer_inputs};
use self::head::head_and_loss;
use self::layer::layer_forward;
use self::ops::norm;
pub(crate) use self::parameters::{LayerParams, Model, build_model};
use crate::device::Device;
use crate::estimate::ModelStates;
use crate::graph::{Boundary, Checkpoint, Graph};
use crate::model::ModelSpec;
use crate::parallel::runtime::Ranks;
use crate::parallel::{HostMemory, WorstRank};
use crate::setup::{TrainSetup, TrainingLoop, ZeroGrad};
use crate::timeline::Phase;
use crate::timeline::{ByComponent, Component, StreamObserver, Tid, Timeline};
use crate::units::{DType, Overflow};

/// A tensor in flight: its storage, dtype and element count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tensor {
    pub(crate) id: crate::timeline::Tid,
    pub(crate) dtype: DType,
    pub(crate) numel: u64,
}

impl Tensor {
    fn bytes(self) -> u64 {
        self.numel * self.dtype.size()
    }
}

type Result<X> = std::result::Result<X, Overflow>;

fn mul(a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b).ok_or(Overflow)
}

fn promote(a: DType, b: DType) -> DType {
    if a == DType::F32 || b == DType::F32 { DType::F32 } else { a }
}

/// Everything fixed for one estimate.
pub(crate) struct Context<'a> {
    pub(crate) spec: &'a ModelSpec,
    pub(crate) setup: &'a TrainSetup,
    /// Tokens per micro-batch.
    pub(crate) tokens: u64,
    /// Parameter dtype.
    pub(crate) param_dtype: DType,
    /// Matmul dtype.
    pub(crate) compute_dtype: DType,
    pub(crate) autocast: bool,
    /// The device's mechanisms.
    pub(crate) device: &'a Device,
    /// Each parameter's LoRA adapter (empty until the model is built).
    pub(crate) adapters: &'a [Option<parameters::Adapter>],
    /// Each quantised linear weight (empty until the model is built).
    pub(crate) quantized: &'a [Option<parameters::QuantLinear>],
    /// transformers builds a KV cache in this forward: `use_cache` (the setup's, else the
    /// config's) on a decoder, without gradient checkpointing (which turns it off).
    pub(crate) kv_cache: bool,
}

impl Context<'_> {
    /// Dtype of a matmul output given its input's dtype.
    fn mm_out(&self, x: DType) -> DType {
        if self.autocast { self.compute_dtype } else { x }
    }

    /// The LoRA adapter on a linear weight.
    fn adapter(&self, w: crate::graph::ParamId) -> Option<parameters::Adapter> {
        self.adapters.get(w.0).copied().flatten()
    }

    /// bitsandbytes' quantisation of a linear weight.
    fn quantized(&self, w: crate::graph::ParamId) -> Option<parameters::QuantLinear> {
        self.quantized.get(w.0).copied().flatten()
    }
}

/// What a training loop holds between forwards: the batch and the model's output object
/// (logits, loss and KV cache). The custom loop keeps them until the next batch and the next
/// forward's assignment replace them; the trainer loop keeps neither.
#[derive(Debug, Default)]
struct Kept {
    /// `input_ids` of the last batch.
    batch: Option<Tid>,
    /// What the last forward's output object holds.
    outputs: Vec<Tid>,
    /// Where the previous step's outputs are made once the first forward has told their
    /// sizes (the custom loop's first micro-batch).
    outputs_place: Option<crate::timeline::Place>,
    /// The handles the step started with: the batch, then the outputs.
    handles: Vec<Tid>,
}

/// The forward of one micro-batch up to the model's return: the loss, the storages the output
/// object holds (the KV cache's keys and values, the logits, the loss; one reference each)
/// and the last hidden state (the caller's to drop). The strategy acts at the model's and the
/// layers' boundaries.
fn forward(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    ranks: &mut Ranks,
) -> Result<(Tensor, Vec<Tid>, Tid)> {
    let s = cx.spec;
    if s.is_encoder_decoder() {
        return seq2seq::forward(g, cx, m, ranks);
    }
    ranks.forward_start(g)?;
    let mut x = embed(g, cx, m)?;
    let shared = layer_inputs(g, cx)?;
    for layer in 0..s.n_layers as usize {
        g.begin_layer(layer);
        ranks.pre_forward(g, layer)?;
        let y = if cx.setup.checkpointing.checkpoints_layer(layer as u64) {
            g.saving = false;
            let mark = g.mark();
            let y = layer_forward(g, cx, m, x, layer)?;
            g.saving = true;
            g.truncate(mark);
            g.end_checkpointed_layer(layer, x.id, y.id, &shared);
            y
        } else {
            let y = layer_forward(g, cx, m, x, layer)?;
            g.end_layer(layer);
            y
        };
        ranks.post_forward(g, layer)?;
        g.drop(x.id);
        x = y;
    }
    let h = if s.final_norm {
        let y = norm(g, cx, x, &m.final_norm, cx.tokens)?;
        g.drop(x.id);
        y
    } else {
        x
    };
    // The base model returns: its locals go (checkpoints still hold them).
    for t in shared {
        g.drop(t);
    }
    g.tl.set_phase(Phase::Loss);
    let (loss, logits) = head_and_loss(g, cx, m, h)?;
    let mut outputs = std::mem::take(&mut g.outputs);
    outputs.extend(logits.map(|l| l.id));
    g.tl.retain(loss.id);
    outputs.push(loss.id);
    Ok((loss, outputs, h.id))
}

/// One micro-batch: forward, loss, backward.
fn micro_batch(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    kept: &mut Kept,
    ranks: &mut Ranks,
) -> Result<()> {
    g.tl.set_phase(Phase::Forward);
    // `input_ids` (and an encoder-decoder's `labels`), int64.
    let ids = if cx.spec.is_encoder_decoder() {
        g.alloc(seq2seq::batch_bytes(cx)?)?
    } else {
        g.alloc(mul(cx.tokens, 8)?)?
    };
    // `for batch in loader`: the new batch replaces the one the loop still held.
    if let Some(previous) = kept.batch.take() {
        g.drop(previous);
    }
    let (loss, mut outputs, hidden) = forward(g, cx, m, ranks)?;
    if cx.setup.training_loop == TrainingLoop::Custom {
        // The output object holds the graph (through its logits), and with it what the nodes
        // keep as attributes: they live as long as it does.
        outputs.append(&mut g.graph_held);
    }
    if let Some(place) = kept.outputs_place.take() {
        // The previous step's batch and outputs were this forward's sizes: make them now.
        let sizes: Vec<(u64, Component)> =
            outputs.iter().map(|&t| (g.tl.bytes_of(t), Component::Temporaries)).collect();
        let mut made = g.tl.resolve(&[g.tl.bytes_of(ids)], &[(place, sizes)])?;
        let previous = made.pop().expect("one place");
        kept.handles.extend_from_slice(&previous);
        kept.outputs = previous;
    }
    match cx.setup.training_loop {
        // `loss = model(**batch).loss`: the output object goes at once.
        TrainingLoop::Trainer => {
            for t in outputs {
                g.drop(t);
            }
        }
        // `outputs = model(**batch)`: the assignment replaces the previous outputs, which
        // lived through this forward; these live through backward, the optimizer step and the
        // next forward.
        TrainingLoop::Custom => {
            for t in std::mem::replace(&mut kept.outputs, outputs) {
                g.drop(t);
            }
        }
    }
    g.drop(hidden);
    ranks.forward_end(g);
    g.clear_autocast_cache();
    g.tl.set_phase(Phase::Backward);
    g.seed_grad(loss.id, 4)?;
    ranks.backward_start(g)?;
    backward(g, cx, m, ranks)?;
    ranks.backward_end(g)?;
    // `loss` goes: the graph with it (a custom loop's outputs hold it until the next forward).
    g.release_graph_held();
    g.drop(loss.id);
    match cx.setup.training_loop {
        TrainingLoop::Trainer => g.drop(ids),
        TrainingLoop::Custom => kept.batch = Some(ids),
    }
    Ok(())
}

/// Backward, acting at layer boundaries: the strategy gathers a layer's parameters when
/// backward enters it and reduces its gradients when backward leaves it; a checkpointed
/// layer's forward is replayed (with saving) after it is entered, and what it kept is released
/// when backward leaves it.
fn backward(g: &mut Graph, cx: &Context<'_>, m: &Model, ranks: &mut Ranks) -> Result<()> {
    /// A replayed layer, until backward leaves it.
    struct Replayed {
        layer: usize,
        output: Tid,
        checkpoint: Checkpoint,
    }
    let mut replayed: Vec<Replayed> = Vec::new();
    while let Some(boundary) = g.backward_to_boundary()? {
        match boundary {
            Boundary::LayerEnd { layer, checkpoint } => {
                ranks.pre_backward(g, layer)?;
                let Some(checkpoint) = checkpoint else { continue };
                let incoming = g.take_grad(checkpoint.output);
                g.replaying = true;
                let y = if cx.spec.is_encoder_decoder() {
                    seq2seq::replay(g, cx, m, checkpoint.input, layer, &checkpoint.held)?
                } else {
                    let x = Tensor {
                        id: checkpoint.input,
                        dtype: hidden_dtype(cx),
                        numel: mul(cx.tokens, cx.spec.hidden_size)?,
                    };
                    layer_forward(g, cx, m, x, layer)?
                };
                g.replaying = false;
                g.clear_autocast_cache();
                g.drop(y.id);
                if let Some(grad) = incoming {
                    g.set_grad(y.id, grad);
                }
                replayed.push(Replayed { layer, output: y.id, checkpoint });
            }
            Boundary::LayerStart { layer } => {
                ranks.post_backward(g, layer)?;
                if replayed.last().is_some_and(|r| r.layer == layer) {
                    let r = replayed.pop().expect("checked above");
                    // A replayed output nobody consumed keeps no gradient.
                    if let Some(grad) = g.take_grad(r.output) {
                        g.drop(grad);
                    }
                    g.drop(r.checkpoint.input);
                    for t in r.checkpoint.held {
                        g.drop(t);
                    }
                }
            }
        }
    }
    assert!(replayed.is_empty(), "a replayed layer was never left");
    Ok(())
}

/// The residual stream's dtype: the parameters' (fp32 under autocast: additions promote).
fn hidden_dtype(cx: &Context<'_>) -> DType {
    cx.param_dtype
}

/// What one simulated step leaves: its high-water marks and model states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepResult {
    /// The peak.
    pub(crate) peak: u64,
    /// Its phase.
    pub(crate) peak_phase: Phase,
    /// What was live then.
    pub(crate) at_peak: ByComponent,
    /// Each phase's peak.
    pub(crate) phase_peaks: [u64; 4],
    /// Parameters, gradients, optimizer state.
    pub(crate) model_states: ModelStates,
    /// The rank simulated.
    pub(crate) worst_rank: WorstRank,
    /// Host memory offloading takes.
    pub(crate) host_memory: Option<HostMemory>,
}

/// Micro-batches simulated for a setup.
///
/// Gradient accumulation runs micro-batches 2 to N from the same state (the gradients exist,
/// the activations are gone), so they are alike and the step's peaks are those of two
/// micro-batches; two are simulated, which keeps an estimate in milliseconds for any N.
pub(crate) fn simulated_micro_batches(setup: &TrainSetup) -> u64 {
    setup.grad_accum.min(2)
}

/// Runs one steady-state training iteration (micro-batches, step, `zero_grad`), telling
/// `observers` every allocation and free.
pub(crate) fn simulate(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
    observers: Vec<&mut dyn StreamObserver>,
) -> Result<StepResult> {
    let layout = spec.parameter_layout();
    simulate_micro_batches(spec, &layout, setup, device, observers, simulated_micro_batches(setup))
}

impl<'a> Context<'a> {
    fn new(spec: &'a ModelSpec, setup: &'a TrainSetup, device: &'a Device) -> Result<Context<'a>> {
        // Autocast over the parameters' dtype, or a framework's mixed precision (the model's
        // parameters in 16 bits, the master copies held by the strategy).
        let dtypes = crate::parallel::Dtypes::of(setup);
        Ok(Context {
            spec,
            setup,
            tokens: mul(setup.micro_batch, setup.seq_len)?,
            param_dtype: dtypes.compute,
            compute_dtype: setup.precision.compute_dtype(),
            autocast: dtypes.autocast,
            device,
            adapters: &[],
            quantized: &[],
            kv_cache: setup.kv_cache(spec),
        })
    }
}

fn simulate_micro_batches(
    spec: &ModelSpec,
    layout: &crate::layout::ParameterLayout,
    setup: &TrainSetup,
    device: &Device,
    observers: Vec<&mut dyn StreamObserver>,
    micro_batches: u64,
) -> Result<StepResult> {
    simulate_with(spec, layout, setup, device, observers, micro_batches, KeptSizes::FirstForward)
}

/// Where the custom loop's kept tensors get their sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeptSizes {
    /// From the step's own first forward, the stream held back until then.
    FirstForward,
    /// From a forward simulated apart beforehand (the straightforward way, twice the
    /// forwards; kept to check the other against).
    #[cfg(test)]
    SeparateForward,
}

fn simulate_with(
    spec: &ModelSpec,
    layout: &crate::layout::ParameterLayout,
    setup: &TrainSetup,
    device: &Device,
    observers: Vec<&mut dyn StreamObserver>,
    micro_batches: u64,
    kept_sizes_from: KeptSizes,
) -> Result<StepResult> {
    let cx = Context::new(spec, setup, device)?;
    let mut g = Graph::new(Timeline::new(device.allocation_granularity, observers));
    let model = build_model(&mut g, &cx, layout)?;
    let cx = Context { adapters: &model.adapters, quantized: &model.quantized, ..cx };
    // The strategy wraps the model: shards it, allocates its buffers.
    let mut ranks = Ranks::new(&mut g, setup, Some(spec.n_layers))?;
    let persistent_gradients = g.tl.live()[Component::Gradients as usize];
    for &bytes in device.workspaces {
        g.tl.alloc(Component::Workspace, bytes)?;
    }
    let stepped = ranks.stepped(&g);
    let mut opt = crate::optim::OptimizerRun::new(setup, stepped, device)?;
    let model_states = ranks.model_states(&g, &opt)?;
    // The steady state: the optimizer state exists before the forward (the previous step
    // created it). The first iteration of a run is the same stream without that state, and
    // its first `step()` creates the state with every gradient alive, which is exactly the
    // steady-state step; so one steady iteration has the peak of any number of them.
    opt.create_state(&mut g)?;
    if setup.zero_grad == ZeroGrad::Zeros {
        // `zero_grad(set_to_none=False)` left every gradient allocated.
        g.keep_gradients()?;
    }
    // A custom loop starts the step holding the previous step's batch and outputs (the
    // same tensors the last micro-batch of this one leaves): the batch, then what the model's
    // output object holds. Their sizes are those the first forward makes; until it has made
    // them, the stream is held back (`Timeline::alloc_pending`).
    let mut kept = Kept::default();
    match (setup.training_loop, kept_sizes_from) {
        (TrainingLoop::Trainer, _) => {}
        (TrainingLoop::Custom, KeptSizes::FirstForward) => {
            let batch = g.tl.alloc_pending(Component::Temporaries)?;
            kept.batch = Some(batch);
            kept.handles.push(batch);
            kept.outputs_place = Some(g.tl.place_pending());
        }
        #[cfg(test)]
        (TrainingLoop::Custom, KeptSizes::SeparateForward) => {
            for (i, bytes) in kept_sizes(layout, &cx)?.into_iter().enumerate() {
                let t = g.tl.alloc(Component::Temporaries, bytes)?;
                if i == 0 {
                    kept.batch = Some(t);
                } else {
                    kept.outputs.push(t);
                }
                kept.handles.push(t);
            }
        }
    }
    for _ in 0..micro_batches {
        micro_batch(&mut g, &cx, &model, &mut kept, &mut ranks)?;
    }
    g.tl.set_phase(Phase::OptimizerStep);
    ranks.step(&mut g, &mut opt)?;
    if setup.zero_grad == ZeroGrad::SetToNone {
        g.zero_grad();
    }
    ranks.zero_grad(&mut g);
    // The custom loop's last batch and outputs become the next step's: the same storages
    // under the handles this step started with, so that the stream repeats step after step.
    assert!(!g.tl.has_pending(), "the previous step's tensors were never made");
    let last: Vec<Tid> = kept.batch.take().into_iter().chain(kept.outputs.drain(..)).collect();
    assert_eq!(last.len(), kept.handles.len(), "the kept tensors differ from the previous step's");
    let mut kept_bytes = [0u64; 7];
    for (t, &handle) in last.into_iter().zip(&kept.handles) {
        let bytes = g.tl.bytes_of(t);
        assert_eq!(bytes, g.tl.bytes_of(handle), "a kept tensor changed size");
        let component = g.tl.component_of(handle);
        kept_bytes[component as usize] += bytes;
        g.tl.release(t);
        g.tl.revive(handle, component, bytes)?;
    }
    // What the next iteration starts from: the model, its state and workspaces, the
    // strategy's persistent gradient buffers (DDP's buckets, ZeRO-3's partitions), the
    // gradients `set_to_none=False` keeps and what the custom loop keeps.
    let live = g.tl.live();
    for c in [Component::Activations, Component::Temporaries, Component::AutocastCache] {
        assert_eq!(live[c as usize], kept_bytes[c as usize], "{} alive after zero_grad", c.name());
    }
    if setup.zero_grad == ZeroGrad::SetToNone {
        assert_eq!(
            live[Component::Gradients as usize],
            persistent_gradients,
            "gradients alive after zero_grad"
        );
    }
    let (peak, peak_phase, at_peak) = g.tl.peak();
    Ok(StepResult {
        peak,
        peak_phase,
        at_peak,
        phase_peaks: g.tl.phase_peaks(),
        model_states,
        worst_rank: ranks.worst_rank(&g),
        host_memory: ranks.host_memory(&g, setup)?,
    })
}

/// What the custom loop keeps between steps, in the order the step makes it (the batch, then
/// what the model's output object holds), from one forward simulated apart.
#[cfg(test)]
fn kept_sizes(layout: &crate::layout::ParameterLayout, cx: &Context<'_>) -> Result<Vec<u64>> {
    let mut g = Graph::new(Timeline::new(cx.device.allocation_granularity, Vec::new()));
    let model = build_model(&mut g, cx, layout)?;
    let mut ranks = Ranks::new(&mut g, cx.setup, Some(cx.spec.n_layers))?;
    let batch = g.alloc(mul(cx.tokens, 8)?)?;
    let (_, outputs, _) = forward(&mut g, cx, &model, &mut ranks)?;
    Ok(std::iter::once(batch).chain(outputs).map(|t| g.tl.bytes_of(t)).collect())
}

/// The model states of a setup without simulating its step: what is alive when
/// `optimizer.step()` starts (every parameter, every gradient, the optimizer state on the
/// device), so a lower bound of the step's peak (with the device's workspaces).
///
/// Also returns a paged optimizer's state in managed memory (outside the model states) and
/// what offloading puts in host memory.
pub(crate) fn model_states_only(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
) -> Result<(ModelStates, u64, Option<crate::parallel::HostMemory>)> {
    let layout = spec.parameter_layout();
    let cx = Context::new(spec, setup, device)?;
    let mut g = Graph::new(Timeline::new(device.allocation_granularity, Vec::new()));
    build_model(&mut g, &cx, &layout)?;
    let ranks = Ranks::new(&mut g, setup, Some(spec.n_layers))?;
    let opt = crate::optim::OptimizerRun::new(setup, ranks.stepped(&g), device)?;
    Ok((ranks.model_states(&g, &opt)?, opt.paged_state()?, ranks.host_memory(&g, setup)?))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;

    use super::{Context, Graph, Timeline, build_model, simulate_micro_batches};
    use crate::device::Device;
    use crate::layout::ParameterLayout;
    use crate::parallel::{Offload, Parallel, Strategy as Sharding};
    use crate::setup::{Checkpointing, Optimizer, Precision, TrainSetup, TrainingLoop, ZeroGrad};
    use crate::timeline::{Component, Phase, StreamEvent, StreamObserver, StreamState};
    use crate::{ModelSpec, catalog};

    const MODELS: &[&str] =
        &["gpt2", "bert-base-uncased", "llama-3.2-1b", "gemma-2-2b", "qwen3-0.6b", "phi-3-mini"];

    fn spec(name: &str) -> ModelSpec {
        ModelSpec::from_hf_config(catalog::config_json(name).unwrap()).unwrap()
    }

    fn run(
        spec: &ModelSpec,
        layout: &ParameterLayout,
        setup: &TrainSetup,
        device: &Device,
        runs: u64,
    ) -> super::StepResult {
        simulate_micro_batches(spec, layout, setup, device, Vec::new(), runs).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// What `simulate` relies on to run two micro-batches for any accumulation: the
        /// third and fourth change none of the step's peaks.
        #[test]
        fn micro_batches_after_the_second_repeat_it(
            m in 0usize..MODELS.len(),
            precision in prop::sample::select(Precision::ALL.to_vec()),
            optimizer in prop::sample::select(Optimizer::ALL.to_vec()),
            full in any::<bool>(),
            cpu in any::<bool>(),
            training_loop in prop::sample::select(TrainingLoop::ALL.to_vec()),
            zero_grad in prop::sample::select(ZeroGrad::ALL.to_vec()),
            use_cache in any::<bool>(),
        ) {
            let spec = spec(MODELS[m]);
            let setup = TrainSetup {
                micro_batch: 2,
                seq_len: 128,
                precision,
                optimizer,
                checkpointing: if full { Checkpointing::Full } else { Checkpointing::None },
                grad_accum: 4,
                training_loop,
                zero_grad,
                use_cache: Some(use_cache),
                ..TrainSetup::default()
            };
            let device = if cpu { Device::CPU_ORACLE } else { Device::CUDA };
            let layout = spec.parameter_layout();
            let two = run(&spec, &layout, &setup, &device, 2);
            prop_assert_eq!(&two, &run(&spec, &layout, &setup, &device, 3));
            prop_assert_eq!(&two, &run(&spec, &layout, &setup, &device, 4));
        }
    }

    /// Counts the storages allocated and freed, and fails on a free of a storage that is not
    /// live.
    #[derive(Default)]
    struct Ledger {
        live: HashMap<usize, (u64, Component)>,
        frees: u64,
    }

    impl StreamObserver for Ledger {
        fn observe(&mut self, event: StreamEvent, _: StreamState<'_>) {
            match event {
                StreamEvent::Alloc { tid, bytes, component } => {
                    assert!(self.live.insert(tid.index(), (bytes, component)).is_none());
                }
                StreamEvent::Free { tid, bytes, component } => {
                    let was = self.live.remove(&tid.index()).expect("freed twice");
                    assert_eq!(was, (bytes, component));
                    self.frees += 1;
                }
                StreamEvent::Recategorize { tid, component } => {
                    self.live.get_mut(&tid.index()).expect("recategorized after free").1 =
                        component;
                }
                StreamEvent::Phase(_) => {}
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Over the whole catalog and the setup grid: no storage is freed twice, and after
        /// `zero_grad` nothing is alive but parameters, optimizer state and workspaces (the
        /// step asserts the latter itself; the ledger checks it storage by storage).
        #[test]
        fn every_storage_is_freed_once_and_the_step_ends_clean(
            m in 0usize..31,
            precision in prop::sample::select(Precision::ALL.to_vec()),
            optimizer in prop::sample::select(Optimizer::ALL.to_vec()),
            attention in prop::sample::select(crate::setup::Attention::ALL.to_vec()),
            checkpointing in prop::sample::select(vec![Checkpointing::None, Checkpointing::Full, Checkpointing::Every(2)]),
            loss in prop::sample::select(crate::setup::LossKernel::ALL.to_vec()),
            accum in 1u64..3,
            cpu in any::<bool>(),
            training_loop in prop::sample::select(TrainingLoop::ALL.to_vec()),
            zero_grad in prop::sample::select(ZeroGrad::ALL.to_vec()),
            use_cache in any::<bool>(),
            peft in 0u8..5,
            kind in prop::sample::select(crate::setup::QuantType::ALL.to_vec()),
            task in 0usize..3,
        ) {
            let names = catalog::names();
            let spec = spec(names[m % names.len()]);
            // The model's own head, a sequence or a token classifier.
            let tasks = spec.tasks();
            let spec = spec.for_task(tasks[task % tasks.len()], 3).unwrap();
            // None, LoRA, QLoRA (a quantised base), DoRA, DoRA with dropout.
            let lora = (peft > 0).then(|| crate::setup::Lora {
                rank: 4,
                alpha: 8,
                targets: crate::setup::LoraTargets::AllLinear,
                dropout: peft == 4,
                modules_to_save: Vec::new(),
                use_dora: peft >= 3,
            });
            let quantization = (peft == 2).then(|| crate::setup::Quantization {
                kind,
                double_quant: kind.four_bit(),
                compute_dtype: precision.compute_dtype(),
                skip_modules: Vec::new(),
            });
            let setup = TrainSetup {
                lora,
                quantization,
                micro_batch: 1,
                seq_len: 64,
                precision,
                optimizer,
                attention,
                checkpointing,
                grad_accum: accum,
                training_loop,
                zero_grad,
                use_cache: Some(use_cache),
                loss,
                ..TrainSetup::default()
            };
            let device = if cpu { Device::CPU_ORACLE } else { Device::CUDA };
            let mut ledger = Ledger::default();
            simulate_micro_batches(&spec, &spec.parameter_layout(), &setup, &device, vec![&mut ledger], accum).unwrap();
            prop_assert!(ledger.frees > 0);
            for (bytes, component) in ledger.live.values() {
                // What the next step starts from: the model and its state, the gradients
                // `set_to_none=False` keeps, what the custom loop keeps (as temporaries).
                let kept = match component {
                    Component::Parameters | Component::OptimizerState | Component::Workspace => true,
                    Component::Gradients => zero_grad == ZeroGrad::Zeros,
                    Component::Temporaries => training_loop == TrainingLoop::Custom,
                    Component::Activations | Component::AutocastCache => false,
                };
                prop_assert!(kept, "{} bytes of {} alive after the step", bytes, component.name());
            }
        }

        /// The custom loop only adds what it keeps, and `set_to_none=False` only keeps the
        /// gradients: neither lowers the peak of the step or of any phase.
        #[test]
        fn keeping_outputs_or_gradients_never_lowers_a_peak(
            m in 0usize..31,
            precision in prop::sample::select(Precision::ALL.to_vec()),
            attention in prop::sample::select(crate::setup::Attention::ALL.to_vec()),
            full in any::<bool>(),
            accum in 1u64..3,
            cpu in any::<bool>(),
            use_cache in any::<bool>(),
        ) {
            let names = catalog::names();
            let spec = spec(names[m % names.len()]);
            let base = TrainSetup {
                micro_batch: 1,
                seq_len: 64,
                precision,
                attention,
                checkpointing: if full { Checkpointing::Full } else { Checkpointing::None },
                grad_accum: accum,
                use_cache: Some(use_cache),
                training_loop: TrainingLoop::Trainer,
                zero_grad: ZeroGrad::SetToNone,
                ..TrainSetup::default()
            };
            let device = if cpu { Device::CPU_ORACLE } else { Device::CUDA };
            let layout = spec.parameter_layout();
            let at = |setup: &TrainSetup| run(&spec, &layout, setup, &device, accum);
            let plain = at(&base);
            for other in [
                TrainSetup { training_loop: TrainingLoop::Custom, ..base.clone() },
                TrainSetup { zero_grad: ZeroGrad::Zeros, ..base.clone() },
                TrainSetup { training_loop: TrainingLoop::Custom, zero_grad: ZeroGrad::Zeros, ..base.clone() },
            ] {
                let kept = at(&other);
                prop_assert!(kept.peak >= plain.peak);
                for (k, p) in kept.phase_peaks.iter().zip(plain.phase_peaks) {
                    prop_assert!(*k >= p);
                }
            }
        }
    }

    fn strategy_setup(
        strategy: Sharding,
        gpus: u64,
        offload: Offload,
        reshard_after_forward: bool,
        precision: Precision,
        full: bool,
        grad_accum: u64,
    ) -> TrainSetup {
        TrainSetup {
            micro_batch: 1,
            seq_len: 64,
            precision,
            checkpointing: if full { Checkpointing::Full } else { Checkpointing::None },
            grad_accum,
            parallel: Parallel {
                gpus_per_node: gpus,
                strategy,
                offload,
                reshard_after_forward: reshard_after_forward || !strategy.is_fsdp(),
                ..Parallel::default()
            },
            ..TrainSetup::default()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Every strategy frees each storage once, and the step ends with nothing alive but the
        /// model (its shards, flat buffers, master copies), its optimizer state, workspaces and
        /// the strategy's persistent gradient buffers (the step asserts that their total is
        /// what the strategy allocated before the first forward).
        #[test]
        fn every_strategy_frees_each_storage_once(
            m in 0usize..MODELS.len(),
            strategy in prop::sample::select(Sharding::ALL.to_vec()),
            gpus in prop::sample::select(vec![1u64, 2, 3, 8]),
            offload in prop::sample::select(Offload::ALL.to_vec()),
            reshard in any::<bool>(),
            precision in prop::sample::select(vec![Precision::Fp32, Precision::Bf16Mixed, Precision::Bf16]),
            full in any::<bool>(),
            accum in 1u64..3,
            cpu in any::<bool>(),
        ) {
            let setup = strategy_setup(strategy, gpus, offload, reshard, precision, full, accum);
            prop_assume!(crate::parallel::check(&setup).is_ok());
            let spec = spec(MODELS[m]);
            let device = if cpu { Device::CPU_ORACLE } else { Device::CUDA };
            let mut ledger = Ledger::default();
            simulate_micro_batches(&spec, &spec.parameter_layout(), &setup, &device, vec![&mut ledger], accum).unwrap();
            prop_assert!(ledger.frees > 0);
            for (bytes, component) in ledger.live.values() {
                // The custom loop (the default) keeps the batch and the outputs as temporaries.
                let kept = match component {
                    Component::Parameters | Component::OptimizerState | Component::Workspace | Component::Gradients => true,
                    Component::Temporaries => setup.training_loop == TrainingLoop::Custom,
                    Component::Activations | Component::AutocastCache => false,
                };
                prop_assert!(kept, "{} bytes of {} alive after the step", bytes, component.name());
            }
        }

        /// The two-micro-batch shortcut holds under every strategy: sharded gradients
        /// accumulate into what the second micro-batch left, so a third changes no peak.
        #[test]
        fn strategies_repeat_the_second_micro_batch(
            m in 0usize..MODELS.len(),
            strategy in prop::sample::select(Sharding::ALL.to_vec()),
            gpus in prop::sample::select(vec![2u64, 4]),
            offload in prop::sample::select(Offload::ALL.to_vec()),
            full in any::<bool>(),
        ) {
            let setup = strategy_setup(strategy, gpus, offload, true, Precision::Bf16Mixed, full, 4);
            prop_assume!(crate::parallel::check(&setup).is_ok());
            let spec = spec(MODELS[m]);
            let layout = spec.parameter_layout();
            let two = run(&spec, &layout, &setup, &Device::CUDA, 2);
            prop_assert_eq!(&two, &run(&spec, &layout, &setup, &Device::CUDA, 3));
        }
    }

    /// An event without its storage handle (kind, bytes, component, phase), then the state
    /// after it (total, by component, phase).
    type Told = (u8, u64, Option<Component>, Option<Phase>, u64, [u64; 7], Phase);

    /// Every event of a stream with the state after it.
    #[derive(Default, PartialEq, Debug)]
    struct Events(Vec<Told>);

    impl StreamObserver for Events {
        fn observe(&mut self, event: StreamEvent, state: StreamState<'_>) {
            let (kind, bytes, component, phase) = match event {
                StreamEvent::Alloc { bytes, component, .. } => (0, bytes, Some(component), None),
                StreamEvent::Free { bytes, component, .. } => (1, bytes, Some(component), None),
                StreamEvent::Recategorize { component, .. } => (2, 0, Some(component), None),
                StreamEvent::Phase(p) => (3, 0, None, Some(p)),
            };
            self.0.push((kind, bytes, component, phase, state.total, *state.live, state.phase));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// The custom loop's kept tensors sized by the step's own first forward (the stream
        /// held back until then) give the stream, the step's figures and the caching
        /// allocator's figures that a separate forward sizing them beforehand gives.
        #[test]
        fn kept_tensors_sized_by_the_first_forward_give_the_same_stream(
            m in 0usize..MODELS.len(),
            precision in prop::sample::select(Precision::ALL.to_vec()),
            checkpointing in prop::sample::select(vec![Checkpointing::None, Checkpointing::Full, Checkpointing::Every(2)]),
            grad_accum in 1u64..4,
            use_cache in any::<bool>(),
            zero_grad in prop::sample::select(ZeroGrad::ALL.to_vec()),
            strategy in prop::sample::select(vec![None, Some(Sharding::Zero3), Some(Sharding::Fsdp), Some(Sharding::Ddp)]),
            cpu in any::<bool>(),
            loss in prop::sample::select(crate::setup::LossKernel::ALL.to_vec()),
        ) {
            let mut setup = match strategy {
                Some(s) => strategy_setup(s, 2, Offload::None, true, precision, false, grad_accum),
                None => TrainSetup { micro_batch: 2, seq_len: 64, precision, grad_accum, ..TrainSetup::default() },
            };
            setup.checkpointing = checkpointing;
            setup.use_cache = Some(use_cache);
            setup.zero_grad = zero_grad;
            setup.loss = loss;
            setup.training_loop = TrainingLoop::Custom;
            let spec = spec(MODELS[m]);
            prop_assume!(crate::estimate(&spec, &setup).is_ok());
            let layout = spec.parameter_layout();
            let device = if cpu { Device::CPU_ORACLE } else { Device::CUDA };
            let runs = super::simulated_micro_batches(&setup);
            let with = |from| {
                let mut events = Events::default();
                let mut allocator = crate::allocator::CachingAllocator::new(Default::default());
                let step = super::simulate_with(
                    &spec, &layout, &setup, &device,
                    vec![&mut events, &mut allocator], runs, from,
                ).unwrap();
                (step, events, allocator.finish())
            };
            let (step, events, reserved) = with(super::KeptSizes::FirstForward);
            let (step2, events2, reserved2) = with(super::KeptSizes::SeparateForward);
            prop_assert_eq!(step, step2);
            prop_assert!(events == events2, "the streams differ");
            prop_assert_eq!(reserved, reserved2);
        }
    }

    /// FSDP gathers each layer in its pre-forward and frees it in its post-forward: at the
    /// forward's peak a rank holds its shards, the root and at most two layers gathered (one
    /// computing, one all-gather output kept for the next copy-in); without resharding every
    /// layer stays gathered until backward.
    #[test]
    fn fsdp_holds_one_gathered_layer_in_forward_unless_it_does_not_reshard() {
        let spec = spec("llama-3.2-1b");
        let layout = spec.parameter_layout();
        let run_with = |reshard| {
            let setup = strategy_setup(
                Sharding::Fsdp,
                8,
                Offload::None,
                reshard,
                Precision::Bf16Mixed,
                false,
                1,
            );
            run(&spec, &layout, &setup, &Device::CPU_ORACLE, 1)
        };
        let (full_shard, grad_op) = (run_with(true), run_with(false));
        let layer: u64 = layout.layer.iter().map(|d| d.shape.numel().unwrap()).sum();
        // bf16 gathered layers: the no-reshard forward ends holding all 16, the full-shard one
        // one or two (where the activations peak is not quite the same moment).
        let more = grad_op.phase_peaks[0] - full_shard.phase_peaks[0];
        assert!(more >= 12 * layer * 2 && more <= 16 * layer * 2, "{more} vs {}", layer * 2);
        // The model states are the same: the shards.
        assert_eq!(full_shard.model_states, grad_op.model_states);
        let sharded = spec.parameter_count().div_ceil(8) * 4;
        assert!(full_shard.model_states.parameters.get() >= sharded);
        assert!(full_shard.model_states.parameters.get() < sharded + sharded / 100);
    }

    /// The step simulates exactly the layout's parameters: the same tensors, the same count.
    #[test]
    fn the_step_registers_the_layout() {
        for name in catalog::names() {
            let spec = spec(name);
            let setup = TrainSetup { micro_batch: 1, seq_len: 16, ..TrainSetup::default() };
            let cx = Context::new(&spec, &setup, &Device::CUDA).unwrap();
            let layout = spec.parameter_layout();
            let mut g = Graph::new(Timeline::new(512, Vec::new()));
            build_model(&mut g, &cx, &layout).unwrap();
            assert_eq!(g.params.len(), layout.iter().count(), "{name}");
            assert_eq!(
                g.params.iter().map(|p| p.numel).sum::<u64>(),
                spec.parameter_count(),
                "{name}"
            );
        }
    }

    /// Frozen parameters get no gradient and no optimizer state, and ops whose inputs need no
    /// gradient record nothing: with everything frozen but the output projection, only the
    /// head's input and the loss's tensors are saved.
    #[test]
    fn frozen_parameters_save_nothing_and_get_no_state() {
        let spec = spec("pythia-160m");
        let setup = TrainSetup { micro_batch: 2, seq_len: 256, ..TrainSetup::default() };
        let full = spec.parameter_layout();
        let mut head_only = full.clone();
        for d in head_only.before.iter_mut().chain(&mut head_only.layer).chain(&mut head_only.after)
        {
            d.trains = d.slot == crate::layout::Slot::Head;
        }
        let head = head_only.after.iter().find(|d| d.trains).unwrap().shape.numel().unwrap();
        let all = run(&spec, &full, &setup, &Device::CUDA, 1);
        let frozen = run(&spec, &head_only, &setup, &Device::CUDA, 1);
        let fp32 = 4;
        assert_eq!(frozen.model_states.parameters, all.model_states.parameters);
        assert_eq!(frozen.model_states.gradients.get(), head * fp32);
        assert_eq!(frozen.model_states.optimizer_state.get(), 2 * head * fp32, "adamw");
        let activations = Component::Activations as usize;
        // Saved: the fp32 log-probabilities (the loss's) and the head's input.
        let logits = 2 * 256 * spec.vocab_size * 4;
        assert!(frozen.at_peak[activations] <= logits + 2 * 256 * spec.hidden_size * 2);
        // The forward keeps nothing per layer: without the optimizer state the head-only run
        // does not have, its peak is lower by what the layers save.
        let forward =
            |r: &super::StepResult| r.phase_peaks[0] - r.model_states.optimizer_state.get();
        assert!(forward(&all) > forward(&frozen) + (100 << 20));
    }

    /// The largest single allocation of each phase.
    #[derive(Default)]
    struct Largest([u64; 4]);

    impl StreamObserver for Largest {
        fn observe(&mut self, event: StreamEvent, state: StreamState<'_>) {
            if let StreamEvent::Alloc { bytes, .. } = event {
                let i = state.phase as usize;
                self.0[i] = self.0[i].max(bytes);
            }
        }
    }

    /// The fused, chunked loss never makes the `tokens × vocabulary` logits, for any
    /// precision; it lowers the loss's peak for a 128k vocabulary, and micro-batches after the
    /// second still repeat it.
    #[test]
    fn the_chunked_loss_never_makes_the_logits() {
        let spec = spec("llama-3.2-1b");
        let layout = spec.parameter_layout();
        for precision in Precision::ALL {
            let base = TrainSetup {
                micro_batch: 4,
                seq_len: 4096,
                precision,
                grad_accum: 3,
                ..TrainSetup::default()
            };
            let chunked = TrainSetup { loss: crate::setup::LossKernel::Chunked, ..base.clone() };
            // The logits in 16 bits: 16384 tokens × 128256, 4.2 GB (the output weight and its
            // fp32 gradient, 128256 × 2048, are 1.05 GB).
            let logits = 4 * 4096 * spec.vocab_size * 2;
            let mut largest = Largest::default();
            let two = simulate_micro_batches(
                &spec,
                &layout,
                &chunked,
                &Device::CUDA,
                vec![&mut largest],
                2,
            )
            .unwrap();
            assert!(largest.0[Phase::Loss as usize] < logits / 2, "{precision}: {:?}", largest.0);
            assert!(
                largest.0[Phase::Backward as usize] < logits / 2,
                "{precision}: {:?}",
                largest.0
            );
            let standard = run(&spec, &layout, &base, &Device::CUDA, 2);
            assert!(two.phase_peaks[1] < standard.phase_peaks[1], "{precision}");
            assert_eq!(two, run(&spec, &layout, &chunked, &Device::CUDA, 3), "{precision}");
        }
    }

    /// LitGPT's last chunk of one position (129 tokens: chunks of 128 and 1) is emptied by
    /// `logits[-1][..., :-1, :]`: backward never reaches it, the output layer's gradient comes
    /// from the other chunk alone and still reaches `.grad`, and with tied embeddings the
    /// out-of-place sum of the weight's two contributions stays at the end of backward, as at
    /// 128 tokens (one chunk): the peak grows by a token's worth, not drops by a table.
    #[test]
    fn an_empty_litgpt_chunk_gives_the_output_layer_no_gradient() {
        use crate::setup::LossKernel;
        for (name, tied) in [("pythia-160m", false), ("gpt2", true)] {
            let spec = spec(name);
            assert_eq!(spec.tied_embeddings, tied, "{name}");
            let at = |loss, seq_len| {
                let setup = TrainSetup {
                    micro_batch: 1,
                    seq_len,
                    precision: Precision::Fp32,
                    optimizer: Optimizer::Sgd,
                    loss,
                    ..TrainSetup::default()
                };
                crate::estimate::estimate_on(&spec, &setup, &Device::CPU_ORACLE).unwrap()
            };
            let litgpt = at(LossKernel::ChunkedOutputLitgpt, 129);
            let standard = at(LossKernel::Standard, 129);
            assert_eq!(
                litgpt.model_states_detail.gradients, standard.model_states_detail.gradients,
                "{name}"
            );
            let one_chunk = at(LossKernel::ChunkedOutputLitgpt, 128).peak_allocated.get();
            let table = spec.vocab_size * spec.hidden_size * 4;
            let grown = litgpt.peak_allocated.get().checked_sub(one_chunk);
            assert!(grown.is_some_and(|g| g < table / 10), "{name}: {grown:?}");
        }
    }

    /// What autograd holds when the forward has left the last layer (the first `Loss` phase
    /// event): the activations' bytes.
    #[derive(Default)]
    struct SavedAfterForward(Option<u64>);

    impl StreamObserver for SavedAfterForward {
        fn observe(&mut self, event: StreamEvent, state: StreamState<'_>) {
            if matches!(event, StreamEvent::Phase(Phase::Loss)) && self.0.is_none() {
                self.0 = Some(state.live[Component::Activations as usize]);
            }
        }
    }

    /// Every-n-th-layer checkpointing is checkpointing layer by layer, by construction: with
    /// n = 1 it is the full mode's stream, and after the forward each checkpointed layer holds
    /// what a layer holds under full checkpointing while every other layer holds what it holds
    /// without checkpointing. (All layers of a model are alike, so the saved bytes are a
    /// straight line in the number of checkpointed layers.) The KV cache is off throughout:
    /// transformers turns it off under any checkpointing, so only the baseline could have it.
    #[test]
    fn every_nth_layer_checkpointing_is_per_layer_checkpointing() {
        for name in ["qwen3-0.6b", "gpt2", "gemma-2-2b"] {
            let spec = spec(name);
            let layout = spec.parameter_layout();
            let base = TrainSetup {
                micro_batch: 2,
                seq_len: 256,
                use_cache: Some(false),
                ..TrainSetup::default()
            };
            let with = |c| {
                let setup = TrainSetup { checkpointing: c, ..base.clone() };
                let mut saved = SavedAfterForward::default();
                let step = simulate_micro_batches(
                    &spec,
                    &layout,
                    &setup,
                    &Device::CUDA,
                    vec![&mut saved],
                    1,
                )
                .unwrap();
                (step, saved.0.unwrap())
            };
            assert_eq!(with(Checkpointing::Every(1)).0, with(Checkpointing::Full).0, "{name}");
            let layers = spec.n_layers;
            let (none, full) = (with(Checkpointing::None).1, with(Checkpointing::Full).1);
            assert_eq!((none - full) % layers, 0, "{name}: layers alike");
            let per_layer = (none - full) / layers;
            for n in [2, 3, 5, 1 << 10] {
                let checkpointed = Checkpointing::Every(n).checkpointed_layers(layers);
                assert_eq!(
                    with(Checkpointing::Every(n)).1,
                    none - per_layer * checkpointed,
                    "{name} every-{n}"
                );
            }
        }
    }

    /// The storages alive the first time the total reaches `target`, with their component
    /// and the phase each was allocated in.
    struct LiveAt {
        target: u64,
        live: BTreeMap<usize, (u64, Component, Phase)>,
        captured: Option<Vec<(usize, u64, Component, Phase)>>,
    }

    impl StreamObserver for LiveAt {
        fn observe(&mut self, event: StreamEvent, state: StreamState<'_>) {
            match event {
                StreamEvent::Alloc { tid, bytes, component } => {
                    self.live.insert(tid.index(), (bytes, component, state.phase));
                }
                StreamEvent::Free { tid, .. } => {
                    self.live.remove(&tid.index());
                }
                StreamEvent::Recategorize { tid, component } => {
                    if let Some(s) = self.live.get_mut(&tid.index()) {
                        s.1 = component;
                    }
                }
                StreamEvent::Phase(_) => {}
            }
            if state.total == self.target && self.captured.is_none() {
                let live = self.live.iter().map(|(&i, &(b, c, p))| (i, b, c, p)).collect();
                self.captured = Some(live);
            }
        }
    }

    /// Debugging aid, not a check: the storages alive at the simulated peak of one oracle case
    /// (`VRAMFIT_CASE=<id>`), grouped by component, phase and size, for a side-by-side look
    /// with `validation/trace_case.py`. Run with
    /// `VRAMFIT_CASE=... cargo test -p vramfit-core live_at_peak -- --ignored --nocapture`
    /// (`VRAMFIT_RESULTS=path` reads the case from another results file).
    #[test]
    #[ignore = "prints a case's live set at the peak; needs VRAMFIT_CASE"]
    fn live_at_peak() {
        use crate::oracle_case::OracleCase;

        let Ok(id) = std::env::var("VRAMFIT_CASE") else { return };
        let path = std::env::var("VRAMFIT_RESULTS").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/results.jsonl").to_string()
        });
        let text = std::fs::read_to_string(path).unwrap();
        let cases = OracleCase::parse_lines(&text).unwrap();
        let case = cases.iter().find(|c| c.id == id).unwrap();
        let spec = case.spec().unwrap();
        let setup = case.setup().unwrap();
        let device = case.device().unwrap();
        let layout = spec.parameter_layout();
        let runs = super::simulated_micro_batches(&setup);
        let step = run(&spec, &layout, &setup, &device, runs);
        // Rerun, capturing the live set when the total first reaches the peak.
        let mut at = LiveAt { target: step.peak, live: BTreeMap::new(), captured: None };
        simulate_micro_batches(&spec, &layout, &setup, &device, vec![&mut at], runs).unwrap();
        let live = at.captured.unwrap();
        println!(
            "== {id}: predicted peak {} B in {}, oracle {} B, {} storages",
            step.peak,
            step.peak_phase.name(),
            case.peak_bytes,
            live.len()
        );
        let mut groups: BTreeMap<(&str, &str, u64), (u64, u64)> = BTreeMap::new();
        let mut by_component: BTreeMap<&str, u64> = BTreeMap::new();
        for &(_, bytes, c, born) in &live {
            let e = groups.entry((c.name(), born.name(), bytes)).or_default();
            e.0 += bytes;
            e.1 += 1;
            *by_component.entry(c.name()).or_default() += bytes;
        }
        println!("   by component: {by_component:?}");
        let mut v: Vec<_> = groups.into_iter().collect();
        v.sort_by_key(|(_, (total, _))| std::cmp::Reverse(*total));
        for ((c, born, bytes), (total, count)) in v.iter().take(60) {
            println!("   {total:>16}  x{count:<4} {c:<16} {born:<15} {bytes}");
        }
        println!("   last 40 live storages (newest last):");
        for (i, bytes, c, born) in live.iter().rev().take(40).rev() {
            println!("     #{i:<7} {bytes:>14} {:<16} {}", c.name(), born.name());
        }
    }
}
