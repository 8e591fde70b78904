//! The hints printed under an error, and the wording of warnings that name a flag: the
//! command line is the binary's, so the core's errors and warnings carry no flag names and
//! the words that point at flags live here.

use vramfit_core::allocator::AllocConfError;
use vramfit_core::card::CardError;
use vramfit_core::gpu::GpuCatalogError;
use vramfit_core::model_toml::ModelTomlError;
use vramfit_core::peft::PeftError;
use vramfit_core::{ConfigError, EstimateError, ParallelError, Strategy, Task, TaskError, Warning};

/// A one-line hint for an error.
pub trait Hint {
    /// What to do about it, naming the flag or file to change.
    fn hint(&self) -> String;
}

impl Hint for EstimateError {
    fn hint(&self) -> String {
        match self {
            EstimateError::OutOfRange { field, .. } => {
                format!("pass a positive, realistic --{field}")
            }
            EstimateError::Overflow => "reduce --batch or --seq-len; no GPU holds this".into(),
            EstimateError::NoParameters => "pass a positive count such as --params 1B".into(),
            EstimateError::Peft(e) => e.hint(),
            EstimateError::Parallel(e) => e.hint(),
            EstimateError::TargetLenWithoutDecoder { .. } => {
                "drop --target-len, or use an encoder-decoder model such as t5-small or flan-t5-base".into()
            }
            EstimateError::Seq2Seq { .. } => {
                "encoder-decoder models (T5) take --attention eager, full fine-tuning or LoRA, and the standard loss".into()
            }
        }
    }
}

impl Hint for ParallelError {
    fn hint(&self) -> String {
        match self {
            ParallelError::OutOfRange { field, .. } => {
                format!("pass a positive, realistic --{field}, such as --gpus 8 --nodes 2")
            }
            ParallelError::OffloadUnsupported { strategy, .. } => match strategy {
                Strategy::Zero1 | Strategy::Zero2 => {
                    "ZeRO-1/2 offload only the optimizer: use --offload optimizer, or --strategy zero3 to offload parameters".into()
                }
                Strategy::Fsdp | Strategy::Hsdp => {
                    "FSDP's CPU offload moves parameters, gradients and the optimizer together: use --offload params".into()
                }
                _ => "offload needs a sharding strategy: --strategy zero2 --offload optimizer, or --strategy zero3 / fsdp --offload params".into(),
            },
            ParallelError::ReshardWithoutFsdp(_) => {
                "drop --reshard-after-forward, or use --strategy fsdp".into()
            }
            ParallelError::ZeroPureBf16 => {
                "use --precision bf16-mixed (DeepSpeed's bf16 mode), or --strategy fsdp for pure bf16".into()
            }
            ParallelError::ZeroBucket(flag) => format!("give --{flag} a positive size"),
            ParallelError::IdleRanks { largest_dim0, .. } => format!(
                "use at most {largest_dim0} GPUs for FSDP, or --strategy zero3, which partitions flattened parameters"
            ),
        }
    }
}

impl Hint for TaskError {
    fn hint(&self) -> String {
        match self {
            TaskError::Unknown { .. } => {
                "use causal-lm, masked-lm, seq-cls, token-cls or seq2seq".into()
            }
            TaskError::Unsupported { supported, task, .. } => match task {
                Task::MaskedLm => {
                    "masked-lm needs an encoder such as bert-base-uncased; a decoder trains with --task causal-lm".into()
                }
                Task::CausalLm => {
                    "causal-lm needs a decoder such as gpt2; an encoder trains with --task masked-lm".into()
                }
                Task::Seq2Seq => {
                    "seq2seq needs an encoder-decoder such as t5-small or flan-t5-base; a decoder trains with --task causal-lm".into()
                }
                _ => format!("use --task with one of: {supported}"),
            },
            TaskError::NotModelled { supported, .. } => {
                format!("use --task {supported}, or a model whose classification heads are modelled such as bert-base-uncased")
            }
            TaskError::Labels { max, .. } => {
                format!("give --num-labels the number of classes, 1 to {max} (2 by default)")
            }
            TaskError::Dropout { .. } => {
                "set classifier_dropout in config.json to a probability below 1".into()
            }
        }
    }
}

impl Hint for ConfigError {
    fn hint(&self) -> String {
        match self {
            ConfigError::Json { .. } | ConfigError::NotAnObject | ConfigError::TooLarge { .. } => {
                "pass the model's config.json (the small JSON file next to the weights), or a catalog name such as llama-3.1-8b".into()
            }
            ConfigError::UnknownArchitecture { .. } => {
                "estimate a similar supported architecture, or use --params for model states only".into()
            }
            ConfigError::Missing { field } => {
                format!("add '{field}' to config.json (see the model card's config on the Hugging Face Hub)")
            }
            ConfigError::WrongType { field, .. }
            | ConfigError::OutOfRange { field, .. }
            | ConfigError::NotDivisible { field, .. }
            | ConfigError::Inconsistent { field, .. }
            | ConfigError::UnknownActivation { field, .. } => {
                format!("check '{field}' against the model's published config.json")
            }
            ConfigError::Overflow => "check the sizes in config.json; no real model is this large".into(),
        }
    }
}

