//! `--emit`: a plan as the code or configuration a user pastes, one file per format. Each
//! writes what its framework takes (a PyTorch loop, Lightning's `Trainer`, the HF Trainer's
//! `TrainingArguments`, a DeepSpeed JSON config, an accelerate config file) with the plan's
//! micro-batch, accumulation, precision, optimizer, attention, checkpointing, loss, adapters
//! and `PYTORCH_CUDA_ALLOC_CONF`; what a format cannot hold is said in a comment (or, for
//! JSON, on stderr). The tests parse every output (Python with Ruff's parser, JSON, YAML) and
//! `validation/emit_check.py` builds each with the real libraries.

mod accelerate;
mod deepspeed;
mod hf_trainer;
mod lightning;
mod pytorch;

use vramfit_core::model::Head;
use vramfit_core::plan::{Lever, Plan};
use vramfit_core::{
    Checkpointing, LoraTargets, LossKernel, Optimizer, OptimizerImpl, Precision, Strategy,
    TrainSetup,
};

use super::PlanReport;

/// What `--emit` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmitFormat {
    /// A PyTorch training loop: the loss divided by the accumulation steps, clipping, step,
    /// zero_grad.
    Pytorch,
    /// A Lightning `Trainer(...)` and the module's parts.
    Lightning,
    /// Hugging Face `TrainingArguments(...)`.
    HfTrainer,
    /// A DeepSpeed JSON config.
    Deepspeed,
    /// An accelerate config file (YAML).
    Accelerate,
}

/// The emitted text, and a note for stderr where the format has no comments.
pub struct Emitted {
    /// What goes to stdout.
    pub text: String,
    /// What the format cannot say.
    pub stderr_note: Option<String>,
}

/// Emits `plan` of `report` in `format`.
pub fn emit(format: EmitFormat, report: &PlanReport, plan: &Plan) -> Emitted {
    let cx = Emit::new(report, plan);
    match format {
        EmitFormat::Pytorch => Emitted { text: pytorch::emit(&cx), stderr_note: None },
        EmitFormat::Lightning => Emitted { text: lightning::emit(&cx), stderr_note: None },
        EmitFormat::HfTrainer => Emitted { text: hf_trainer::emit(&cx), stderr_note: None },
        EmitFormat::Deepspeed => deepspeed::emit(&cx),
        EmitFormat::Accelerate => Emitted { text: accelerate::emit(&cx), stderr_note: None },
    }
}

/// The learning rate the emitted optimizers start from (a placeholder the user tunes).
const LR: &str = "3e-4";

/// What every format needs of a plan.
pub(super) struct Emit<'a> {
    pub(super) report: &'a PlanReport,
    pub(super) plan: &'a Plan,
    pub(super) setup: &'a TrainSetup,
    /// Which plan it is (1-based), for the header.
    pub(super) rank: usize,
}

