//! The training setup: everything about a step that is not the model.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::parallel::Parallel;
use crate::units::DType;

/// How weights and compute are typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Precision {
    /// fp32 weights, fp32 compute.
    #[serde(rename = "fp32")]
    Fp32,
    /// fp32 weights (master copy) and `torch.autocast(dtype=float16)` (+ GradScaler).
    #[serde(rename = "fp16-mixed")]
    Fp16Mixed,
    /// fp32 weights (master copy) and `torch.autocast(dtype=bfloat16)`.
    #[serde(rename = "bf16-mixed")]
    Bf16Mixed,
    /// Pure bf16: `model.to(torch.bfloat16)`, no fp32 master copy, no autocast.
    #[serde(rename = "bf16")]
    Bf16,
    /// Pure fp16: `model.to(torch.float16)` (`torch_dtype=torch.float16`), no fp32 master copy,
    /// no autocast, no loss scaling (Lightning's `16-true`). Memory as pure bf16's.
    #[serde(rename = "fp16-true")]
    Fp16True,
}

impl Precision {
    /// All variants, in the order the CLI lists them.
    pub const ALL: [Precision; 5] = [
        Precision::Fp32,
        Precision::Fp16Mixed,
        Precision::Bf16Mixed,
        Precision::Bf16,
        Precision::Fp16True,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16Mixed => "fp16-mixed",
            Precision::Bf16Mixed => "bf16-mixed",
            Precision::Bf16 => "bf16",
            Precision::Fp16True => "fp16-true",
        }
    }

    /// The dtype parameters (and so gradients) are stored in.
    pub fn param_dtype(self) -> DType {
        match self {
            Precision::Bf16 => DType::Bf16,
            Precision::Fp16True => DType::F16,
            _ => DType::F32,
        }
    }

    /// The dtype matrix multiplications run in (autocast's lower precision).
    pub fn compute_dtype(self) -> DType {
        match self {
            Precision::Fp32 => DType::F32,
            Precision::Fp16Mixed | Precision::Fp16True => DType::F16,
            Precision::Bf16Mixed | Precision::Bf16 => DType::Bf16,
        }
    }

    /// Whether `torch.autocast` is active.
    pub fn autocast(self) -> bool {
        matches!(self, Precision::Fp16Mixed | Precision::Bf16Mixed)
    }

    /// Whether the weights themselves are 16-bit (pure bf16 or pure fp16): no fp32 master copy,
    /// no autocast.
    pub fn is_pure(self) -> bool {
        matches!(self, Precision::Bf16 | Precision::Fp16True)
    }

    /// Whether the setup needs hardware bf16 support.
    pub fn needs_bf16(self) -> bool {
        matches!(self, Precision::Bf16Mixed | Precision::Bf16)
    }
}

/// The optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// `torch.optim.Adam` (foreach by default).
    Adam,
    /// `torch.optim.AdamW` (foreach by default).
    Adamw,
    /// `torch.optim.SGD` without momentum: no state.
    Sgd,
    /// `torch.optim.SGD(momentum>0)`: one momentum buffer.
    SgdMomentum,
    /// bitsandbytes `AdamW8bit`: two uint8 states + block-wise absmax.
    Adamw8bit,
    /// bitsandbytes `PagedAdamW8bit`: as `AdamW8bit`, state in managed (pageable) memory.
    PagedAdamw8bit,
    /// bitsandbytes `PagedAdamW` (32-bit): two fp32 states, in managed (pageable) memory.
    PagedAdamw,
    /// `torch.optim.Adafactor`: factored second moment, no first moment.
    Adafactor,
    /// Lion: one momentum buffer.
    Lion,
    /// No optimizer: forward and backward only, as a benchmark's loop does
    /// (`model.zero_grad(); model(**batch).logits.sum().backward()`): no state, no step; the
    /// gradients live until `zero_grad` as with any optimizer.
    None,
}

impl Optimizer {
    /// All variants, in the order the CLI lists them.
    pub const ALL: [Optimizer; 10] = [
        Optimizer::Adam,
        Optimizer::Adamw,
        Optimizer::Sgd,
        Optimizer::SgdMomentum,
        Optimizer::Adamw8bit,
        Optimizer::PagedAdamw8bit,
        Optimizer::PagedAdamw,
        Optimizer::Adafactor,
        Optimizer::Lion,
        Optimizer::None,
    ];