impl Hint for ModelTomlError {
    fn hint(&self) -> String {
        match self {
            ModelTomlError::TooLarge { .. } | ModelTomlError::Syntax { .. } => {
                "pass a model TOML such as examples/stapel.toml (keys: vocab_size, hidden_size, layers, heads, ffn_size, ffn, norm, positions, tied_embeddings, bias)".into()
            }
            ModelTomlError::UnknownKey { .. } => format!(
                "the keys of a model TOML are: {}",
                vramfit_core::model_toml::KEYS.join(", ")
            ),
            ModelTomlError::Missing { field } => match *field {
                "max_positions" => {
                    "learned positions need their table's rows: add max_positions (such as 1024)"
                        .into()
                }
                _ => format!("add {field} = ... to the model TOML (see examples/stapel.toml)"),
            },
            ModelTomlError::WrongType { field, .. } | ModelTomlError::OutOfRange { field, .. } => {
                format!("fix {field} in the model TOML")
            }
            ModelTomlError::NotAProbability { field, .. } => {
                format!("give {field} a probability in [0, 1), such as 0.1")
            }
            ModelTomlError::NotDivisible { field, other, .. } => match *field {
                "heads" => "choose heads that divide hidden_size, or give head_dim (swiglu models)".into(),
                _ => format!("choose {field} that divides {other}"),
            },
            ModelTomlError::UnknownChoice { field, expected, .. } => {
                format!("set {field} to one of: {expected}")
            }
            ModelTomlError::NoArchitecture { .. } => {
                "use an MLP ffn (gelu, gelu-tanh, gelu-new, relu) with norm = \"layernorm\" and learned or rotary positions, or ffn = \"swiglu\" with norm = \"rmsnorm\" and rotary positions".into()
            }
            ModelTomlError::NotInArchitecture { field, .. } => match *field {
                "bias" => "set bias = true, or describe a swiglu / rmsnorm / rotary model, whose linears may go without biases".into(),
                "kv_heads" => "drop kv_heads, or describe a swiglu / rmsnorm / rotary model for grouped-query attention".into(),
                _ => "drop head_dim, or describe a swiglu / rmsnorm / rotary model for heads of another width".into(),
            },
            ModelTomlError::Overflow => {
                "check the sizes in the model TOML; no real model is this large".into()
            }
        }
    }
}

impl Hint for GpuCatalogError {
    fn hint(&self) -> String {
        "use a catalog id such as rtx-3090, a100-80gb, h100 (vramfit estimate --list-gpus) or a capacity such as 24GiB".to_string()
    }
}

impl Hint for CardError {
    fn hint(&self) -> String {
        "pass a smaller --margin (such as 1GiB or 3%) or --cuda-context".into()
    }
}

impl Hint for AllocConfError {
    fn hint(&self) -> String {
        match self {
            AllocConfError::AsyncBackend => {
                "drop backend:cudaMallocAsync (or pass --alloc-conf without it) to model the native allocator".into()
            }
            _ => "use key:value pairs such as expandable_segments:True,max_split_size_mb:128".into(),
        }
    }
}

impl Hint for PeftError {
    fn hint(&self) -> String {
        match self {
            PeftError::UnknownTarget { available, .. } => {
                format!("use all-linear or some of: {available}")
            }
            PeftError::UnknownModule { available, .. } => format!("use some of: {available}"),
            PeftError::TiedHead => {
                "drop lm_head from --modules-to-save, or name embed_tokens".into()
            }
            PeftError::Rank(_) => "typical ranks are 8 to 256".into(),
            PeftError::FreezeLayers { layers, .. } => {
                format!("give at most layers:{layers}")
            }
            PeftError::FreezeWithLora => "drop --freeze, or drop the --lora-* flags".into(),
            PeftError::NothingTrains => "freeze fewer layers".into(),
            PeftError::QuantizationWithoutLora => {
                "add --lora-rank R (QLoRA trains adapters on the quantised base), or drop --quantization".into()
            }
            PeftError::DoubleQuantInt8 => "use --quantization nf4, or drop --double-quant".into(),
            PeftError::ComputeDtype(_) => "use --compute-dtype bf16, fp16 or fp32".into(),
            PeftError::UnknownSkipModule { available, .. } => format!("use some of: {available}"),
            PeftError::DoraQuantized => "drop --use-dora, or estimate DoRA on the unquantised base".into(),
            PeftError::ExpertAdapters(_) => {
                "name the linear modules to adapt, e.g. --lora-targets q_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj".into()
            }
            PeftError::QuantizationSharded(_) => {
                "use one GPU or --strategy ddp with --quantization".into()
            }
            PeftError::NoDefaultTargets => {
                "name them: --lora-targets all-linear, or q_proj,v_proj for attention only".into()
            }
            PeftError::FusedHalf { given, missing } => {
                format!("add {missing} to --lora-targets, or drop {given}")
            }
            PeftError::ParamWrapper { feature, .. } => {
                let change = if *feature == "DoRA" { "drop --use-dora" } else { "use --lora-dropout 0" };
                format!("{change}, or adapt attention only (--lora-targets q_proj,k_proj,v_proj,o_proj)")
            }
        }
    }
}

