//! The flags that describe a model and a training setup, shared by `estimate` and `doctor`.

use crate::hints::Hint as _;
use std::path::Path;

use vramfit_core::gpu::{self, GpuChoice};
use vramfit_core::overhead::{self, ContextBasis, ModuleLoading};
use vramfit_core::units::{parse_count, parse_size};
use vramfit_core::{
    Attention, Bytes, Checkpointing, DType, Freeze, Lora, LoraTargets, LossKernel, ModelSpec,
    Optimizer, OptimizerImpl, Precision, QuantType, Quantization, Task, TrainSetup, TrainingLoop,
    ZeroGrad, catalog, model_toml,
};
use vramfit_hub::{HubEnv, HubRemote, RepoId};

use super::parallel_args::WithGlobalBatch as _;
use crate::Failure;

/// The model and the training setup.
#[derive(Debug, Clone, clap::Args)]
pub struct SetupArgs {
    /// The model: a built-in name (`llama-3.1-8b`; see --list-models), a path to a Hugging Face
    /// config.json (or its folder), a Hub id (`ORG/NAME[@REV]`) from the local Hugging Face
    /// cache (config.json alone is fetched when missing, unless HF_HUB_OFFLINE is set), or a
    /// `.toml` file describing your own transformer (sizes, ffn = gelu|swiglu, norm =
    /// layernorm|rmsnorm, positions = learned|rotary; see examples/stapel.toml and the README).
    #[arg(long, short = 'm', value_name = "NAME|PATH|ORG/NAME")]
    pub model: Option<String>,

    /// A bare parameter count (`125M`, `1B`, `7e9`) instead of a model: only parameters,
    /// gradients and optimizer state can be computed from it.
    #[arg(long, value_name = "COUNT", conflicts_with = "model")]
    pub params: Option<String>,

    /// Sequences per micro-batch (per GPU, per forward pass).
    #[arg(long, short = 'b', default_value_t = 1, value_name = "N")]
    pub batch: u64,

    /// Tokens per sequence (an encoder-decoder's source: the encoder's length).
    #[arg(long, short = 's', default_value_t = 512, value_name = "N")]
    pub seq_len: u64,

    /// An encoder-decoder's target length (T5's labels, the decoder's tokens). Default: the
    /// same as --seq-len. An error on models without a decoder side.
    #[arg(long, value_name = "N")]
    pub target_len: Option<u64>,

    /// Weights and compute: fp32, fp16-mixed, bf16-mixed (fp32 weights + autocast), bf16 (pure
    /// bf16 weights), fp16-true (pure fp16 weights, `torch_dtype=torch.float16`, no autocast).
    #[arg(long, default_value = "bf16-mixed", value_name = "P")]
    pub precision: String,

    /// adam, adamw, sgd, sgd-momentum, adamw-8bit, paged-adamw-8bit, paged-adamw (bitsandbytes'
    /// 32-bit PagedAdamW), adafactor, lion, or none (no optimizer: forward and backward only, as
    /// a benchmark's loop does).
    #[arg(long, default_value = "adamw", value_name = "OPT")]
    pub optimizer: String,

    /// Dtype of the optimizer state (fp32, bf16, fp16, int8). Default: what PyTorch does, the
    /// parameter's dtype (uint8 for the 8-bit optimizers).
    #[arg(long, value_name = "DTYPE")]
    pub optimizer_state_dtype: Option<String>,

    /// How torch.optim runs step(): foreach (the default on CUDA), for-loop, fused.
    #[arg(long, default_value = "foreach", value_name = "IMPL")]
    pub optimizer_impl: String,

    /// Attention kernel: eager, sdpa, flash.
    #[arg(long, default_value = "sdpa", value_name = "KIND")]
    pub attention: String,

    /// Activation checkpointing per decoder layer: none, full, every-N (every N-th layer,
    /// transformers' every_n_layers).
    #[arg(long, default_value = "none", value_name = "MODE")]
    pub checkpointing: String,

    /// Micro-batches per optimizer step (gradients persist across them).
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub grad_accum: u64,

