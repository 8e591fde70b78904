//! The search space: one table of levers, each with the settings it can take for a run.
//!
//! A [`Lever`] is one thing a user can change about a run (the precision, the optimizer, ...);
//! a [`Setting`] is one value of it. [`Lever::settings`] lists what a lever offers for this
//! run and this GPU, the user's own setting first; [`Setting::apply`] writes a setting into a
//! [`Config`]. Adding a lever (as ZeRO and FSDP sharding, CPU offload and QLoRA were) is a
//! variant here, an arm in each `match` the compiler points to, and its cost in `cost.rs`.
//!
//! Sharding and CPU offload are one lever ([`Lever::Sharding`]): which offloads a strategy can
//! take depends on the strategy (DeepSpeed offloads the optimizer from stage 1, parameters
//! only at stage 3; FSDP offloads parameters with their optimizer), so its settings are the
//! pairs that run.

use std::fmt;

use serde::Serialize;

use crate::allocator::AllocConf;
use crate::model::ModelSpec;
use crate::parallel::{Offload, Strategy};
use crate::setup::{
    Attention, Checkpointing, Lora, LoraTargets, LossKernel, Optimizer, OptimizerImpl, Precision,
    QuantType, Quantization, TrainSetup,
};
use crate::units::DType;

/// What the GPU can run, as far as the levers care (from the catalog; a bare capacity is
/// taken as a card that runs everything).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuFacts {
    /// How to name the card.
    pub label: String,
    /// Hardware bf16 (compute capability 8.0 or newer).
    pub bf16: bool,
    /// FlashAttention runs.
    pub flash_attention: bool,
    /// Dense peak TFLOPS, fp32 and 16-bit tensor, where the catalog has them.
    pub tflops: Option<(f64, f64)>,
    /// One-way NVLink bandwidth per GPU in GB/s, on boards that have it.
    pub nvlink_gbps: Option<f64>,
    /// bitsandbytes' 4-bit layers run: an NVIDIA (CUDA) card, the platform QLoRA is built
    /// and tested on (a bare capacity is taken as one).
    pub bitsandbytes: bool,
}

impl GpuFacts {
    /// What a catalog card (or a bare capacity) can run.
    pub fn of(choice: &crate::gpu::GpuChoice) -> GpuFacts {
        match choice {
            crate::gpu::GpuChoice::Known(g) => GpuFacts {
                label: g.name.clone(),
                bf16: g.bf16,
                flash_attention: g.supports_flash_attention(),
                tflops: g.tflops.as_ref().map(|t| (t.fp32, t.tensor16)),
                nvlink_gbps: g.nvlink_gbps.map(f64::from),
                bitsandbytes: g.vendor == "nvidia",
            },
            crate::gpu::GpuChoice::Capacity(_) => GpuFacts {
                label: choice.label(),
                bf16: true,
                flash_attention: true,
                tflops: None,
                nvlink_gbps: None,
                bitsandbytes: true,
            },
        }
    }
}

/// One thing about a run that a plan may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lever {
    /// Micro-batch size, with accumulation steps keeping the global batch.
    MicroBatch,
    /// fp32 → bf16-mixed (or fp16-mixed with a GradScaler where the GPU has no bf16).
    Precision,
    /// AdamW → fused, 8-bit, paged 8-bit, Adafactor.
    Optimizer,
    /// Eager → SDPA / FlashAttention.
    Attention,
    /// None → every n-th layer → every layer.
    Checkpointing,
    /// The whole logits → a fused, chunked cross-entropy.
    Loss,
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    Allocator,
    /// ZeRO 1/2/3, FSDP or HSDP with several GPUs, and CPU offload of the optimizer or the
    /// parameters (ZeRO-Offload also on one GPU).
    Sharding,
    /// LoRA adapters on a frozen base, or QLoRA (the same adapters on a 4-bit NF4 base):
    /// changes the training method, so only when allowed.
    Lora,
}

impl Lever {
    /// Every lever, in the order plans list their changes.
    pub const ALL: [Lever; 9] = [
        Lever::MicroBatch,
        Lever::Precision,
        Lever::Optimizer,
        Lever::Attention,
        Lever::Checkpointing,
        Lever::Loss,
        Lever::Allocator,
        Lever::Sharding,
        Lever::Lora,
    ];