impl<'a> Emit<'a> {
    fn new(report: &'a PlanReport, plan: &'a Plan) -> Emit<'a> {
        let rank =
            report.outcome.plans.iter().position(|p| std::ptr::eq(p, plan)).map_or(1, |i| i + 1);
        Emit { report, plan, setup: &plan.config.setup, rank }
    }

    /// Comment lines (without the `#`) that say which plan this is.
    pub(super) fn header(&self) -> Vec<String> {
        let p = self.plan;
        let s = self.setup;
        let changes: Vec<String> = p
            .changes
            .iter()
            .filter(|c| c.lever != Lever::MicroBatch)
            .map(super::text::long)
            .collect();
        let mut lines = vec![
            format!(
                "vramfit plan #{} for {} on {}: micro-batch {} × {} accumulation steps = {} sequences of {} tokens",
                self.rank,
                self.report.model,
                self.report.gpu,
                s.micro_batch,
                s.grad_accum,
                p.global_batch(),
                s.seq_len
            ),
            format!(
                "predicted: {} on the device ({} reserved, {} allocated at the peak), {} headroom; step time {:.2}× yours",
                p.verdict.device_used,
                p.verdict.peak_reserved,
                p.estimate.peak_allocated,
                super::text::signed(p.verdict.headroom),
                p.cost.relative_step_time
            ),
        ];
        if !changes.is_empty() {
            lines.push(format!("changes: {}", changes.join("; ")));
        }
        if let Some(launch) = self.launch() {
            lines.push(format!("launch: {launch}"));
        }
        if let Some(h) = p.estimate.ranks.host_memory {
            lines.push(format!(
                "host memory for the offload: {} per node ({} pinned)",
                h.per_node, h.pinned_per_node
            ));
        }
        lines
    }

    /// How a run on several GPUs, or under DeepSpeed, is started (`None`: `python train.py`).
    pub(super) fn launch(&self) -> Option<String> {
        let p = &self.setup.parallel;
        let nodes = if p.nodes > 1 { format!(" --nnodes {}", p.nodes) } else { String::new() };
        match p.strategy {
            Strategy::None => None,
            Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 => Some(format!(
                "deepspeed --num_gpus {}{} train.py (or accelerate launch with --emit accelerate's config)",
                p.gpus_per_node,
                if p.nodes > 1 { format!(" --num_nodes {}", p.nodes) } else { String::new() }
            )),
            Strategy::Ddp | Strategy::Fsdp | Strategy::Hsdp => Some(format!(
                "torchrun --nproc-per-node {}{nodes} train.py (or accelerate launch with --emit accelerate's config)",
                p.gpus_per_node
            )),
        }
    }

    /// DeepSpeed's `zero_optimization` section for the plan's strategy and offload (stage 0
    /// where DeepSpeed does not run: one GPU, DDP, FSDP).
    pub(super) fn zero_optimization(&self) -> serde_json::Value {
        let p = &self.setup.parallel;
        let mut zero = serde_json::Map::new();
        zero.insert("stage".into(), p.strategy.zero_stage().unwrap_or(0).into());
        if p.strategy.zero_stage().is_some() {
            let cpu = serde_json::json!({ "device": "cpu", "pin_memory": true });
            if p.offload.optimizer() {
                zero.insert("offload_optimizer".into(), cpu.clone());
            }
            if p.offload.params() {
                zero.insert("offload_param".into(), cpu);
            }
        }
        serde_json::Value::Object(zero)
    }

    /// `PYTORCH_CUDA_ALLOC_CONF`'s value when the plan sets it.
    pub(super) fn alloc_conf(&self) -> Option<&'static str> {
        super::alloc_conf_line(self.plan)
    }

    /// The model's id for `from_pretrained`.
    pub(super) fn model_id(&self) -> String {
        self.report.hub_id.clone().unwrap_or_else(|| self.report.model.clone())
    }

    /// The transformers module and class of the model's repeated layer (what FSDP wraps).
    pub(super) fn layer(&self) -> (&'static str, &'static str) {
        use vramfit_core::model::Architecture as A;
        match self.report.spec.architecture {
            A::Llama => ("llama", "LlamaDecoderLayer"),
            A::Mistral => ("mistral", "MistralDecoderLayer"),
            A::Mixtral => ("mixtral", "MixtralDecoderLayer"),
            A::Qwen2 => ("qwen2", "Qwen2DecoderLayer"),
            A::Qwen3 => ("qwen3", "Qwen3DecoderLayer"),
            A::Gemma => ("gemma", "GemmaDecoderLayer"),
            A::Gemma2 => ("gemma2", "Gemma2DecoderLayer"),
            A::Gemma3Text => ("gemma3", "Gemma3DecoderLayer"),
            A::Phi3 => ("phi3", "Phi3DecoderLayer"),
            A::Gpt2 => ("gpt2", "GPT2Block"),
            A::GptNeox => ("gpt_neox", "GPTNeoXLayer"),
            A::Bert => ("bert", "BertLayer"),
            A::Roberta => ("roberta", "RobertaLayer"),
            A::Olmo2 => ("olmo2", "Olmo2DecoderLayer"),
            A::Qwen2Moe => ("qwen2_moe", "Qwen2MoeDecoderLayer"),
            A::Qwen3Moe => ("qwen3_moe", "Qwen3MoeDecoderLayer"),
            A::ModernBert => ("modernbert", "ModernBertEncoderLayer"),
            A::DeepseekV2 => ("deepseek_v2", "DeepseekV2DecoderLayer"),
            A::DeepseekV3 => ("deepseek_v3", "DeepseekV3DecoderLayer"),
            A::T5 => ("t5", "T5Block"),
            A::Mt5 => ("mt5", "MT5Block"),
        }
    }

    /// The layer's class name.
    pub(super) fn layer_class(&self) -> &'static str {
        self.layer().1
    }

    /// The import of the layer's class.
    pub(super) fn layer_import(&self) -> String {
        let (module, class) = self.layer();
        format!("from transformers.models.{module}.modeling_{module} import {class}")
    }

    /// The `AutoModelFor*` class of the model's head.
    pub(super) fn auto_class(&self) -> &'static str {
        match self.report.spec.head {
            Head::MaskedLm => "AutoModelForMaskedLM",
            Head::CausalLm => "AutoModelForCausalLM",
            Head::SequenceClassification(_) => "AutoModelForSequenceClassification",
            Head::TokenClassification => "AutoModelForTokenClassification",
            Head::Seq2SeqLm => "AutoModelForSeq2SeqLM",
        }
    }

    /// The `from_pretrained(...)` call with the attention kernel (and bf16 weights for pure
    /// bf16).
    pub(super) fn load_model(&self) -> String {
        let attention = match self.setup.attention {
            vramfit_core::Attention::Eager => "eager",
            vramfit_core::Attention::Sdpa => "sdpa",
            vramfit_core::Attention::Flash => "flash_attention_2",
        };
        let dtype = match self.setup.precision {
            Precision::Bf16 => ", dtype=torch.bfloat16",
            Precision::Fp16True => ", dtype=torch.float16",
            _ => "",
        };
        let quantization = match self.bnb_config() {
            Some(config) => format!(", quantization_config={config}"),
            None => String::new(),
        };
        format!(
            "{}.from_pretrained({:?}, attn_implementation={attention:?}{dtype}{quantization})",
            self.auto_class(),
            self.model_id()
        )
    }

    /// Whether the quantised base goes through `prepare_model_for_kbit_training`: with mixed
    /// precision or fp32; a pure 16-bit base is estimated without it.
    pub(super) fn kbit_prepare(&self) -> bool {
        self.setup.quantization.is_some() && !self.setup.precision.is_pure()
    }

    /// QLoRA's `BitsAndBytesConfig(...)` (needs `import torch` and
    /// `from transformers import BitsAndBytesConfig`), when the plan quantises the base.
    pub(super) fn bnb_config(&self) -> Option<String> {
        let q = self.setup.quantization.as_ref()?;
        let dtype = format!("torch.{}", q.compute_dtype.torch_name());
        Some(if q.kind.four_bit() {
            format!(
                "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type={:?}, bnb_4bit_use_double_quant={}, bnb_4bit_compute_dtype={dtype})",
                q.kind.name(),
                if q.double_quant { "True" } else { "False" }
            )
        } else {
            "BitsAndBytesConfig(load_in_8bit=True)".to_string()
        })
    }

    /// Statements on `model` after loading (checkpointing, LoRA, the chunked loss), with
    /// the imports they need.
    pub(super) fn model_statements(&self, model: &str) -> (Vec<String>, Vec<String>) {
        let (mut imports, mut lines) = (Vec::new(), Vec::new());
        match self.setup.checkpointing {
            Checkpointing::None => {}
            Checkpointing::Full => lines.push(format!(
                "{model}.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{\"use_reentrant\": False}})"
            )),
            Checkpointing::Every(n) => lines.push(format!(
                "{model}.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{\"use_reentrant\": False}}, every_n_layers={n})  # layers 0, {n}, 2×{n}, ...: transformers with every_n_layers (5.24 has it)"
            )),
        }
        if self.setup.quantization.is_some() {
            imports.push("from transformers import BitsAndBytesConfig".to_string());
            if self.kbit_prepare() {
                imports.push("from peft import prepare_model_for_kbit_training".to_string());
                // Its own checkpointing is off: the plan's is set above (or by the Trainer).
                lines.push(format!(
                    "{model} = prepare_model_for_kbit_training({model}, use_gradient_checkpointing=False)  # QLoRA: bitsandbytes 4-bit base (CUDA); the other parameters upcast to fp32"
                ));
            } else {
                lines.push(
                    "# QLoRA on a 16-bit base: no prepare_model_for_kbit_training, which would upcast the other parameters to fp32".to_string(),
                );
            }
        }
        if let Some(lora) = &self.setup.lora {
            imports.push("from peft import LoraConfig, get_peft_model".to_string());
            let targets = match &lora.targets {
                LoraTargets::PeftDefault => String::new(),
                LoraTargets::AllLinear => ", target_modules=\"all-linear\"".to_string(),
                LoraTargets::Modules(m) => format!(", target_modules={m:?}"),
            };
            let dropout = if lora.dropout { ", lora_dropout=0.05" } else { "" };
            let save = if lora.modules_to_save.is_empty() {
                String::new()
            } else {
                format!(", modules_to_save={:?}", lora.modules_to_save)
            };
            let task = match self.report.spec.head {
                Head::MaskedLm => "",
                Head::CausalLm => ", task_type=\"CAUSAL_LM\"",
                Head::SequenceClassification(_) => ", task_type=\"SEQ_CLS\"",
                Head::TokenClassification => ", task_type=\"TOKEN_CLS\"",
                Head::Seq2SeqLm => ", task_type=\"SEQ_2_SEQ_LM\"",
            };
            lines.push(format!(
                "{model} = get_peft_model({model}, LoraConfig(r={}, lora_alpha={}{targets}{dropout}{save}{task}))",
                lora.rank, lora.alpha
            ));
        }
        if self.setup.loss == LossKernel::Chunked {
            imports.push(
                "from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance"
                    .to_string(),
            );
            lines.push(format!(
                "_apply_liger_kernel_to_instance(model={model}, fused_linear_cross_entropy=True, cross_entropy=False, rope=False, rms_norm=False, swiglu=False, geglu=False)  # only the chunked loss"
            ));
        }
        (imports, lines)
    }

    /// The optimizer's construction on `params`, and its import.
    pub(super) fn optimizer(&self, params: &str) -> (Option<&'static str>, String) {
        let s = self.setup;
        let fused = if s.optimizer_impl == OptimizerImpl::Fused { ", fused=True" } else { "" };
        let foreach =
            if s.optimizer_impl == OptimizerImpl::ForLoop { ", foreach=False" } else { "" };
        match s.optimizer {
            Optimizer::Adam => {
                (None, format!("torch.optim.Adam({params}, lr={LR}{fused}{foreach})"))
            }
            Optimizer::Adamw => {
                (None, format!("torch.optim.AdamW({params}, lr={LR}{fused}{foreach})"))
            }
            Optimizer::Sgd => (None, format!("torch.optim.SGD({params}, lr={LR}{fused}{foreach})")),
            Optimizer::SgdMomentum => {
                (None, format!("torch.optim.SGD({params}, lr={LR}, momentum=0.9{fused}{foreach})"))
            }
            Optimizer::Adamw8bit => (
                Some("import bitsandbytes as bnb"),
                format!("bnb.optim.AdamW8bit({params}, lr={LR})"),
            ),
            Optimizer::PagedAdamw8bit => (
                Some("import bitsandbytes as bnb"),
                format!("bnb.optim.PagedAdamW8bit({params}, lr={LR})"),
            ),
            Optimizer::PagedAdamw => (
                Some("import bitsandbytes as bnb"),
                format!("bnb.optim.PagedAdamW({params}, lr={LR})"),
            ),
            Optimizer::Adafactor => {
                (None, format!("torch.optim.Adafactor({params}, lr=1e-2{foreach})"))
            }
            Optimizer::Lion => {
                (Some("import bitsandbytes as bnb"), format!("bnb.optim.Lion({params}, lr=1e-4)"))
            }
            // `plan` refuses --optimizer none (a benchmark, not a training run).
            Optimizer::None => (None, format!("torch.optim.SGD({params}, lr=0.0)")),
        }
    }

    /// Lightning's precision name.
    pub(super) fn lightning_precision(&self) -> &'static str {
        match self.setup.precision {
            Precision::Fp32 => "32-true",
            Precision::Fp16Mixed => "16-mixed",
            Precision::Bf16Mixed => "bf16-mixed",
            Precision::Bf16 => "bf16-true",
            Precision::Fp16True => "16-true",
        }
    }
}