    /// The GPU: a catalog id (`rtx-3080`, `a100-80gb`; see --list-gpus) or a capacity (`24GiB`).
    #[arg(long, short = 'g', value_name = "NAME|SIZE")]
    pub gpu: Option<String>,

    /// Full fine-tuning with frozen parts, comma separated: `embeddings` (the embedding tables,
    /// and a head tied to them) and `layers:N` (the first N layers).
    #[arg(long, value_name = "PARTS")]
    pub freeze: Option<String>,

    /// LoRA through PEFT: the adapters' rank r. The base model is frozen; only the adapters
    /// (fp32, as PEFT casts them) and --modules-to-save train.
    #[arg(long, value_name = "R")]
    pub lora_rank: Option<u64>,

    /// LoRA's alpha (scales the update; no memory effect). Default 8, as PEFT's.
    #[arg(long, value_name = "A")]
    pub lora_alpha: Option<u64>,

    /// Linear modules that get an adapter: `all-linear` or names (`q_proj,v_proj`, matched as
    /// PEFT does). Default: PEFT's, the query and value projections.
    #[arg(long, value_name = "NAMES")]
    pub lora_targets: Option<String>,

    /// LoRA dropout probability; above 0 each adapter keeps a dropped copy of its input.
    #[arg(long, value_name = "P")]
    pub lora_dropout: Option<f64>,

    /// Modules trained in full beside the adapters (`lm_head,embed_tokens`): PEFT keeps the
    /// frozen original and trains a copy.
    #[arg(long, value_name = "NAMES")]
    pub modules_to_save: Option<String>,

    /// DoRA (PEFT's `use_dora`): each adapted linear also trains a magnitude per output row,
    /// and every forward computes the norm of the whole adapted weight.
    #[arg(long)]
    pub use_dora: bool,

    /// QLoRA: the base quantised by bitsandbytes (nf4, fp4: 4-bit `Linear4bit`; int8:
    /// `Linear8bitLt`) and prepared with `prepare_model_for_kbit_training` (the other
    /// parameters upcast to fp32). Needs --lora-rank.
    #[arg(long, value_name = "TYPE")]
    pub quantization: Option<String>,

    /// bitsandbytes' double quantisation (`bnb_4bit_use_double_quant`): the blocks' absmax in
    /// 8 bits, about 4.127 bits per weight instead of 4.5 (nf4, fp4 only).
    #[arg(long)]
    pub double_quant: bool,

    /// The dtype a 4-bit weight is dequantised to and multiplied in
    /// (`bnb_4bit_compute_dtype`): bf16 (default), fp16, fp32.
    #[arg(long, value_name = "DTYPE")]
    pub compute_dtype: Option<String>,

    /// Linear modules left unquantised (`llm_int8_skip_modules`), comma separated; the
    /// output layer never is quantised.
    #[arg(long, value_name = "NAMES")]
    pub quant_skip_modules: Option<String>,

    /// Memory the CUDA context and the kernels a step loads take outside PyTorch's allocator.
    /// Default: the value for the GPU's generation (`vramfit estimate --list-gpus` shows it;
    /// sources in data/card.json), 512 MiB for a card of unknown generation.
    #[arg(long, value_name = "SIZE")]
    pub cuda_context: Option<String>,

    /// The allocator and safety-margin flags (`estimate/mod.rs`).
    #[command(flatten)]
    pub card: super::CardArgs,

    /// What the training loop keeps of the model's output: custom (`outputs = model(**batch)`
    /// held until the next forward replaces it, as the HF course's and accelerate's loops do;
    /// the default, never less than trainer) or trainer (only the loss: HF Trainer,
    /// Lightning, TRL, torchtune).
    #[arg(long = "loop", default_value = "custom", value_name = "LOOP")]
    pub training_loop: String,

    /// `optimizer.zero_grad(set_to_none=...)`: none (True, PyTorch's default: the gradients are
    /// freed) or zeros (False: every .grad stays allocated through the next forward).
    #[arg(long, default_value = "none", value_name = "MODE")]
    pub zero_grad: String,

    /// The KV cache transformers builds in training: true or false. Default: config.json's
    /// use_cache (scripts that set `model.config.use_cache = False` run with false).
    #[arg(long, value_name = "BOOL")]
    pub use_cache: Option<String>,