    /// The name used by `--keep`, `--forbid`, `--allow` and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Lever::MicroBatch => "micro-batch",
            Lever::Precision => "precision",
            Lever::Optimizer => "optimizer",
            Lever::Attention => "attention",
            Lever::Checkpointing => "checkpointing",
            Lever::Loss => "loss",
            Lever::Allocator => "allocator",
            Lever::Sharding => "sharding",
            Lever::Lora => "lora",
        }
    }

    /// A lever that changes what is trained, searched only when the user allows it.
    pub fn opt_in(self) -> bool {
        matches!(self, Lever::Lora)
    }

    /// Parses a lever's name.
    pub fn parse(text: &str) -> Option<Lever> {
        let text = text.trim().to_ascii_lowercase().replace('_', "-");
        let text = match text.as_str() {
            "batch" | "micro-batch-size" | "accumulation" | "grad-accum" => "micro-batch",
            "optim" => "optimizer",
            "ckpt" | "gradient-checkpointing" | "activation-checkpointing" => "checkpointing",
            "cross-entropy" => "loss",
            "alloc-conf" | "expandable-segments-lever" => "allocator",
            "strategy" | "zero" | "fsdp" | "offload" | "parallel" => "sharding",
            other => other,
        }
        .to_string();
        Lever::ALL.into_iter().find(|l| l.name() == text)
    }

    /// What this lever offers for `cx`'s run: the user's own setting first, then every
    /// alternative the GPU can run (constraints are applied by the caller).
    pub fn settings(self, cx: &LeverContext<'_>) -> Vec<Setting> {
        let user = cx.setup;
        match self {
            Lever::MicroBatch => Vec::new(),
            Lever::Precision => {
                let mut v = vec![Setting::Precision(user.precision)];
                let target = if cx.gpu.bf16 { Precision::Bf16Mixed } else { Precision::Fp16Mixed };
                match user.precision {
                    Precision::Fp32 => v.push(Setting::Precision(target)),
                    Precision::Fp16Mixed if cx.gpu.bf16 => {
                        v.push(Setting::Precision(Precision::Bf16Mixed));
                    }
                    // bf16 on a card without it: fp16-mixed is what runs.
                    Precision::Bf16Mixed | Precision::Bf16 if !cx.gpu.bf16 => {
                        v.push(Setting::Precision(Precision::Fp16Mixed));
                    }
                    _ => {}
                }
                v
            }
            Lever::Optimizer => {
                let own = Setting::Optimizer(user.optimizer, user.optimizer_impl);
                let mut v = vec![own];
                let torch_native = matches!(
                    user.optimizer,
                    Optimizer::Adam | Optimizer::Adamw | Optimizer::Sgd | Optimizer::SgdMomentum
                );
                if torch_native && user.optimizer_impl != OptimizerImpl::Fused {
                    v.push(Setting::Optimizer(user.optimizer, OptimizerImpl::Fused));
                }
                if matches!(user.optimizer, Optimizer::Adam | Optimizer::Adamw) {
                    v.push(Setting::Optimizer(Optimizer::Adamw8bit, OptimizerImpl::Foreach));
                    v.push(Setting::Optimizer(Optimizer::PagedAdamw8bit, OptimizerImpl::Foreach));
                    v.push(Setting::Optimizer(Optimizer::Adafactor, OptimizerImpl::Foreach));
                }
                v
            }
            Lever::Attention => {
                let mut v = vec![Setting::Attention(user.attention)];
                if user.attention == Attention::Eager {
                    v.push(Setting::Attention(Attention::Sdpa));
                }
                // On CUDA, SDPA runs the flash kernel for 16-bit inputs: FlashAttention-2 saves
                // nothing more, except where SDPA cannot use it (soft-capped scores, Gemma 2).
                let sdpa_falls_back = cx.spec.attn_softcap.is_some();
                if user.attention != Attention::Flash && cx.gpu.flash_attention && sdpa_falls_back {
                    v.push(Setting::Attention(Attention::Flash));
                }
                v
            }
            Lever::Checkpointing => {
                let mut v = vec![Setting::Checkpointing(user.checkpointing)];
                let more = [
                    Checkpointing::Every(4),
                    Checkpointing::Every(3),
                    Checkpointing::Every(2),
                    Checkpointing::Full,
                ];
                let layers = cx.spec.n_layers;
                let already = user.checkpointing.checkpointed_layers(layers);
                for c in more {
                    // Only what checkpoints more layers than the user does, once per count.
                    let n = c.checkpointed_layers(layers);
                    let seen = v.iter().any(|s| {
                        matches!(s, Setting::Checkpointing(o) if o.checkpointed_layers(layers) == n)
                    });
                    if n > already && !seen {
                        v.push(Setting::Checkpointing(c));
                    }
                }
                v
            }
            Lever::Loss => {
                let mut v = vec![Setting::Loss(user.loss)];
                let patched =
                    LIGER_FUSED_LOSS_MODEL_TYPES.contains(&cx.spec.architecture.model_type());
                if user.loss == LossKernel::Standard && patched {
                    v.push(Setting::Loss(LossKernel::Chunked));
                }
                v
            }
            Lever::Allocator => {
                let mut v = vec![Setting::ExpandableSegments(cx.alloc.expandable_segments)];
                if !cx.alloc.expandable_segments && cx.fragmentation_matters {
                    v.push(Setting::ExpandableSegments(true));
                }
                v
            }
            Lever::Sharding => {
                let p = &user.parallel;
                let mut v = vec![Setting::Sharding(p.strategy, p.offload)];
                let several = p.ranks() > 1;
                let offered: &[(Strategy, Offload)] = if several {
                    &[
                        (Strategy::Zero1, Offload::None),
                        (Strategy::Zero2, Offload::None),
                        (Strategy::Zero3, Offload::None),
                        (Strategy::Fsdp, Offload::None),
                        (Strategy::Hsdp, Offload::None),
                        (Strategy::Zero2, Offload::Optimizer),
                        (Strategy::Zero3, Offload::Optimizer),
                        (Strategy::Zero3, Offload::Both),
                        (Strategy::Fsdp, Offload::Both),
                    ]
                } else {
                    // One GPU: sharding alone saves nothing; ZeRO-Offload and ZeRO-3's
                    // parameter offload do.
                    &[(Strategy::Zero2, Offload::Optimizer), (Strategy::Zero3, Offload::Both)]
                };
                for &(strategy, offload) in offered {
                    // HSDP replicates across nodes: only with several.
                    if strategy == Strategy::Hsdp && p.nodes < 2 {
                        continue;
                    }
                    let s = Setting::Sharding(strategy, offload);
                    if !v.contains(&s) {
                        v.push(s);
                    }
                }
                v
            }
            Lever::Lora => {
                let own = match (&user.lora, &user.quantization) {
                    (Some(l), Some(q)) => Setting::Qlora(l.clone(), q.clone()),
                    (l, _) => Setting::Lora(l.clone()),
                };
                let mut v = vec![own];
                // (DeepSeek: PEFT's all-linear adapts the experts too, which is not modelled.)
                if user.lora.is_none()
                    && crate::peft::default_targets_adapt_experts(&cx.spec.parameter_layout())
                {
                    return v;
                }
                let lora = user.lora.clone().unwrap_or_else(|| default_lora_for(cx.spec));
                if user.lora.is_none() {
                    v.push(Setting::Lora(Some(lora.clone())));
                }
                // QLoRA: the same adapters on a 4-bit base, where bitsandbytes runs.
                if user.quantization.is_none() && cx.gpu.bitsandbytes && !lora.use_dora {
                    v.push(Setting::Qlora(lora, default_qlora(cx.gpu)));
                }
                v
            }
        }
    }
}