    /// Whether bitsandbytes keeps its larger state buffers in CUDA managed memory, outside
    /// the caching allocator's count.
    pub fn paged(self) -> bool {
        matches!(self, Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw)
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Adam => "adam",
            Optimizer::Adamw => "adamw",
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Adamw8bit => "adamw-8bit",
            Optimizer::PagedAdamw8bit => "paged-adamw-8bit",
            Optimizer::PagedAdamw => "paged-adamw",
            Optimizer::Adafactor => "adafactor",
            Optimizer::Lion => "lion",
            Optimizer::None => "none",
        }
    }
}

/// Which attention kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// HF eager attention: materialises the s×s scores and probabilities.
    Eager,
    /// `torch.nn.functional.scaled_dot_product_attention` with PyTorch's backend choice.
    Sdpa,
    /// FlashAttention (HF `flash_attention_2` or the SDPA flash backend).
    Flash,
}

impl Attention {
    /// All variants.
    pub const ALL: [Attention; 3] = [Attention::Eager, Attention::Sdpa, Attention::Flash];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Attention::Eager => "eager",
            Attention::Sdpa => "sdpa",
            Attention::Flash => "flash",
        }
    }
}

/// Activation checkpointing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checkpointing {
    /// Keep every activation autograd saves.
    None,
    /// Per decoder layer, non-reentrant (`gradient_checkpointing_enable()`).
    Full,
    /// Every n-th decoder layer (layers 0, n, 2n, ...), the rest keep their activations:
    /// transformers' `activation_checkpointing_enable(every_n_layers=n)` (n ≥ 2; 1 is
    /// [`Checkpointing::Full`]).
    Every(u64),
}

impl Checkpointing {
    /// The modes without a parameter, in the order the CLI lists them (`every-N` takes N).
    pub const ALL: [Checkpointing; 2] = [Checkpointing::None, Checkpointing::Full];

    /// The mode's name (`every` for every n-th layer; `Display` writes `every-N`).
    pub fn name(self) -> &'static str {
        match self {
            Checkpointing::None => "none",
            Checkpointing::Full => "full",
            Checkpointing::Every(_) => "every",
        }
    }

    /// Whether decoder layer `layer` (0-based) is checkpointed, as transformers decides:
    /// `layer_index % every_n_layers == 0`.
    pub fn checkpoints_layer(self, layer: u64) -> bool {
        match self {
            Checkpointing::None => false,
            Checkpointing::Full => true,
            Checkpointing::Every(n) => n > 0 && layer.is_multiple_of(n),
        }
    }

    /// How many of `layers` layers are checkpointed.
    pub fn checkpointed_layers(self, layers: u64) -> u64 {
        match self {
            Checkpointing::None => 0,
            Checkpointing::Full => layers,
            Checkpointing::Every(0) => 0,
            Checkpointing::Every(n) => layers.div_ceil(n),
        }
    }
}

impl FromStr for Checkpointing {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        let lower = s.trim().to_ascii_lowercase();
        let every = lower
            .strip_prefix("every-")
            .or_else(|| lower.strip_prefix("every:"))
            .or_else(|| lower.strip_prefix("every_"))
            .and_then(|n| n.parse::<u64>().ok());
        match (lower.as_str(), every) {
            (_, Some(1)) | ("full" | "on" | "true" | "yes", _) => Ok(Checkpointing::Full),
            (_, Some(n)) if n >= 2 => Ok(Checkpointing::Every(n)),
            ("none" | "off" | "no" | "false", _) => Ok(Checkpointing::None),
            _ => Err(UnknownName {
                kind: "checkpointing",
                given: s.to_string(),
                expected: "none, full, every-N (N ≥ 2: every N-th layer)".to_string(),
            }),
        }
    }
}

impl fmt::Display for Checkpointing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checkpointing::Every(n) => write!(f, "every-{n}"),
            other => f.write_str(other.name()),
        }
    }
}