    /// What the estimate is for: cuda (a CUDA GPU) or cpu-oracle (PyTorch on the CPU under
    /// FakeTensorMode, what validation/oracle.py measures).
    #[arg(long, default_value = "cuda", value_name = "TARGET")]
    pub target: String,

    /// The CUDA version of the run (`12.4`): before 11.7 every kernel loads at start-up, which
    /// makes the context larger. Default: a current one (lazy loading, unless the environment
    /// sets CUDA_MODULE_LOADING=EAGER).
    #[arg(long, value_name = "X.Y")]
    pub cuda_version: Option<String>,

    /// The loss: standard (the whole logits, then cross-entropy), chunked (a fused, chunked
    /// linear + cross-entropy that never makes the logits: Liger Kernel's), chunked-output
    /// (torchtune's CEWithChunkedOutputLoss: the output layer per 1/8 of the sequence, each
    /// chunk upcast to fp32 on its own), chunked-output-litgpt (LitGPT's
    /// chunked_cross_entropy: 128-token chunks, no upcast) or logits-sum (`logits.sum()`, no
    /// cross-entropy: a benchmark's loss).
    #[arg(long, default_value = "standard", value_name = "KIND")]
    pub loss: String,

    /// What the model is trained for, the head transformers' AutoModelFor* class puts on it:
    /// causal-lm, masked-lm, seq-cls (sequence classification), token-cls, seq2seq (an
    /// encoder-decoder's AutoModelForSeq2SeqLM: T5, mT5). Default: the model's own head
    /// (masked-lm for BERT, RoBERTa and ModernBERT, seq2seq for T5, causal-lm otherwise).
    #[arg(long, value_name = "TASK")]
    pub task: Option<String>,

    /// Labels of a seq-cls or token-cls head (config.json's num_labels). Default 2.
    #[arg(long, value_name = "N")]
    pub num_labels: Option<u64>,

    /// The GPUs and how they share the model (`estimate/parallel_args.rs`).
    #[command(flatten)]
    pub parallel: super::parallel_args::ParallelArgs,
}

/// What `--target` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A CUDA GPU.
    Cuda,
    /// PyTorch on the CPU under FakeTensorMode (validation/oracle.py).
    CpuOracle,
}

impl Target {
    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Target::Cuda => "cuda",
            Target::CpuOracle => "cpu-oracle",
        }
    }
}

/// The CUDA context a verdict is budgeted with, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// Its size.
    pub bytes: Bytes,
    /// `given` (--cuda-context), `observed` / `derived` (the generation's value), `eager`
    /// (without lazy loading) or `default` (a card of unknown generation).
    pub basis: &'static str,
    /// The one-line warning a default deserves.
    pub warning: Option<String>,
}

/// Where the model comes from.
pub enum ModelSource {
    /// A resolved architecture.
    Spec {
        /// How to name it in output.
        label: String,
        /// The spec.
        spec: Box<ModelSpec>,
        /// What it was read from.
        origin: ModelOrigin,
    },
    /// Only a parameter count.
    Parameters(u64),
}

/// What a model's description was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelOrigin {
    /// The built-in catalog.
    Builtin,
    /// A `config.json`: its path, or the name the web page gave its text.
    ConfigJson(String),
    /// The `config.json` of a Hub id, in the local Hugging Face cache.
    Hub(String),
    /// A model TOML file (`vramfit_core::model_toml`).
    Toml(String),
}

impl ModelOrigin {
    /// `built-in`, `config.json`, `hub` or `toml`.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelOrigin::Builtin => "built-in",
            ModelOrigin::ConfigJson(_) => "config.json",
            ModelOrigin::Hub(_) => "hub",
            ModelOrigin::Toml(_) => "toml",
        }
    }

    /// The file read, if any.
    pub fn path(&self) -> Option<&str> {
        match self {
            ModelOrigin::Builtin => None,
            ModelOrigin::ConfigJson(p) | ModelOrigin::Hub(p) | ModelOrigin::Toml(p) => Some(p),
        }
    }
}