/// The architectures whose causal-LM forward Liger Kernel replaces with its fused linear
/// cross-entropy (`MODEL_TYPE_TO_APPLY_LIGER_FN` in `liger_kernel/transformers/monkey_patch.py`):
/// the chunked loss is a lever only where `use_liger_kernel` (or `apply_liger_kernel_to_*`)
/// installs it; elsewhere the HF Trainer would silently keep the full logits.
pub const LIGER_FUSED_LOSS_MODEL_TYPES: &[&str] =
    &["llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3"];

/// The adapters a plan proposes when LoRA is allowed: rank 16 on every linear layer, alpha 32,
/// dropout 0.05 (the QLoRA paper's targets; PEFT's documented starting point for the rest).
pub fn default_lora() -> Lora {
    Lora {
        rank: 16,
        alpha: 32,
        targets: LoraTargets::AllLinear,
        dropout: true,
        modules_to_save: Vec::new(),
        use_dora: false,
    }
}

/// [`default_lora`] as PEFT runs it on `spec`: on a mixture of experts whose experts and
/// router PEFT wraps in `lora.ParamWrapper` (which refuses `lora_dropout`), without dropout.
pub fn default_lora_for(spec: &ModelSpec) -> Lora {
    let wraps_parameters = spec.parameter_layout().peft_moe.is_some();
    Lora { dropout: !wraps_parameters, ..default_lora() }
}

/// The base a QLoRA plan quantises: the QLoRA paper's recipe as `BitsAndBytesConfig` spells
/// it (`load_in_4bit`, `bnb_4bit_quant_type="nf4"`, `bnb_4bit_use_double_quant=True`),
/// computing in bf16, or fp16 where the card has no bf16 (the precision lever's choice; the
/// estimate refuses bf16 compute there).
pub fn default_qlora(gpu: &GpuFacts) -> Quantization {
    Quantization {
        kind: QuantType::Nf4,
        double_quant: true,
        compute_dtype: if gpu.bf16 { DType::Bf16 } else { DType::F16 },
        skip_modules: Vec::new(),
    }
}

impl fmt::Display for Lever {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the levers look at to list their settings.
#[derive(Debug, Clone, Copy)]
pub struct LeverContext<'a> {
    /// The model.
    pub spec: &'a ModelSpec,
    /// The user's setup.
    pub setup: &'a TrainSetup,
    /// The user's allocator settings.
    pub alloc: &'a AllocConf,
    /// The GPU.
    pub gpu: &'a GpuFacts,
    /// Whether the user's run leaves enough reserved-but-unallocated memory for
    /// `expandable_segments` to be worth a change.
    pub fragmentation_matters: bool,
}