impl Serialize for Checkpointing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Checkpointing {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// `split(size)` of `len` items: the lengths of the pieces.
fn slices(len: u64, size: u64) -> Vec<u64> {
    (0..len.div_ceil(size)).map(|i| size.min(len - i * size)).collect()
}

/// torchtune's `num_output_chunks` (its `TransformerDecoder` and `CEWithChunkedOutputLoss`).
pub const TORCHTUNE_OUTPUT_CHUNKS: u64 = 8;
/// LitGPT's `lm_head_chunk_size` in its fine-tuning scripts.
pub const LITGPT_LM_HEAD_CHUNK: u64 = 128;

/// How the loss is computed from the last hidden states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossKernel {
    /// The output layer makes the whole `tokens × vocabulary` logits, then cross-entropy
    /// (transformers' `ForCausalLMLoss`: the logits upcast to fp32).
    #[default]
    Standard,
    /// A fused, chunked linear + cross-entropy that never makes the whole logits: Liger
    /// Kernel's `LigerFusedLinearCrossEntropyFunction` (what the HF Trainer's
    /// `use_liger_kernel` installs), which computes the gradients of the hidden states and
    /// of the output layer during the forward, chunk by chunk over the tokens.
    Chunked,
    /// torchtune's `CEWithChunkedOutputLoss` with its model's chunked output
    /// (`TransformerDecoder.chunked_output`, `num_output_chunks` 8): the output layer is
    /// applied to each of 8 slices of the sequence (`chunk`), so every logit is still
    /// made (as a list of chunks, which the recipe drops after the loss); each chunk is upcast
    /// to fp32 (`.float()`) and its cross-entropy computed on its own, so only one chunk's fp32
    /// copy exists at a time. The fp32 log-probabilities of every chunk are saved for backward.
    #[serde(rename = "chunked-output")]
    ChunkedOutput,
    /// LitGPT's `chunked_cross_entropy` with `lm_head_chunk_size=128`: the output layer is
    /// applied to 128-token slices of the sequence (`split`), and cross-entropy runs on each
    /// chunk in the logits' own dtype (no upcast; autocast runs it in fp32).
    #[serde(rename = "chunked-output-litgpt")]
    ChunkedOutputLitgpt,
    /// `model(**batch).logits.sum()`: the whole logits in their own dtype, summed, no
    /// cross-entropy (the transformers SDPA docs' training benchmarks). Nothing is saved for
    /// backward; the gradient reaches the output layer as an expanded (stride-0) view, which
    /// its GEMMs copy to a whole contiguous gradient of the logits.
    #[serde(rename = "logits-sum")]
    LogitsSum,
}

impl LossKernel {
    /// All variants.
    pub const ALL: [LossKernel; 5] = [
        LossKernel::Standard,
        LossKernel::Chunked,
        LossKernel::ChunkedOutput,
        LossKernel::ChunkedOutputLitgpt,
        LossKernel::LogitsSum,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            LossKernel::Standard => "standard",
            LossKernel::Chunked => "chunked",
            LossKernel::ChunkedOutput => "chunked-output",
            LossKernel::ChunkedOutputLitgpt => "chunked-output-litgpt",
            LossKernel::LogitsSum => "logits-sum",
        }
    }

    /// The lengths of the sequence slices the output layer is applied to, for a chunked-output
    /// loss (`None`: the whole sequence at once, or no logits at all).
    pub fn output_chunks(self, seq_len: u64) -> Option<Vec<u64>> {
        match self {
            LossKernel::Standard | LossKernel::Chunked | LossKernel::LogitsSum => None,
            // `chunk(8, dim=1)`: slices of `ceil(seq_len / 8)`, the last one shorter (and
            // fewer than 8 of them when that rounding leaves nothing over).
            LossKernel::ChunkedOutput => {
                Some(slices(seq_len, seq_len.div_ceil(TORCHTUNE_OUTPUT_CHUNKS).max(1)))
            }
            // `split(128, dim=1)`: 128-token slices, the last one shorter.
            LossKernel::ChunkedOutputLitgpt => Some(slices(seq_len, LITGPT_LM_HEAD_CHUNK)),
        }
    }

    #[allow(
        clippy::trivially_copy_pass_by_ref,
        reason = "serde's skip_serializing_if takes a reference"
    )]
    fn is_standard(&self) -> bool {
        *self == LossKernel::Standard
    }
}