impl SetupArgs {
    /// The training setup from the flags.
    pub fn train_setup(&self) -> Result<TrainSetup, Failure> {
        self.train_setup_per_micro_batch()?
            .with_global_batch(self.parallel.global_batch, self.grad_accum_given())
    }

    /// The setup as the flags give it, with `--grad-accum` as given: `--global-batch` left
    /// aside (the planner keeps it as a goal rather than deriving the accumulation from it).
    pub fn train_setup_per_micro_batch(&self) -> Result<TrainSetup, Failure> {
        let parse_err = |e: vramfit_core::UnknownName| {
            let hint = format!("see `vramfit estimate --help` for the {} choices", e.kind);
            Failure::with_hint(e.to_string(), hint)
        };
        let optimizer_state_dtype = match &self.optimizer_state_dtype {
            None => None,
            Some(text) => Some(DType::parse(text).ok_or_else(|| {
                Failure::with_hint(
                    format!("unknown --optimizer-state-dtype '{text}'"),
                    "use fp32, bf16, fp16 or int8",
                )
            })?),
        };
        Ok(TrainSetup {
            freeze: self.freeze()?,
            lora: self.lora()?,
            quantization: self.quantization()?,
            micro_batch: self.batch,
            seq_len: self.seq_len,
            precision: self.precision.parse::<Precision>().map_err(parse_err)?,
            optimizer: self.optimizer.parse::<Optimizer>().map_err(parse_err)?,
            optimizer_state_dtype,
            attention: self.attention.parse::<Attention>().map_err(parse_err)?,
            checkpointing: self.checkpointing.parse::<Checkpointing>().map_err(parse_err)?,
            grad_accum: self.grad_accum,
            optimizer_impl: self.optimizer_impl.parse::<OptimizerImpl>().map_err(parse_err)?,
            training_loop: self.training_loop.parse::<TrainingLoop>().map_err(|e| {
                Failure::with_hint(
                    format!("unknown --loop '{}'", e.given),
                    "use custom (outputs = model(**batch) kept until the next forward) or trainer (only the loss kept: HF Trainer, Lightning)",
                )
            })?,
            zero_grad: self.zero_grad.parse::<ZeroGrad>().map_err(|e| {
                Failure::with_hint(
                    format!("unknown --zero-grad '{}'", e.given),
                    "use none (zero_grad(set_to_none=True), the default) or zeros (set_to_none=False)",
                )
            })?,
            use_cache: self.use_cache()?,
            loss: self.loss.parse::<LossKernel>().map_err(parse_err)?,
            parallel: self.parallel.parallel()?,
            target_len: self.target_len,
        })
    }

    /// Whether `--grad-accum` was given (it is 1 by default).
    fn grad_accum_given(&self) -> bool {
        self.grad_accum != 1
    }