/// One value of one lever.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Setting {
    /// A precision.
    Precision(Precision),
    /// An optimizer and how torch runs it.
    Optimizer(Optimizer, OptimizerImpl),
    /// An attention kernel.
    Attention(Attention),
    /// A checkpointing mode.
    Checkpointing(Checkpointing),
    /// A loss kernel.
    Loss(LossKernel),
    /// `expandable_segments` on or off.
    ExpandableSegments(bool),
    /// A strategy for several GPUs and what it offloads to the host.
    Sharding(Strategy, Offload),
    /// LoRA adapters (`None`: every parameter trains) on an unquantised base.
    Lora(Option<Lora>),
    /// QLoRA: LoRA adapters on a base quantised by bitsandbytes.
    Qlora(Lora, Quantization),
}

/// A setup with its allocator settings: what one candidate is, before its micro-batch is
/// chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The training setup (its micro-batch and accumulation are set by the search).
    pub setup: TrainSetup,
    /// `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc: AllocConf,
}

impl Setting {
    /// The lever this is a setting of.
    pub fn lever(&self) -> Lever {
        match self {
            Setting::Precision(_) => Lever::Precision,
            Setting::Optimizer(..) => Lever::Optimizer,
            Setting::Attention(_) => Lever::Attention,
            Setting::Checkpointing(_) => Lever::Checkpointing,
            Setting::Loss(_) => Lever::Loss,
            Setting::ExpandableSegments(_) => Lever::Allocator,
            Setting::Sharding(..) => Lever::Sharding,
            Setting::Lora(_) | Setting::Qlora(..) => Lever::Lora,
        }
    }

    /// The name `--forbid` takes: the value as the estimate's flags spell it (`bf16-mixed`,
    /// `adamw-8bit`, `fused`, `every-2`, `chunked`, `expandable-segments`, `lora`).
    pub fn name(&self) -> String {
        match self {
            Setting::Precision(p) => p.name().to_string(),
            Setting::Optimizer(o, OptimizerImpl::Fused) if is_torch_native(*o) => "fused".into(),
            Setting::Optimizer(o, _) => o.name().to_string(),
            Setting::Attention(a) => a.name().to_string(),
            Setting::Checkpointing(c) => c.to_string(),
            Setting::Loss(l) => l.name().to_string(),
            Setting::ExpandableSegments(true) => "expandable-segments".into(),
            Setting::ExpandableSegments(false) => "default-allocator".into(),
            Setting::Sharding(strategy, Offload::None) => strategy.name().into(),
            Setting::Sharding(strategy, offload) => {
                format!("{}+offload-{}", strategy.name(), offload.name())
            }
            Setting::Lora(Some(_)) => "lora".into(),
            Setting::Lora(None) => "full-fine-tuning".into(),
            Setting::Qlora(..) => "qlora".into(),
        }
    }

    /// How the setting reads in a plan (`bf16-mixed`, `fused adamw`, `LoRA r=16 all-linear`).
    pub fn describe(&self) -> String {
        match self {
            Setting::Optimizer(o, OptimizerImpl::Fused) if is_torch_native(*o) => {
                format!("{} (fused)", o.name())
            }
            Setting::Checkpointing(Checkpointing::Every(n)) => format!("every {n} layers"),
            Setting::Loss(LossKernel::Chunked) => "chunked cross-entropy".into(),
            Setting::Loss(LossKernel::Standard) => "full logits".into(),
            Setting::ExpandableSegments(true) => "expandable_segments:True".into(),
            Setting::ExpandableSegments(false) => "default".into(),
            Setting::Sharding(strategy, offload) => {
                let strategy = match strategy {
                    Strategy::None => "one GPU",
                    Strategy::Ddp => "DDP",
                    Strategy::Zero1 => "ZeRO-1",
                    Strategy::Zero2 => "ZeRO-2",
                    Strategy::Zero3 => "ZeRO-3",
                    Strategy::Fsdp => "FSDP",
                    Strategy::Hsdp => "HSDP",
                };
                match offload {
                    Offload::None => strategy.to_string(),
                    Offload::Optimizer => format!("{strategy} + optimizer offload"),
                    Offload::Params => format!("{strategy} + parameter offload"),
                    Offload::Both => format!("{strategy} + CPU offload"),
                }
            }
            Setting::Lora(Some(l)) => format!("LoRA r={} on {}", l.rank, targets(l)),
            Setting::Qlora(l, q) => format!(
                "QLoRA r={} on {}, {} base{}, {} compute",
                l.rank,
                targets(l),
                q.kind.name().to_ascii_uppercase(),
                if q.double_quant { " double-quantised" } else { "" },
                q.compute_dtype
            ),
            Setting::Lora(None) => "full fine-tuning".into(),
            other => other.name(),
        }
    }