/// One training step's setup. Build it with [`TrainSetup::default`] and struct update syntax.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TrainSetup {
    /// Sequences per micro-batch.
    pub micro_batch: u64,
    /// Tokens per sequence.
    pub seq_len: u64,
    /// Weight and compute precision.
    pub precision: Precision,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// Dtype of the optimizer state; `None` = what PyTorch does (the parameter's dtype;
    /// 8-bit optimizers: uint8).
    pub optimizer_state_dtype: Option<DType>,
    /// Attention kernel.
    pub attention: Attention,
    /// Activation checkpointing.
    pub checkpointing: Checkpointing,
    /// Micro-batches per optimizer step (gradients persist across them).
    pub grad_accum: u64,
    /// How `torch.optim` runs the step (foreach, the CUDA default, unless told otherwise).
    #[serde(default)]
    pub optimizer_impl: OptimizerImpl,
    /// Parts frozen in full fine-tuning (`requires_grad_(False)`).
    #[serde(default, skip_serializing_if = "Freeze::is_none")]
    pub freeze: Freeze,
    /// LoRA adapters on a frozen base (PEFT's `get_peft_model`); `None` trains every parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<Lora>,
    /// A base quantised by bitsandbytes: QLoRA. Needs [`TrainSetup::lora`]. With mixed
    /// precision or fp32 the other parameters are fp32, as `prepare_model_for_kbit_training`
    /// leaves them; with pure 16-bit precision they stay 16-bit (no such call, as LitGPT's
    /// bitsandbytes precision runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<Quantization>,
    /// What the training loop keeps of the model's output between steps.
    #[serde(default)]
    pub training_loop: TrainingLoop,
    /// How `optimizer.zero_grad()` clears the gradients.
    #[serde(default)]
    pub zero_grad: ZeroGrad,
    /// The KV cache transformers builds in training (`config.use_cache`); `None` takes the
    /// config's value, as a script that leaves `model.config.use_cache` alone does.
    #[serde(default)]
    pub use_cache: Option<bool>,
    /// How the loss is computed (a fused, chunked cross-entropy never makes the logits).
    #[serde(default, skip_serializing_if = "LossKernel::is_standard")]
    pub loss: LossKernel,
    /// The GPUs and how the data-parallel ranks share the model (default: one GPU).
    #[serde(default, skip_serializing_if = "Parallel::is_single")]
    pub parallel: Parallel,
    /// An encoder-decoder's target length (`--target-len`: the labels' and the decoder's
    /// tokens); `None` is the source length, `seq_len`. Only encoder-decoder models take one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_len: Option<u64>,
}

/// What the training loop keeps of the model's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrainingLoop {
    /// Only the loss survives the forward: the HF Trainer, Lightning, TRL, torchtune.
    Trainer,
    /// `outputs = model(**batch)` is held until the next forward's assignment replaces it,
    /// with the logits and the KV cache it holds (the HF course's and accelerate's loops).
    /// The default: it never predicts less than the trainer loop, so a verdict for it holds
    /// for both.
    #[default]
    Custom,
}

impl TrainingLoop {
    /// All variants.
    pub const ALL: [TrainingLoop; 2] = [TrainingLoop::Trainer, TrainingLoop::Custom];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            TrainingLoop::Trainer => "trainer",
            TrainingLoop::Custom => "custom",
        }
    }
}

/// `optimizer.zero_grad(set_to_none=...)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZeroGrad {
    /// `set_to_none=True` (PyTorch's default since 2.0): the gradients are freed and the next
    /// backward creates them again.
    #[default]
    #[serde(rename = "none")]
    SetToNone,
    /// `set_to_none=False`: every `.grad` stays allocated, zeroed in place, through the next
    /// forward; backward adds into it.
    Zeros,
}

impl ZeroGrad {
    /// All variants.
    pub const ALL: [ZeroGrad; 2] = [ZeroGrad::SetToNone, ZeroGrad::Zeros];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ZeroGrad::SetToNone => "none",
            ZeroGrad::Zeros => "zeros",
        }
    }
}

impl TrainSetup {
    /// The decoder's tokens per sequence of an encoder-decoder: `--target-len`, else the
    /// source length.
    pub fn target_len(&self) -> u64 {
        self.target_len.unwrap_or(self.seq_len)
    }

