//! [`Warning`]: what the user of an estimate should know, as values a caller (the CLI, a
//! planner) can act on. The text says what happens in PyTorch; it names no command-line flag.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::model::{ModelSpec, Positions};
use crate::setup::{Attention, Optimizer, Precision, TrainSetup};

/// One caveat of an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Warning {
    /// fp16 autocast needs a `GradScaler`.
    Fp16NeedsGradScaler,
    /// Flash attention was asked for with fp32 inputs.
    FlashNeeds16Bit,
    /// Soft-capped attention scores keep SDPA on its math kernel.
    SoftcapForcesMathSdpa,
    /// The sequence is longer than the model's learned position table.
    SequenceBeyondPositions {
        /// The sequence length asked for.
        seq_len: u64,
        /// Rows of the position table.
        max_positions: u64,
    },
    /// bitsandbytes' 8-bit optimizers ignore a requested state dtype.
    StateDtypeIgnored {
        /// The bitsandbytes optimizer.
        optimizer: Optimizer,
    },
    /// A paged optimizer's large states live in managed memory, outside the count.
    PagedStateOutsideAllocator {
        /// The paged optimizer.
        optimizer: Optimizer,
    },
    /// Pure bf16 with torch Adam keeps bf16 state.
    PureBf16AdamState,
    /// A quantised base whose other parameters stay in 16 bits: no
    /// `prepare_model_for_kbit_training`, which would upcast them to fp32.
    SixteenBitQuantizedBase,
    /// A multi-GPU strategy on one GPU: there is no other rank to share with.
    StrategyOnOneGpu {
        /// The strategy.
        strategy: crate::parallel::Strategy,
    },
    /// ZeRO on one GPU without offload partitions over one rank: it saves nothing, and adds its
    /// fp32 master copy and buckets.
    ZeroOnOneGpu,
    /// Gemma 3's local layers get a sliding-window mask under SDPA once the sequence reaches
    /// the window: the masked kernel is not modelled (they are estimated as causal layers).
    SlidingWindowSdpa {
        /// The window.
        window: u64,
    },
    /// HSDP replicates across nodes; on one node it is FSDP.
    HsdpOnOneNode,
    /// Uneven FSDP shards: this much of each rank's sharded parameters is padding.
    ShardPadding {
        /// Tenths of a percent.
        tenths_of_percent: u64,
    },
    /// LoRA on an MoE model's experts (PEFT's `lora.ParamWrapper`) merges each sparse layer's
    /// adapter into a copy of all its experts, which the expert matmuls keep until that
    /// layer's backward.
    LoraMergedExperts {
        /// The experts' bytes over all sparse layers (one merged copy of each).
        bytes: crate::units::Bytes,
    },
    /// The checkpoint is stored in fp8 (`quantization_config`, DeepSeek-V3): training takes the
    /// weights dequantised, in the training precision.
    Fp8Checkpoint,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Fp16NeedsGradScaler => f.write_str(
                "fp16-mixed needs torch.amp.GradScaler to avoid gradient underflow; bf16-mixed does not",
            ),
            Warning::FlashNeeds16Bit => f.write_str(
                "flash attention needs fp16 or bf16 inputs; with fp32 PyTorch falls back to another kernel",
            ),
            Warning::SoftcapForcesMathSdpa => f.write_str(
                "gemma2's attention softcapping is not supported by SDPA's fused kernels; the math path runs",
            ),
            Warning::SequenceBeyondPositions { seq_len, max_positions } => write!(
                f,
                "seq-len {seq_len} exceeds the model's {max_positions} learned positions; the model cannot run it"
            ),
            Warning::StateDtypeIgnored { optimizer: Optimizer::PagedAdamw } => f.write_str(
                "bitsandbytes' paged-adamw keeps fp32 state; the requested optimizer state dtype is ignored",
            ),
            Warning::StateDtypeIgnored { .. } => f.write_str(
                "bitsandbytes 8-bit optimizers keep uint8 state; the requested optimizer state dtype is ignored",
            ),
            Warning::PagedStateOutsideAllocator { optimizer } => write!(
                f,
                "{} keeps large state tensors in managed memory, outside the allocator's count",
                optimizer.name()
            ),
            Warning::PureBf16AdamState => f.write_str(
                "pure bf16 with torch Adam keeps bf16 optimizer states (no fp32 master copy)",
            ),
            Warning::SixteenBitQuantizedBase => f.write_str(
                "a 16-bit base with quantisation is modelled without prepare_model_for_kbit_training, which would upcast the other parameters to fp32 (a mixed-precision run)",
            ),
            Warning::StrategyOnOneGpu { strategy } => write!(
                f,
                "{strategy} on one GPU has no other rank to share with: the estimate is one GPU's, with {strategy}'s own buffers"
            ),
            Warning::ZeroOnOneGpu => f.write_str(
                "ZeRO on one GPU partitions over a single rank: without offload it saves nothing and adds fp32 master weights and buckets",
            ),
            Warning::SlidingWindowSdpa { window } => write!(
                f,
                "seq-len reaches the {window}-token sliding window: SDPA gets a mask on the local layers (another kernel, repeated key/value heads), estimated here as plain causal attention; eager is modelled exactly"
            ),
            Warning::HsdpOnOneNode => {
                f.write_str("hsdp replicates across nodes; on one node it shards like fsdp")
            }
            Warning::LoraMergedExperts { bytes } => write!(
                f,
                "LoRA on the experts (PEFT's lora.ParamWrapper) merges each layer's adapter into a copy of all its experts, kept until that layer's backward ({bytes} over all layers); adapting attention only avoids it"
            ),
            Warning::ShardPadding { tenths_of_percent } => write!(
                f,
                "uneven shards: {}.{}% of each rank's sharded parameters is padding (dim 0 is split into equal chunks)",
                tenths_of_percent / 10,
                tenths_of_percent % 10
            ),
            Warning::Fp8Checkpoint => f.write_str(
                "the checkpoint is fp8 with block scales; the estimate takes the weights dequantised to the training precision (loaded in bf16 with FineGrainedFP8Config(dequantize=True); fp32 under mixed precision), not fp8 weights",
            ),
        }
    }
}