    /// Writes the setting into a config.
    pub fn apply(&self, c: &mut Config) {
        match self {
            Setting::Precision(p) => c.setup.precision = *p,
            Setting::Optimizer(o, i) => {
                if c.setup.optimizer != *o {
                    // A different optimizer keeps its own state dtype.
                    c.setup.optimizer_state_dtype = None;
                }
                c.setup.optimizer = *o;
                c.setup.optimizer_impl = *i;
            }
            Setting::Attention(a) => c.setup.attention = *a,
            Setting::Checkpointing(k) => c.setup.checkpointing = *k,
            Setting::Loss(l) => c.setup.loss = *l,
            Setting::ExpandableSegments(e) => c.alloc.expandable_segments = *e,
            Setting::Sharding(strategy, offload) => {
                c.setup.parallel.strategy = *strategy;
                c.setup.parallel.offload = *offload;
                if !strategy.is_fsdp() {
                    c.setup.parallel.reshard_after_forward = true;
                }
            }
            Setting::Lora(l) => {
                c.setup.lora.clone_from(l);
                c.setup.quantization = None;
                if l.is_some() {
                    c.setup.freeze = crate::setup::Freeze::default();
                }
            }
            Setting::Qlora(l, q) => {
                c.setup.lora = Some(l.clone());
                c.setup.quantization = Some(q.clone());
                c.setup.freeze = crate::setup::Freeze::default();
            }
        }
    }

    /// Whether the GPU runs this setting: bf16 needs hardware bf16, FlashAttention compute
    /// capability 8.0.
    pub fn runs_on(&self, gpu: &GpuFacts) -> bool {
        match self {
            Setting::Precision(p) => gpu.bf16 || !p.needs_bf16(),
            Setting::Attention(Attention::Flash) => gpu.flash_attention,
            // bitsandbytes' 4-bit layers: CUDA, and bf16 compute only with hardware bf16.
            Setting::Qlora(_, q) => {
                gpu.bitsandbytes && (gpu.bf16 || q.compute_dtype != DType::Bf16)
            }
            _ => true,
        }
    }

    /// This lever's setting in a config.
    pub fn of(lever: Lever, c: &Config) -> Option<Setting> {
        let s = &c.setup;
        Some(match lever {
            Lever::MicroBatch => return None,
            Lever::Precision => Setting::Precision(s.precision),
            Lever::Optimizer => Setting::Optimizer(s.optimizer, s.optimizer_impl),
            Lever::Attention => Setting::Attention(s.attention),
            Lever::Checkpointing => Setting::Checkpointing(s.checkpointing),
            Lever::Loss => Setting::Loss(s.loss),
            Lever::Allocator => Setting::ExpandableSegments(c.alloc.expandable_segments),
            Lever::Sharding => Setting::Sharding(s.parallel.strategy, s.parallel.offload),
            Lever::Lora => match (&s.lora, &s.quantization) {
                (Some(l), Some(q)) => Setting::Qlora(l.clone(), q.clone()),
                (l, _) => Setting::Lora(l.clone()),
            },
        })
    }
}

fn targets(l: &Lora) -> String {
    match &l.targets {
        LoraTargets::PeftDefault => "q,v".to_string(),
        LoraTargets::AllLinear => "all-linear".to_string(),
        LoraTargets::Modules(m) => m.join(","),
    }
}

fn is_torch_native(o: Optimizer) -> bool {
    matches!(o, Optimizer::Adam | Optimizer::Adamw | Optimizer::Sgd | Optimizer::SgdMomentum)
}

/// Whether the settings of a config make sense together: FlashAttention needs 16-bit inputs
/// (with fp32, PyTorch falls back to another kernel, so the plan would not be what it says);
/// the strategy must run with the precision and offload chosen (DeepSpeed takes no pure bf16;
/// see [`crate::parallel`]); an 8-bit or paged optimizer is not DeepSpeed's CPU Adam; and a
/// quantised base runs as the estimate takes it ([`crate::peft::check`]): not under a
/// strategy that shards the parameters or casts the model itself (ZeRO-3 and FSDP do not
/// shard 4-bit weights). Under pure bf16 its other parameters stay bf16 (no
/// `prepare_model_for_kbit_training`, and the emitted code does not call it).
pub fn compatible(c: &Config) -> bool {
    let s = &c.setup;
    let quantized_runs = s.quantization.is_none()
        || !(s.parallel.strategy.shards_parameters() || s.parallel.strategy.owns_mixed_precision());
    quantized_runs
        && !(s.attention == Attention::Flash && s.precision == Precision::Fp32)
        && crate::parallel::check(s).is_ok()
        && !(s.parallel.offload.optimizer()
            && matches!(
                s.optimizer,
                Optimizer::Adamw8bit
                    | Optimizer::PagedAdamw8bit
                    | Optimizer::PagedAdamw
                    | Optimizer::Adafactor
            ))
}

/// Every setting name `--forbid` accepts, with its lever, for this run (the levers' names
/// are accepted too).
pub fn setting_names(cx: &LeverContext<'_>) -> Vec<(String, Lever)> {
    let mut names: Vec<(String, Lever)> = Vec::new();
    for lever in Lever::ALL {
        for s in lever.settings(cx) {
            if !names.iter().any(|(n, _)| *n == s.name()) {
                names.push((s.name(), lever));
            }
        }
    }
    names
}