    fn use_cache(&self) -> Result<Option<bool>, Failure> {
        let Some(text) = self.use_cache.as_deref() else { return Ok(None) };
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(Some(true)),
            "false" | "no" | "off" | "0" => Ok(Some(false)),
            _ => Err(Failure::with_hint(
                format!("invalid --use-cache '{text}'"),
                "use true or false; without it the model's config.json decides (use_cache)",
            )),
        }
    }

    /// `--target`.
    pub fn target(&self) -> Result<Target, Failure> {
        match self.target.trim().to_ascii_lowercase().as_str() {
            "cuda" => Ok(Target::Cuda),
            "cpu-oracle" | "cpu_oracle" | "cpu" => Ok(Target::CpuOracle),
            _ => Err(Failure::with_hint(
                format!("unknown --target '{}'", self.target),
                "use cuda (a GPU, the default) or cpu-oracle (what validation/oracle.py measures)",
            )),
        }
    }

    /// How CUDA loads its kernels: `--cuda-version` (lazy from 11.7) and the environment's
    /// `CUDA_MODULE_LOADING`.
    pub fn module_loading(&self) -> Result<ModuleLoading, Failure> {
        let version = match self.cuda_version.as_deref().map(str::trim) {
            None => None,
            Some(text) => {
                let parsed = text.split_once('.').and_then(|(major, minor)| {
                    Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?))
                });
                match parsed {
                    Some(v) if (8..=99).contains(&v.0) => Some(v),
                    _ => {
                        return Err(Failure::with_hint(
                            format!("invalid --cuda-version '{text}'"),
                            "give the CUDA version as major.minor, such as 12.4 or 11.6",
                        ));
                    }
                }
            }
        };
        let env = std::env::var("CUDA_MODULE_LOADING").ok();
        Ok(ModuleLoading::of(version, env.as_deref()))
    }

    fn freeze(&self) -> Result<Freeze, Failure> {
        let mut freeze = Freeze::default();
        let Some(text) = &self.freeze else { return Ok(freeze) };
        for part in text.split(',').map(str::trim) {
            if part == "embeddings" {
                freeze.embeddings = true;
            } else if let Some(n) = part.strip_prefix("layers:").and_then(|n| n.parse().ok()) {
                freeze.first_layers = n;
            } else {
                return Err(Failure::with_hint(
                    format!("unknown --freeze part '{part}'"),
                    "use embeddings and/or layers:N, comma separated (--freeze embeddings,layers:4)",
                ));
            }
        }
        Ok(freeze)
    }

    fn quantization(&self) -> Result<Option<Quantization>, Failure> {
        let Some(text) = &self.quantization else {
            let orphan = [
                ("--double-quant", self.double_quant),
                ("--compute-dtype", self.compute_dtype.is_some()),
                ("--quant-skip-modules", self.quant_skip_modules.is_some()),
            ];
            if let Some((flag, _)) = orphan.iter().find(|(_, given)| *given) {
                return Err(Failure::with_hint(
                    format!("{flag} needs --quantization"),
                    "pass --quantization nf4 (QLoRA), fp4 or int8",
                ));
            }
            return Ok(None);
        };
        let kind = text.parse::<QuantType>().map_err(|e| {
            Failure::with_hint(
                format!("unknown --quantization '{}'", e.given),
                "use nf4 (QLoRA's), fp4 or int8",
            )
        })?;
        let dtype = self.compute_dtype.as_deref().unwrap_or("bf16");
        let compute_dtype = DType::parse(dtype).ok_or_else(|| {
            Failure::with_hint(
                format!("unknown --compute-dtype '{dtype}'"),
                "use bf16, fp16 or fp32",
            )
        })?;
        let skip_modules = match self.quant_skip_modules.as_deref() {
            None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(str::to_string)
                .collect(),
        };
        Ok(Some(Quantization {
            kind,
            double_quant: self.double_quant,
            compute_dtype,
            skip_modules,
        }))
    }

    fn lora(&self) -> Result<Option<Lora>, Failure> {
        let names = |text: &str| -> Vec<String> {
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
        };
        let Some(rank) = self.lora_rank else {
            let given = [
                ("--lora-alpha", self.lora_alpha.is_some()),
                ("--lora-targets", self.lora_targets.is_some()),
                ("--lora-dropout", self.lora_dropout.is_some()),
                ("--use-dora", self.use_dora),
                ("--modules-to-save", self.modules_to_save.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
                return Err(Failure::with_hint(
                    format!("{flag} needs --lora-rank"),
                    "pass --lora-rank R (e.g. --lora-rank 16) to train LoRA adapters",
                ));
            }
            return Ok(None);
        };
        let dropout = self.lora_dropout.unwrap_or(0.0);
        if !(0.0..1.0).contains(&dropout) {
            return Err(Failure::with_hint(
                format!("--lora-dropout {dropout} is not a probability below 1"),
                "give a value in [0, 1), such as 0.05",
            ));
        }
        let targets = match self.lora_targets.as_deref().map(str::trim) {
            None => LoraTargets::PeftDefault,
            Some("all-linear" | "all_linear") => LoraTargets::AllLinear,
            Some(text) if names(text).is_empty() => {
                return Err(Failure::with_hint(
                    "--lora-targets is empty",
                    "give module names (q_proj,v_proj) or all-linear",
                ));
            }
            Some(text) => LoraTargets::Modules(names(text)),
        };
        Ok(Some(Lora {
            rank,
            alpha: self.lora_alpha.unwrap_or(8),
            targets,
            dropout: dropout > 0.0,
            modules_to_save: self.modules_to_save.as_deref().map(names).unwrap_or_default(),
            use_dora: self.use_dora,
        }))
    }

    /// The GPU, if one was given. A capacity needs its unit: `--gpu 24` is refused rather than
    /// read as 24 bytes.
    pub fn gpu(&self) -> Result<Option<GpuChoice>, Failure> {
        let Some(text) = self.gpu.as_deref() else { return Ok(None) };
        let choice = gpu::resolve(text).map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
        if matches!(choice, GpuChoice::Capacity(_)) && capacity_unit(text).is_none() {
            let number = text.trim();
            return Err(Failure::with_hint(
                format!("--gpu {number} has no unit (it would mean {number} bytes)"),
                format!(
                    "write the unit, --gpu {number}GiB (binary) or --gpu {number}GB (decimal, {number}×10⁹ bytes), or a catalog id such as rtx-3090 (vramfit estimate --list-gpus)"
                ),
            ));
        }
        if let GpuChoice::Capacity(bytes) = choice
            && bytes < Bytes(SMALLEST_GPU_MIB << 20)
        {
            return Err(Failure::with_hint(
                format!("--gpu {} is {bytes}, smaller than any GPU", text.trim()),
                "write a GPU's memory with its unit, such as --gpu 24GiB, or a catalog id such as rtx-3090 (vramfit estimate --list-gpus)",
            ));
        }
        Ok(Some(choice))
    }

    /// A note for the output when `--gpu` was a decimal capacity (`24GB`): it was read as
    /// powers of ten, which is not what a card's "24 GB" means.
    pub fn gpu_unit_note(&self) -> Option<String> {
        let text = self.gpu.as_deref()?;
        let unit = capacity_unit(text)?;
        let binary = match unit.to_ascii_lowercase().as_str() {
            "kb" => "KiB",
            "mb" => "MiB",
            "gb" => "GiB",
            "tb" => "TiB",
            _ => return None,
        };
        let size = parse_size(text)?;
        let number = text.trim().strip_suffix(unit).unwrap_or(text).trim();
        Some(format!(
            "--gpu {}: {unit} is decimal, so {number} {unit} = {size}; a card sold as {number} GB has {number} {binary}, write --gpu {number}{binary}",
            text.trim()
        ))
    }

    /// The CUDA context on the `--gpu` given (`--cuda-context`, else the default without one).
    pub fn cuda_context_bytes(&self) -> Result<Bytes, Failure> {
        let gpu = self.gpu()?.unwrap_or(GpuChoice::Capacity(Bytes::ZERO));
        Ok(self.cuda_context(&gpu)?.bytes)
    }

    /// The CUDA context budget on `gpu`: `--cuda-context`, else the value of the card's
    /// generation, else the default with a warning.
    pub fn cuda_context(&self, gpu: &GpuChoice) -> Result<Context, Failure> {
        if let Some(text) = self.cuda_context.as_deref() {
            let bytes = if text.trim() == "0" { Some(Bytes::ZERO) } else { parse_size(text) };
            return bytes.map(|bytes| Context { bytes, basis: "given", warning: None }).ok_or_else(|| {
                Failure::with_hint(
                    format!("invalid --cuda-context '{text}'"),
                    "give a size such as 512MiB or 1GiB (default: the GPU generation's, vramfit estimate --list-gpus)",
                )
            });
        }
        let size = overhead::cuda_context(gpu, self.module_loading()?);
        Ok(match size.basis {
            ContextBasis::Generation { basis, .. } => Context {
                bytes: size.bytes,
                basis: if basis == "observed" { "observed" } else { "derived" },
                warning: None,
            },
            ContextBasis::Eager => Context { bytes: size.bytes, basis: "eager", warning: None },
            ContextBasis::Unknown => Context {
                bytes: size.bytes,
                basis: "default",
                warning: Some(format!(
                    "the CUDA context of {} is not known (no GPU generation): {} assumed; pass --cuda-context to set it",
                    gpu.label(),
                    size.bytes
                )),
            },
        })
    }

    /// Resolves `--model` / `--params`.
    pub fn model_source(&self) -> Result<ModelSource, Failure> {
        if let Some(count) = &self.params {
            let n = parse_count(count).ok_or_else(|| {
                Failure::with_hint(
                    format!("invalid --params '{count}'"),
                    "give a parameter count such as 125M, 1B, 7e9 or 350000000",
                )
            })?;
            if self.task.is_some() || self.num_labels.is_some() {
                return Err(Failure::with_hint(
                    "--task and --num-labels need a model",
                    "pass --model NAME|PATH|ORG/NAME instead of --params to put a task head on it",
                ));
            }
            return Ok(ModelSource::Parameters(n));
        }
        let Some(name) = &self.model else {
            return Err(Failure::with_hint(
                "no model given",
                "pass --model NAME|PATH|ORG/NAME (e.g. --model llama-3.2-1b) or --params 1B",
            ));
        };
        self.with_task(resolve_model(name)?)
    }

    /// The model with the head `--task` and `--num-labels` ask for.
    pub fn with_task(&self, source: ModelSource) -> Result<ModelSource, Failure> {
        let ModelSource::Spec { label, spec, origin } = source else { return Ok(source) };
        let task = match self.task.as_deref() {
            Some(text) => text.parse::<Task>().map_err(|e| {
                Failure::with_hint(
                    format!("--task: {e}"),
                    "use causal-lm, masked-lm, seq-cls, token-cls or seq2seq",
                )
            })?,
            None => spec.default_task(),
        };
        if let Some(n) = self.num_labels
            && !matches!(task, Task::SeqCls | Task::TokenCls)
        {
            return Err(Failure::with_hint(
                format!("--num-labels {n} needs a classification head, not {task}"),
                "add --task seq-cls or --task token-cls, or drop --num-labels",
            ));
        }
        let spec = spec
            .for_task(task, self.num_labels.unwrap_or(2))
            .map_err(|e| Failure::with_hint(format!("{label}: {e}"), e.hint()))?;
        Ok(ModelSource::Spec { label, spec: Box::new(spec), origin })
    }
}