impl Serialize for Warning {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The caveats of estimating `setup` on `spec`.
pub(crate) fn warnings(spec: &ModelSpec, setup: &TrainSetup) -> Vec<Warning> {
    let mut w = Vec::new();
    if setup.precision == Precision::Fp16Mixed {
        w.push(Warning::Fp16NeedsGradScaler);
    }
    if setup.attention == Attention::Flash && setup.precision == Precision::Fp32 {
        w.push(Warning::FlashNeeds16Bit);
    }
    if setup.attention == Attention::Sdpa && spec.attn_softcap.is_some() {
        w.push(Warning::SoftcapForcesMathSdpa);
    }
    if let Some(sw) = spec.sliding_window
        && setup.attention == Attention::Sdpa
        && setup.seq_len >= sw.window
    {
        w.push(Warning::SlidingWindowSdpa { window: sw.window });
    }
    if let Positions::Learned { max_positions, .. } = spec.positions
        && setup.seq_len > max_positions
    {
        w.push(Warning::SequenceBeyondPositions { seq_len: setup.seq_len, max_positions });
    }
    let bnb = matches!(
        setup.optimizer,
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw
    );
    if bnb && setup.optimizer_state_dtype.is_some() {
        w.push(Warning::StateDtypeIgnored { optimizer: setup.optimizer });
    }
    if setup.optimizer.paged() {
        w.push(Warning::PagedStateOutsideAllocator { optimizer: setup.optimizer });
    }
    if setup.quantization.is_some() && setup.precision.is_pure() {
        w.push(Warning::SixteenBitQuantizedBase);
    }
    if setup.precision == Precision::Bf16
        && matches!(setup.optimizer, Optimizer::Adam | Optimizer::Adamw)
        && setup.optimizer_state_dtype.is_none()
        && setup.lora.is_none()
    {
        w.push(Warning::PureBf16AdamState);
    }
    if spec.fp8_checkpoint {
        w.push(Warning::Fp8Checkpoint);
    }
    let p = &setup.parallel;
    if p.ranks() == 1 && p.strategy != crate::parallel::Strategy::None {
        if p.strategy.zero_stage().is_some() {
            if p.offload == crate::parallel::Offload::None {
                w.push(Warning::ZeroOnOneGpu);
            }
        } else {
            w.push(Warning::StrategyOnOneGpu { strategy: p.strategy });
        }
    }
    if p.strategy == crate::parallel::Strategy::Hsdp && p.nodes == 1 && p.ranks() > 1 {
        w.push(Warning::HsdpOnOneNode);
    }
    if let Some(bytes) = merged_experts(spec, setup) {
        w.push(Warning::LoraMergedExperts { bytes });
    }
    if let Ok(Some(tenths)) = crate::parallel::fsdp_padding(spec, &spec.parameter_layout(), setup)
        && tenths >= 50
    {
        w.push(Warning::ShardPadding { tenths_of_percent: tenths });
    }
    w
}

/// The bytes of the expert tensors LoRA wraps in `lora.ParamWrapper` (each merged in full
/// once per forward), if any.
fn merged_experts(spec: &ModelSpec, setup: &TrainSetup) -> Option<crate::units::Bytes> {
    let lora = setup.lora.as_ref()?;
    let layout = spec.parameter_layout();
    layout.peft_moe?;
    let elements = layout
        .iter()
        .filter(|(_, d)| {
            matches!(
                crate::peft::adapter(lora, &layout, d),
                Some(crate::peft::AdapterShape::Parameter { experts: 2.., .. })
            )
        })
        .try_fold(0u64, |a, (_, d)| a.checked_add(d.shape.numel()?))?;
    let bytes = elements.checked_mul(setup.precision.param_dtype().size())?;
    (bytes > 0).then_some(crate::units::Bytes(bytes))
}