    /// Whether transformers builds a KV cache in this step: `use_cache` (this setup's, else the
    /// config's) on a decoder, without gradient checkpointing, which turns it off.
    pub fn kv_cache(&self, spec: &crate::model::ModelSpec) -> bool {
        spec.use_cache.is_some_and(|config| self.use_cache.unwrap_or(config))
            && self.checkpointing == Checkpointing::None
    }
}

/// Parameters frozen in full fine-tuning: they get no gradient and no optimizer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Freeze {
    /// The embedding tables (and a head tied to them).
    pub embeddings: bool,
    /// The first this-many layers.
    pub first_layers: u64,
}

impl Freeze {
    /// Whether anything is frozen.
    pub fn any(self) -> bool {
        self.embeddings || self.first_layers > 0
    }

    fn is_none(&self) -> bool {
        !self.any()
    }
}

/// A `peft.LoraConfig`, as far as memory is concerned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lora {
    /// `r`: the adapters' inner dimension.
    pub rank: u64,
    /// `lora_alpha` (scales the update; no memory effect).
    pub alpha: u64,
    /// `target_modules`.
    pub targets: LoraTargets,
    /// `lora_dropout > 0`: the adapter's input is a dropped copy of the layer's input (only
    /// whether it is positive matters for memory).
    pub dropout: bool,
    /// `modules_to_save`: modules trained in full, as a copy beside the frozen original.
    pub modules_to_save: Vec<String>,
    /// `use_dora`: DoRA (a trained magnitude per output row; the weight's norm is computed
    /// in every forward).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_dora: bool,
}

/// bitsandbytes' storage of a quantised linear weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantType {
    /// 4-bit NormalFloat (`Linear4bit`, `quant_type="nf4"`).
    Nf4,
    /// 4-bit float (`Linear4bit`, `quant_type="fp4"`).
    Fp4,
    /// LLM.int8 (`Linear8bitLt`: int8 weight and fp32 row scales).
    Int8,
}

impl QuantType {
    /// All variants.
    pub const ALL: [QuantType; 3] = [QuantType::Nf4, QuantType::Fp4, QuantType::Int8];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Nf4 => "nf4",
            QuantType::Fp4 => "fp4",
            QuantType::Int8 => "int8",
        }
    }

    /// Whether it is a 4-bit type (`Params4bit`).
    pub fn four_bit(self) -> bool {
        !matches!(self, QuantType::Int8)
    }
}

/// A `transformers.BitsAndBytesConfig` and `peft.prepare_model_for_kbit_training`, as far as
/// memory is concerned: every `nn.Linear` but the output layer and the skipped modules is
/// quantised, every other floating-point parameter is upcast to fp32 (kept in 16 bits under
/// pure 16-bit precision, where no such call is modelled), the base is frozen.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Quantization {
    /// `load_in_4bit` with `bnb_4bit_quant_type`, or `load_in_8bit`.
    pub kind: QuantType,
    /// `bnb_4bit_use_double_quant`: the absmax of each block of 64 stored in 8 bits with a
    /// second-level fp32 absmax per 256 blocks (4-bit types only).
    pub double_quant: bool,
    /// `bnb_4bit_compute_dtype`: the dtype a 4-bit linear dequantises its weight to and
    /// multiplies in (also the dtype the model is loaded in before quantisation).
    pub compute_dtype: DType,
    /// `llm_int8_skip_modules`: modules left unquantised (the output layer always is).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_modules: Vec<String>,
}

/// Which linear layers get an adapter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoraTargets {
    /// PEFT's default for the architecture when `target_modules` is not given: the query and
    /// value projections (the fused qkv projection where q, k and v are one linear).
    PeftDefault,
    /// `"all-linear"`: every `nn.Linear` but the output layer.
    AllLinear,
    /// Module names, matched as PEFT does (the name, or a suffix after a dot).
    Modules(Vec<String>),
}