impl ModelSource {
    /// A built-in model, by name; no file or Hub id.
    pub fn builtin(name: &str) -> Result<ModelSource, Failure> {
        match catalog::resolve(name) {
            Some((id, json)) => spec_from(
                id.to_string(),
                json,
                &format!("built-in model {id}"),
                ModelOrigin::Builtin,
            ),
            None => Err(unknown_model(name)),
        }
    }

    /// The text of a `config.json`; `origin` names it in errors, as a path does on the CLI.
    pub fn from_config(label: String, json: &str, origin: &str) -> Result<ModelSource, Failure> {
        spec_from(label, json, origin, ModelOrigin::ConfigJson(origin.to_string()))
    }
}

fn spec_from(
    label: String,
    json: &str,
    name: &str,
    origin: ModelOrigin,
) -> Result<ModelSource, Failure> {
    let spec = ModelSpec::from_hf_config(json)
        .map_err(|e| Failure::with_hint(format!("{name}: {e}"), e.hint()))?;
    Ok(ModelSource::Spec { label, spec: Box::new(spec), origin })
}

/// A model TOML file: its `name` (else the file's stem) and the spec it resolves to.
fn spec_from_toml(path: &Path, name: &str) -> Result<ModelSource, Failure> {
    let text = read_text(path, model_toml::MAX_MODEL_TOML_BYTES, "a model TOML")?;
    ModelSource::from_toml(&text, name)
}