/// What a change does to the maths of training (beyond memory and speed), said in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MathNote {
    /// Accumulation: the loss is divided by the accumulation steps.
    LossDividedByAccumulation,
    /// Accumulation with LayerNorm / RMSNorm: statistics are per token, so unchanged.
    NormsUnaffectedByAccumulation,
    /// fp16 needs a `GradScaler`: gradients can underflow and overflow.
    Fp16GradScaler,
    /// bf16 autocast: matmuls in bf16, fp32 master weights.
    Bf16Autocast,
    /// 8-bit optimizer states (block-wise quantised moments).
    EightBitStates,
    /// Paged states move to host memory under pressure.
    PagedStates,
    /// Adafactor is another optimizer (factored second moment, no first moment by default).
    AdafactorIsAnotherOptimizer,
    /// Adam → AdamW: decoupled weight decay.
    DecoupledWeightDecay,
    /// LoRA trains adapters only.
    LoraTrainsAdapters,
    /// QLoRA: the frozen base is stored in 4 bits and dequantised in every matmul.
    QloraQuantizedBase,
    /// The chunked loss needs Liger Kernel; the loss is the same up to summation order.
    ChunkedLossSameLoss,
    /// Checkpointing recomputes; the result is the same (dropout's RNG state is restored).
    CheckpointingSameResult,
    /// ZeRO / FSDP partition the states: the same updates, launched by DeepSpeed or FSDP.
    ShardingSameResult,
    /// The optimizer steps on the CPU (DeepSpeed's CPU Adam): the same update, in host memory.
    OffloadSameResult,
}

impl fmt::Display for MathNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MathNote::LossDividedByAccumulation => {
                "gradient accumulation: divide the loss by the accumulation steps (the HF Trainer, Lightning and accelerate do), or gradients are that many times too large"
            }
            MathNote::NormsUnaffectedByAccumulation => {
                "this model normalises with LayerNorm/RMSNorm, whose statistics are per token: accumulation gives the same gradients as one large batch (BatchNorm would normalise per micro-batch)"
            }
            MathNote::Fp16GradScaler => {
                "fp16-mixed: use torch.amp.GradScaler (Lightning and the HF Trainer do with 16-mixed / fp16=True); fp16's range is small, so losses can overflow late in training"
            }
            MathNote::Bf16Autocast => {
                "bf16-mixed: matmuls run in bf16 under autocast while weights, gradients and optimizer state stay fp32; no GradScaler is needed"
            }
            MathNote::EightBitStates => {
                "8-bit AdamW: the two moments are stored block-wise quantised to 8 bits (bitsandbytes); tensors under 4096 elements keep fp32 states"
            }
            MathNote::PagedStates => {
                "paged 8-bit AdamW: large states live in CUDA managed memory and are paged to host memory only when the GPU runs out (then each step pays for the transfer)"
            }
            MathNote::AdafactorIsAnotherOptimizer => {
                "Adafactor is another optimizer (factored second moment, no first moment): retune the learning rate"
            }
            MathNote::DecoupledWeightDecay => {
                "Adam → AdamW (8-bit): weight decay becomes decoupled; with weight_decay=0 the update is the same"
            }
            MathNote::LoraTrainsAdapters => {
                "LoRA trains low-rank adapters on a frozen base: a different training method, with its own learning rate"
            }
            MathNote::QloraQuantizedBase => {
                "QLoRA: the frozen base is stored as 4-bit NF4 (bitsandbytes, CUDA) and dequantised in every matmul, so the forward is an approximation of the 16-bit model's; with mixed precision prepare_model_for_kbit_training upcasts the other parameters to fp32, under pure bf16 they stay bf16 (no such call)"
            }
            MathNote::ChunkedLossSameLoss => {
                "chunked cross-entropy (Liger Kernel's fused linear cross-entropy, pip install liger-kernel): the same loss and gradients up to summation order"
            }
            MathNote::CheckpointingSameResult => {
                "checkpointing recomputes each checkpointed layer's forward in backward: the same gradients (torch.utils.checkpoint restores dropout's RNG state)"
            }
            MathNote::ShardingSameResult => {
                "ZeRO and FSDP partition parameters, gradients and optimizer state over the GPUs: the same updates as DDP; the run is launched with deepspeed or accelerate/torchrun"
            }
            MathNote::OffloadSameResult => {
                "CPU offload: the optimizer steps in host memory (DeepSpeed's CPU Adam, FSDP's CPUOffloadPolicy), the same update; the host RAM it needs is in the plan"
            }
        })
    }
}