/// The implementation `torch.optim` runs `step()` with; it decides the step's temporaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerImpl {
    /// `foreach=True` (default on CUDA): whole lists of temporaries at once (Adam: one
    /// `exp_avg_sq.sqrt()` per parameter).
    #[default]
    Foreach,
    /// `foreach=False` (single-tensor loop, the CPU default): temporaries one parameter at a time.
    ForLoop,
    /// `fused=True`: one kernel per group, no temporaries.
    Fused,
}

impl OptimizerImpl {
    /// All variants.
    pub const ALL: [OptimizerImpl; 3] =
        [OptimizerImpl::Foreach, OptimizerImpl::ForLoop, OptimizerImpl::Fused];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerImpl::Foreach => "foreach",
            OptimizerImpl::ForLoop => "for-loop",
            OptimizerImpl::Fused => "fused",
        }
    }
}

impl Default for TrainSetup {
    fn default() -> Self {
        TrainSetup {
            micro_batch: 1,
            seq_len: 512,
            precision: Precision::Bf16Mixed,
            optimizer: Optimizer::Adamw,
            optimizer_state_dtype: None,
            attention: Attention::Sdpa,
            checkpointing: Checkpointing::None,
            grad_accum: 1,
            optimizer_impl: OptimizerImpl::Foreach,
            freeze: Freeze::default(),
            lora: None,
            quantization: None,
            training_loop: TrainingLoop::Custom,
            zero_grad: ZeroGrad::SetToNone,
            use_cache: None,
            loss: LossKernel::Standard,
            parallel: Parallel::default(),
            target_len: None,
        }
    }
}

/// A name on the command line that matches no variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} '{given}' (expected one of: {expected})")]
pub struct UnknownName {
    /// What was being parsed (`precision`, `optimizer`, ...).
    pub kind: &'static str,
    /// What the user wrote.
    pub given: String,
    /// The accepted names, comma separated.
    pub expected: String,
}