impl Hint for vramfit_core::plan::PlanError {
    fn hint(&self) -> String {
        use vramfit_core::plan::PlanError;
        match self {
            PlanError::GlobalBatchNotDivisible { gpus, nearest: (below, above), .. } => format!(
                "each of the {gpus} GPUs needs a whole share: use --global-batch {below} or {above}"
            ),
            PlanError::GlobalBatchOutOfRange(_) => {
                "pass a positive, realistic --global-batch (sequences per optimizer step)".into()
            }
            PlanError::NoGpus => "pass at least one GPU".into(),
            PlanError::KeptMicroBatch { micro_batch, .. } => format!(
                "drop --keep micro-batch, or pass a --global-batch that --batch {micro_batch} divides"
            ),
            PlanError::KeptAndForbidden { lever, setting } => {
                format!(
                    "drop --keep {lever} or --forbid {setting}: a kept setting cannot be forbidden"
                )
            }
            PlanError::KeptUnsupported { lever, .. } => {
                format!("drop --keep {lever}, or plan for a GPU that runs it")
            }
            PlanError::AllowedAndRefused { lever, .. } => {
                format!("drop --allow {lever}, or drop it from --keep / --forbid")
            }
            PlanError::NothingLeft { lever, .. } => {
                format!("forbid fewer settings of {lever}, or --keep {lever}")
            }
            PlanError::Estimate(e) => e.hint(),
            PlanError::EncoderDecoder(_) => {
                "judge a setup with vramfit check or vramfit estimate --attention eager instead"
                    .into()
            }
        }
    }
}

/// A warning as the command line says it.
pub fn warning(w: &Warning) -> String {
    match w {
        Warning::StateDtypeIgnored { optimizer: vramfit_core::Optimizer::PagedAdamw } => {
            "bitsandbytes' paged-adamw keeps fp32 state; --optimizer-state-dtype is ignored".into()
        }
        Warning::StateDtypeIgnored { .. } => {
            "bitsandbytes 8-bit optimizers keep uint8 state; --optimizer-state-dtype is ignored"
                .into()
        }
        Warning::StrategyOnOneGpu { strategy } => format!(
            "--strategy {strategy} on one GPU has no other rank to share with: the estimate is one GPU's, with {strategy}'s own buffers; pass --gpus N"
        ),
        Warning::ZeroOnOneGpu => {
            "ZeRO on one GPU saves nothing without offload (it adds fp32 master weights and buckets): add --offload optimizer, or pass --gpus N".into()
        }
        Warning::SixteenBitQuantizedBase => {
            "a 16-bit base with --quantization is modelled without prepare_model_for_kbit_training (as LitGPT's bitsandbytes precision runs it); a script that calls it upcasts the other parameters to fp32: estimate that with --precision bf16-mixed".into()
        }
        Warning::LoraMergedExperts { bytes } => format!(
            "LoRA on the experts (PEFT's lora.ParamWrapper) merges each layer's adapter into a copy of all its experts, kept until that layer's backward ({bytes} over all layers); --lora-targets q_proj,k_proj,v_proj,o_proj avoids it"
        ),
        Warning::HsdpOnOneNode => {
            "--strategy hsdp on one node shards like fsdp: pass --nodes M to replicate across nodes".into()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every core error the CLI can print has a hint that is one line.
    #[test]
    fn hints_are_one_line() {
        let errors: Vec<Box<dyn Hint>> = vec![
            Box::new(EstimateError::Overflow),
            Box::new(EstimateError::NoParameters),
            Box::new(EstimateError::OutOfRange { field: "batch", value: 0, max: 1 }),
            Box::new(ConfigError::NotAnObject),
            Box::new(ConfigError::Missing { field: "vocab_size" }),
            Box::new(ConfigError::Overflow),
            Box::new(vramfit_core::plan::PlanError::NoGpus),
            Box::new(vramfit_core::plan::PlanError::GlobalBatchNotDivisible {
                global: 10,
                gpus: 4,
                nearest: (8, 12),
            }),
        ];
        for e in errors {
            let h = e.hint();
            assert!(!h.is_empty() && !h.contains('\n'), "{h}");
        }
    }

    #[test]
    fn the_state_dtype_warning_names_the_flag() {
        let ignored = Warning::StateDtypeIgnored { optimizer: vramfit_core::Optimizer::Adamw8bit };
        assert!(warning(&ignored).contains("--optimizer-state-dtype"));
        assert!(!ignored.to_string().contains("--"));
    }
}