impl Serialize for MathNote {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What the changes from `user` to `plan` do to the maths.
pub fn math_notes(user: &Config, plan: &Config) -> Vec<MathNote> {
    let (u, p) = (&user.setup, &plan.setup);
    let mut notes = Vec::new();
    if p.grad_accum > 1 && p.grad_accum != u.grad_accum {
        notes.push(MathNote::LossDividedByAccumulation);
        notes.push(MathNote::NormsUnaffectedByAccumulation);
    }
    if p.precision != u.precision {
        match p.precision {
            Precision::Fp16Mixed => notes.push(MathNote::Fp16GradScaler),
            Precision::Bf16Mixed => notes.push(MathNote::Bf16Autocast),
            Precision::Fp32 | Precision::Bf16 | Precision::Fp16True => {}
        }
    }
    if p.optimizer != u.optimizer {
        match p.optimizer {
            Optimizer::Adamw8bit => notes.push(MathNote::EightBitStates),
            Optimizer::PagedAdamw8bit => {
                notes.push(MathNote::EightBitStates);
                notes.push(MathNote::PagedStates);
            }
            Optimizer::PagedAdamw => notes.push(MathNote::PagedStates),
            Optimizer::Adafactor => notes.push(MathNote::AdafactorIsAnotherOptimizer),
            _ => {}
        }
        if u.optimizer == Optimizer::Adam
            && matches!(p.optimizer, Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit)
        {
            notes.push(MathNote::DecoupledWeightDecay);
        }
    }
    if p.lora.is_some() && u.lora.is_none() {
        notes.push(MathNote::LoraTrainsAdapters);
    }
    if p.quantization.is_some() && u.quantization.is_none() {
        notes.push(MathNote::QloraQuantizedBase);
    }
    if p.loss != u.loss && p.loss == LossKernel::Chunked {
        notes.push(MathNote::ChunkedLossSameLoss);
    }
    if p.checkpointing != u.checkpointing && p.checkpointing != Checkpointing::None {
        notes.push(MathNote::CheckpointingSameResult);
    }
    if p.parallel.strategy != u.parallel.strategy {
        notes.push(MathNote::ShardingSameResult);
    }
    if p.parallel.offload != u.parallel.offload && p.parallel.offload != Offload::None {
        notes.push(MathNote::OffloadSameResult);
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ModelSpec {
        ModelSpec::from_hf_config(crate::catalog::config_json("gpt2").unwrap()).unwrap()
    }

    fn gpu(bf16: bool) -> GpuFacts {
        GpuFacts {
            label: "test".into(),
            bf16,
            flash_attention: bf16,
            tflops: None,
            nvlink_gbps: None,
            bitsandbytes: true,
        }
    }

    fn settings(lever: Lever, setup: &TrainSetup, gpu: &GpuFacts) -> Vec<String> {
        let spec = spec();
        let alloc = AllocConf::DEFAULT;
        let cx =
            LeverContext { spec: &spec, setup, alloc: &alloc, gpu, fragmentation_matters: true };
        lever.settings(&cx).iter().map(Setting::name).collect()
    }

    #[test]
    fn every_lever_has_a_unique_name_that_parses_back() {
        for lever in Lever::ALL {
            assert_eq!(Lever::parse(lever.name()), Some(lever));
        }
        assert_eq!(Lever::parse("grad_accum"), Some(Lever::MicroBatch));
        assert_eq!(Lever::parse("nonsense"), None);
    }

    #[test]
    fn precision_offers_bf16_only_where_the_gpu_has_it() {
        let fp32 = TrainSetup { precision: Precision::Fp32, ..TrainSetup::default() };
        assert_eq!(settings(Lever::Precision, &fp32, &gpu(true)), ["fp32", "bf16-mixed"]);
        assert_eq!(settings(Lever::Precision, &fp32, &gpu(false)), ["fp32", "fp16-mixed"]);
        let fp16 = TrainSetup { precision: Precision::Fp16Mixed, ..TrainSetup::default() };
        assert_eq!(settings(Lever::Precision, &fp16, &gpu(false)), ["fp16-mixed"]);
    }

    #[test]
    fn each_lever_lists_the_users_setting_first_and_no_duplicates() {
        let user = TrainSetup {
            precision: Precision::Fp32,
            attention: Attention::Eager,
            ..TrainSetup::default()
        };
        for lever in Lever::ALL.into_iter().filter(|l| *l != Lever::MicroBatch) {
            let names = settings(lever, &user, &gpu(true));
            let mut unique = names.clone();
            unique.dedup();
            assert_eq!(names, unique, "{lever}");
            let spec = spec();
            let alloc = AllocConf::DEFAULT;
            let g = gpu(true);
            let cx = LeverContext {
                spec: &spec,
                setup: &user,
                alloc: &alloc,
                gpu: &g,
                fragmentation_matters: true,
            };
            let first = lever.settings(&cx)[0].clone();
            let own = Setting::of(lever, &Config { setup: user.clone(), alloc }).unwrap();
            assert_eq!(first, own, "{lever}");
        }
        assert_eq!(
            settings(Lever::Optimizer, &user, &gpu(true)),
            ["adamw", "fused", "adamw-8bit", "paged-adamw-8bit", "adafactor"]
        );
        assert_eq!(settings(Lever::Attention, &user, &gpu(true)), ["eager", "sdpa"]);
        assert_eq!(
            settings(Lever::Checkpointing, &user, &gpu(true)),
            ["none", "every-4", "every-3", "every-2", "full"]
        );
    }

    #[test]
    fn sharding_offers_zero_and_fsdp_on_several_gpus_and_offload_on_one() {
        let one = TrainSetup::default();
        assert_eq!(
            settings(Lever::Sharding, &one, &gpu(true)),
            ["none", "zero2+offload-optimizer", "zero3+offload-both"]
        );
        let mut eight = TrainSetup::default();
        eight.parallel.gpus_per_node = 8;
        eight.parallel.strategy = Strategy::Ddp;
        let names = settings(Lever::Sharding, &eight, &gpu(true));
        assert_eq!(names[0], "ddp");
        for s in ["zero1", "zero2", "zero3", "fsdp", "zero3+offload-both", "fsdp+offload-both"] {
            assert!(names.iter().any(|n| n == s), "{s}: {names:?}");
        }
        // HSDP replicates across nodes: only offered with several.
        assert!(!names.iter().any(|n| n == "hsdp"));
        eight.parallel.nodes = 2;
        assert!(settings(Lever::Sharding, &eight, &gpu(true)).iter().any(|n| n == "hsdp"));
        // Every offered pair runs (DeepSpeed offloads parameters only at stage 3).
        let spec = spec();
        let alloc = AllocConf::DEFAULT;
        let g = gpu(true);
        let cx = LeverContext {
            spec: &spec,
            setup: &eight,
            alloc: &alloc,
            gpu: &g,
            fragmentation_matters: false,
        };
        for s in Lever::Sharding.settings(&cx) {
            let mut c = Config { setup: eight.clone(), alloc };
            s.apply(&mut c);
            assert!(compatible(&c), "{}", s.name());
        }
    }

    #[test]
    fn flash_attention_is_offered_where_sdpa_cannot_run_its_flash_kernel() {
        let gemma2 =
            ModelSpec::from_hf_config(crate::catalog::config_json("gemma-2-2b").unwrap()).unwrap();
        let user = TrainSetup::default();
        let alloc = AllocConf::DEFAULT;
        let offered = |g: &GpuFacts| {
            let cx = LeverContext {
                spec: &gemma2,
                setup: &user,
                alloc: &alloc,
                gpu: g,
                fragmentation_matters: false,
            };
            Lever::Attention.settings(&cx).iter().map(Setting::name).collect::<Vec<_>>()
        };
        assert_eq!(offered(&gpu(true)), ["sdpa", "flash"]);
        assert_eq!(offered(&gpu(false)), ["sdpa"]);
    }

    #[test]
    fn qlora_computes_in_bf16_where_the_card_has_it_and_runs_only_on_cuda() {
        let user = TrainSetup::default();
        assert_eq!(settings(Lever::Lora, &user, &gpu(true)), ["full-fine-tuning", "lora", "qlora"]);
        assert_eq!(default_qlora(&gpu(true)).compute_dtype, DType::Bf16);
        let fp16 = default_qlora(&gpu(false));
        assert_eq!(
            (fp16.kind, fp16.double_quant, fp16.compute_dtype),
            (QuantType::Nf4, true, DType::F16)
        );
        let bf16 = Setting::Qlora(default_lora(), default_qlora(&gpu(true)));
        assert!(bf16.runs_on(&gpu(true)) && !bf16.runs_on(&gpu(false)));
        let rocm = GpuFacts { bitsandbytes: false, ..gpu(true) };
        assert_eq!(settings(Lever::Lora, &user, &rocm), ["full-fine-tuning", "lora"]);
        // Not under ZeRO-3 / FSDP, which do not shard 4-bit weights, nor pure bf16.
        let mut c = Config { setup: user, alloc: AllocConf::DEFAULT };
        bf16.apply(&mut c);
        assert!(compatible(&c));
        c.setup.parallel.gpus_per_node = 2;
        c.setup.parallel.strategy = Strategy::Zero3;
        assert!(!compatible(&c));
    }

    #[test]
    fn applying_a_setting_changes_only_its_lever() {
        let spec = spec();
        let user = Config { setup: TrainSetup::default(), alloc: AllocConf::DEFAULT };
        let g = gpu(true);
        let cx = LeverContext {
            spec: &spec,
            setup: &user.setup,
            alloc: &user.alloc,
            gpu: &g,
            fragmentation_matters: true,
        };
        for lever in Lever::ALL {
            for setting in lever.settings(&cx) {
                let mut c = user.clone();
                setting.apply(&mut c);
                assert_eq!(Setting::of(lever, &c), Some(setting.clone()));
                for other in Lever::ALL.into_iter().filter(|o| *o != lever) {
                    assert_eq!(Setting::of(other, &c), Setting::of(other, &user), "{setting:?}");
                }
            }
        }
    }
}