impl ModelSource {
    /// The text of a model TOML; `name` (a path or a file's name) names it in errors, and its
    /// stem labels the model when the TOML has no `name`.
    pub fn from_toml(text: &str, name: &str) -> Result<ModelSource, Failure> {
        if text.len() > model_toml::MAX_MODEL_TOML_BYTES {
            return Err(Failure::with_hint(
                format!("{name} is {} — too large for a model TOML", Bytes(text.len() as u64)),
                "pass the model's config.json or model TOML, never its weights",
            ));
        }
        let model = model_toml::parse(text)
            .map_err(|e| Failure::with_hint(format!("{name}: {e}"), e.hint()))?;
        let label = model.name.unwrap_or_else(|| {
            Path::new(name)
                .file_stem()
                .map_or_else(|| name.to_string(), |s| s.to_string_lossy().into_owned())
        });
        Ok(ModelSource::Spec {
            label,
            spec: Box::new(model.spec),
            origin: ModelOrigin::Toml(name.to_string()),
        })
    }
}

fn read_config(path: &Path) -> Result<String, Failure> {
    read_text(path, vramfit_core::hf_config::MAX_CONFIG_BYTES, "a config.json")
}

/// A model description's text, refused unread when larger than `limit` bytes (`what` names the
/// file expected).
fn read_text(path: &Path, limit: usize, what: &str) -> Result<String, Failure> {
    let path_text = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| Failure::cannot_read(path, &e))?;
    // The same limit the parser enforces, checked before reading so weights are never loaded.
    if meta.len() > limit as u64 {
        return Err(Failure::with_hint(
            format!("{path_text} is {} — too large for {what}", Bytes(meta.len())),
            "pass the model's config.json or model TOML, never its weights",
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| Failure::cannot_read(path, &e))?;
    String::from_utf8(bytes).map_err(|_| {
        Failure::with_hint(
            format!("{path_text} is not UTF-8 text"),
            "pass the model's config.json or model TOML, never its weights",
        )
    })
}

/// A built-in name, a file or folder, or a Hub id in the local cache — in that order.
fn resolve_model(name: &str) -> Result<ModelSource, Failure> {
    if catalog::resolve(name).is_some() {
        return ModelSource::builtin(name);
    }
    let path = Path::new(name);
    let is_toml = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"));
    if is_toml && path.is_file() {
        return spec_from_toml(path, name);
    }
    if path.is_dir() {
        let file = path.join("config.json");
        let json = read_config(&file)?;
        let file = file.display().to_string();
        return spec_from(name.to_string(), &json, &file, ModelOrigin::ConfigJson(file.clone()));
    }
    if path.is_file() {
        let json = read_config(path)?;
        let label = path
            .parent()
            .and_then(Path::file_name)
            .filter(|_| path.file_name().is_some_and(|f| f == "config.json"))
            .map_or_else(|| name.to_string(), |dir| dir.to_string_lossy().into_owned());
        return spec_from(label, &json, name, ModelOrigin::ConfigJson(name.to_string()));
    }
    if name.ends_with(".json") || is_toml {
        return Err(Failure::with_hint(
            format!("cannot read {name}: no such file"),
            if is_toml {
                "check the path to the model TOML"
            } else {
                "check the path to the config.json"
            },
        ));
    }
    if let Some(repo) = RepoId::parse(name) {
        let env = HubEnv::from_process();
        let file = vramfit_hub::find_cached_config(&repo, &env)
            .or_else(|_| vramfit_hub::download_config(&repo, &env, &HubRemote::from_process()))
            .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
        let json = read_config(&file)?;
        let file = file.display().to_string();
        return spec_from(name.to_string(), &json, &file, ModelOrigin::Hub(file.clone()));
    }
    Err(unknown_model(name))
}

fn unknown_model(name: &str) -> Failure {
    let suggestion = catalog::names()
        .into_iter()
        .map(|n| (gpu::edit_distance(&name.to_ascii_lowercase(), n), n))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, n)| format!(" (did you mean '{n}'?)"))
        .unwrap_or_default();
    Failure::with_hint(
        format!("unknown model '{name}'{suggestion}"),
        "use a built-in name (vramfit estimate --list-models), a path to config.json or to a model TOML, or a Hub id ORG/NAME",
    )
}

/// A `--gpu` capacity below this many MiB is refused as a mistake (`24B`, `24MB` for `24GB`).
const SMALLEST_GPU_MIB: u64 = 256;

/// The unit of a capacity as written (`GiB` in `24GiB`, `GB` in `24 GB`); `None` when the
/// text is a bare number or not a capacity.
fn capacity_unit(text: &str) -> Option<&str> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let unit = text.get(split..)?.trim();
    (!unit.is_empty()).then_some(unit)
}