macro_rules! named_enum {
    ($ty:ty, $kind:literal, $($alias:literal => $variant:expr),* $(,)?) => {
        impl FromStr for $ty {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                let lower = s.trim().to_ascii_lowercase();
                if let Some(v) = <$ty>::ALL.iter().find(|v| v.name() == lower) {
                    return Ok(*v);
                }
                match lower.as_str() {
                    $($alias => Ok($variant),)*
                    _ => Err(UnknownName {
                        kind: $kind,
                        given: s.to_string(),
                        expected: <$ty>::ALL.iter().map(|v| v.name()).collect::<Vec<_>>().join(", "),
                    }),
                }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum!(Precision, "precision",
    "32" => Precision::Fp32, "32-true" => Precision::Fp32, "float32" => Precision::Fp32,
    "16-mixed" => Precision::Fp16Mixed, "fp16" => Precision::Fp16Mixed, "amp" => Precision::Fp16Mixed,
    "bf16-true" => Precision::Bf16, "bfloat16" => Precision::Bf16,
    "16-true" => Precision::Fp16True, "float16" => Precision::Fp16True, "half" => Precision::Fp16True,
);
named_enum!(Optimizer, "optimizer",
    "adam8bit" => Optimizer::Adamw8bit, "adamw8bit" => Optimizer::Adamw8bit,
    "adam-8bit" => Optimizer::Adamw8bit, "adamw_bnb_8bit" => Optimizer::Adamw8bit,
    "paged_adamw_8bit" => Optimizer::PagedAdamw8bit, "pagedadamw8bit" => Optimizer::PagedAdamw8bit,
    "paged_adamw_32bit" => Optimizer::PagedAdamw, "pagedadamw" => Optimizer::PagedAdamw,
    "sgd_momentum" => Optimizer::SgdMomentum, "momentum" => Optimizer::SgdMomentum,
    "adamw_torch" => Optimizer::Adamw, "no" => Optimizer::None, "no-optimizer" => Optimizer::None,
);
named_enum!(QuantType, "quantization",
    "4bit" => QuantType::Nf4, "bnb-4bit" => QuantType::Nf4, "8bit" => QuantType::Int8,
    "llm.int8" => QuantType::Int8, "llm-int8" => QuantType::Int8,
);
named_enum!(Attention, "attention",
    "flash_attention_2" => Attention::Flash, "flash-attention" => Attention::Flash,
    "flash_attention" => Attention::Flash,
);
named_enum!(OptimizerImpl, "optimizer implementation",
    "forloop" => OptimizerImpl::ForLoop, "for_loop" => OptimizerImpl::ForLoop,
    "single-tensor" => OptimizerImpl::ForLoop,
);
named_enum!(TrainingLoop, "training loop",
    "hf-trainer" => TrainingLoop::Trainer, "lightning" => TrainingLoop::Trainer,
    "outputs" => TrainingLoop::Custom,
);
named_enum!(ZeroGrad, "zero-grad mode",
    "set-to-none" => ZeroGrad::SetToNone, "set_to_none" => ZeroGrad::SetToNone,
    "true" => ZeroGrad::SetToNone, "zero" => ZeroGrad::Zeros, "false" => ZeroGrad::Zeros,
);
named_enum!(LossKernel, "loss",
    "fused" => LossKernel::Chunked, "liger" => LossKernel::Chunked, "flce" => LossKernel::Chunked,
    "cce" => LossKernel::Chunked, "cross-entropy" => LossKernel::Standard,
    "torchtune" => LossKernel::ChunkedOutput, "litgpt" => LossKernel::ChunkedOutputLitgpt,
    "sum" => LossKernel::LogitsSum,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>(), Ok(p));
        }
        for o in Optimizer::ALL {
            assert_eq!(o.name().parse::<Optimizer>(), Ok(o));
        }
        for a in Attention::ALL {
            assert_eq!(a.name().parse::<Attention>(), Ok(a));
        }
        for c in Checkpointing::ALL {
            assert_eq!(c.name().parse::<Checkpointing>(), Ok(c));
        }
        for l in TrainingLoop::ALL {
            assert_eq!(l.name().parse::<TrainingLoop>(), Ok(l));
        }
        for z in ZeroGrad::ALL {
            assert_eq!(z.name().parse::<ZeroGrad>(), Ok(z));
        }
        for l in LossKernel::ALL {
            assert_eq!(l.name().parse::<LossKernel>(), Ok(l));
        }
    }

    #[test]
    fn every_nth_layer_checkpointing_is_spelled_and_counted_as_transformers_does() {
        assert_eq!("every-2".parse::<Checkpointing>(), Ok(Checkpointing::Every(2)));
        assert_eq!("every:4".parse::<Checkpointing>(), Ok(Checkpointing::Every(4)));
        assert_eq!("every-1".parse::<Checkpointing>(), Ok(Checkpointing::Full));
        assert!("every-0".parse::<Checkpointing>().is_err());
        assert!("every".parse::<Checkpointing>().is_err());
        assert_eq!(Checkpointing::Every(3).to_string(), "every-3");
        assert_eq!(serde_json::to_string(&Checkpointing::Every(3)).unwrap(), "\"every-3\"");
        let back: Checkpointing = serde_json::from_str("\"every-3\"").unwrap();
        assert_eq!(back, Checkpointing::Every(3));
        // Layers 0, 2, 4, ... of 5: three of them.
        let every2 = Checkpointing::Every(2);
        assert_eq!((0..5).filter(|&l| every2.checkpoints_layer(l)).count(), 3);
        assert_eq!(every2.checkpointed_layers(5), 3);
        assert_eq!(Checkpointing::Full.checkpointed_layers(5), 5);
    }

    #[test]
    fn unknown_names_list_the_choices() {
        let err = "adamq".parse::<Optimizer>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown optimizer 'adamq' (expected one of: adam, adamw, sgd, sgd-momentum, \
             adamw-8bit, paged-adamw-8bit, paged-adamw, adafactor, lion, none)"
        );
    }

    #[test]
    fn lightning_spellings_are_accepted() {
        assert_eq!("16-mixed".parse::<Precision>(), Ok(Precision::Fp16Mixed));
        assert_eq!("bf16-mixed".parse::<Precision>(), Ok(Precision::Bf16Mixed));
        assert_eq!("bf16-true".parse::<Precision>(), Ok(Precision::Bf16));
        assert_eq!("16-true".parse::<Precision>(), Ok(Precision::Fp16True));
        // The HF Trainer's `fp16=True` is mixed precision; pure fp16 is spelled out.
        assert_eq!("fp16".parse::<Precision>(), Ok(Precision::Fp16Mixed));
    }
}
