//! The machine-readable estimate: one JSON object, built from the typed [`EstimateJson`]. Its
//! keys are the same for every input: what was not computed (no `--gpu`, no architecture
//! behind `--params`) is null. The schema, `docs/schema/estimate.schema.json`, is generated
//! from these types (`commands::schema`).

use std::io::{self, Write};

use schemars::JsonSchema;
use serde::Serialize;
use vramfit_core::parallel::{DdpConfig, Parallel, WorstRank, ZeroConfig};
use vramfit_core::{DType, LossKernel, TrainSetup};

use super::Report;

/// Bumped when a key changes meaning or disappears; new keys do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

/// A dtype as the CLI spells it (`--optimizer-state-dtype fp32`).
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "fp32",
        DType::F16 => "fp16",
        DType::Bf16 => "bf16",
        DType::U8 => "int8",
        other => other.torch_name(),
    }
}

/// The training setup, with the CLI's spellings: the one struct every command's JSON uses for
/// a setup (estimate, plan, measure's estimate). A new setup option is a new field here.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SetupJson {
    /// Sequences per micro-batch (`-b`).
    pub micro_batch: u64,
    /// Tokens per sequence (`-s`).
    pub seq_len: u64,
    /// `--precision`: fp32, fp16-mixed, bf16-mixed, bf16 or fp16-true.
    pub precision: String,
    /// `--optimizer`.
    pub optimizer: String,
    /// `--optimizer-state-dtype` (fp32, bf16, int8, ...); null: the parameters' dtype, as
    /// PyTorch does.
    pub optimizer_state_dtype: Option<String>,
    /// `--attention`: eager, sdpa or flash.
    pub attention: String,
    /// `--checkpointing`: none, full or every-N.
    pub checkpointing: String,
    /// Micro-batches per optimizer step (`--grad-accum`).
    pub grad_accum: u64,
    /// How `torch.optim` runs the step: foreach, for-loop or fused.
    pub optimizer_impl: String,
    /// Parts frozen in full fine-tuning; absent when nothing is frozen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freeze: Option<FreezeJson>,
    /// LoRA adapters; absent when every parameter is trained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraJson>,
    /// A bitsandbytes-quantised base (`--quantization`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<QuantizationJson>,
    /// What the loop keeps of the model's output: trainer or custom.
    pub training_loop: String,
    /// How `zero_grad()` clears the gradients.
    pub zero_grad: String,
    /// `config.use_cache` as given; null: the model config's value.
    pub use_cache: Option<bool>,
    /// The loss kernel; absent for the standard cross-entropy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<String>,
    /// The GPUs and how the ranks share the model (one GPU included).
    pub parallel: ParallelJson,
    /// An encoder-decoder's target length (`--target-len`: the decoder's tokens); absent when
    /// not given (the source length, `seq_len`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_len: Option<u64>,
}

/// A base quantised by bitsandbytes (`BitsAndBytesConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct QuantizationJson {
    /// `--quantization`: nf4, fp4 or int8.
    pub kind: String,
    /// `--double-quant`.
    pub double_quant: bool,
    /// `--compute-dtype` (fp32, bf16, fp16).
    pub compute_dtype: String,
    /// `--quant-skip-modules`; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skip_modules: Vec<String>,
}

/// Frozen parts (`--freeze`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct FreezeJson {
    /// The embedding tables.
    pub embeddings: bool,
    /// The first this-many layers.
    pub first_layers: u64,
}

/// A `peft.LoraConfig`, as far as memory is concerned.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct LoraJson {
    /// `r`.
    pub rank: u64,
    /// `lora_alpha`.
    pub alpha: u64,
    /// `target_modules`.
    pub targets: LoraTargetsJson,
    /// `lora_dropout > 0`.
    pub dropout: bool,
    /// `modules_to_save`.
    pub modules_to_save: Vec<String>,
    /// `use_dora`; absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub use_dora: bool,
}

/// Which linear layers get an adapter: `"peft-default"`, `"all-linear"` or
/// `{"modules": [names]}`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LoraTargetsJson {
    /// PEFT's default for the architecture.
    PeftDefault,
    /// Every linear layer but the output layer.
    AllLinear,
    /// These module names.
    Modules(Vec<String>),
}

/// The GPUs and how the data-parallel ranks share the model.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ParallelJson {
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Nodes.
    pub nodes: u64,
    /// `--strategy`: none, ddp, zero1, zero2, zero3, fsdp or hsdp.
    pub strategy: String,
    /// FSDP's `reshard_after_forward`.
    pub reshard_after_forward: bool,
    /// `--offload`: none, optimizer, params or both.
    pub offload: String,
    /// DDP's buckets.
    pub ddp: DdpJson,
    /// DeepSpeed's ZeRO knobs, in elements.
    pub zero: ZeroJson,
}

/// DDP's buckets, in bytes.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct DdpJson {
    /// `bucket_cap_mb`, in bytes.
    pub bucket_cap_bytes: u64,
    /// The first bucket's cap, in bytes.
    pub first_bucket_cap_bytes: u64,
    /// `gradient_as_bucket_view`.
    pub gradient_as_bucket_view: bool,
}

/// DeepSpeed's ZeRO knobs, in elements.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ZeroJson {
    /// `reduce_bucket_size`.
    pub reduce_bucket_size: u64,
    /// `allgather_bucket_size`.
    pub allgather_bucket_size: u64,
    /// `stage3_prefetch_bucket_size`.
    pub prefetch_bucket_size: u64,
    /// `stage3_max_live_parameters`.
    pub max_live_parameters: u64,
    /// `stage3_param_persistence_threshold`.
    pub param_persistence_threshold: u64,
    /// `stage3_max_reuse_distance`.
    pub max_reuse_distance: u64,
    /// `sub_group_size`.
    pub sub_group_size: u64,
}

impl ParallelJson {
    fn of(p: &Parallel) -> ParallelJson {
        let DdpConfig { bucket_cap_bytes, first_bucket_cap_bytes, gradient_as_bucket_view } = p.ddp;
        let ZeroConfig {
            reduce_bucket_size,
            allgather_bucket_size,
            prefetch_bucket_size,
            max_live_parameters,
            param_persistence_threshold,
            max_reuse_distance,
            sub_group_size,
        } = p.zero;
        ParallelJson {
            gpus_per_node: p.gpus_per_node,
            nodes: p.nodes,
            strategy: p.strategy.name().into(),
            reshard_after_forward: p.reshard_after_forward,
            offload: p.offload.name().into(),
            ddp: DdpJson { bucket_cap_bytes, first_bucket_cap_bytes, gradient_as_bucket_view },
            zero: ZeroJson {
                reduce_bucket_size,
                allgather_bucket_size,
                prefetch_bucket_size,
                max_live_parameters,
                param_persistence_threshold,
                max_reuse_distance,
                sub_group_size,
            },
        }
    }
}

/// The setup as JSON, with the CLI's spellings.
pub fn setup_json(setup: &TrainSetup) -> SetupJson {
    use vramfit_core::setup::LoraTargets;
    SetupJson {
        micro_batch: setup.micro_batch,
        seq_len: setup.seq_len,
        precision: setup.precision.name().into(),
        optimizer: setup.optimizer.name().into(),
        optimizer_state_dtype: setup.optimizer_state_dtype.map(|d| dtype_name(d).into()),
        attention: setup.attention.name().into(),
        checkpointing: setup.checkpointing.to_string(),
        grad_accum: setup.grad_accum,
        optimizer_impl: setup.optimizer_impl.name().into(),
        freeze: setup.freeze.any().then_some(FreezeJson {
            embeddings: setup.freeze.embeddings,
            first_layers: setup.freeze.first_layers,
        }),
        lora: setup.lora.as_ref().map(|l| LoraJson {
            rank: l.rank,
            alpha: l.alpha,
            targets: match &l.targets {
                LoraTargets::PeftDefault => LoraTargetsJson::PeftDefault,
                LoraTargets::AllLinear => LoraTargetsJson::AllLinear,
                LoraTargets::Modules(names) => LoraTargetsJson::Modules(names.clone()),
            },
            dropout: l.dropout,
            modules_to_save: l.modules_to_save.clone(),
            use_dora: l.use_dora,
        }),
        quantization: setup.quantization.as_ref().map(|q| QuantizationJson {
            kind: q.kind.name().into(),
            double_quant: q.double_quant,
            compute_dtype: dtype_name(q.compute_dtype).into(),
            skip_modules: q.skip_modules.clone(),
        }),
        training_loop: setup.training_loop.name().into(),
        zero_grad: setup.zero_grad.name().into(),
        use_cache: setup.use_cache,
        loss: (setup.loss != LossKernel::Standard).then(|| setup.loss.name().into()),
        parallel: ParallelJson::of(&setup.parallel),
        target_len: setup.target_len,
    }
}

/// What the estimate assumes beyond the flags.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AssumedJson {
    /// The training loop assumed: trainer or custom.
    #[serde(rename = "loop")]
    pub training_loop: String,
    /// How `zero_grad()` clears the gradients.
    pub zero_grad: String,
    /// Whether the KV cache is built in training; null without an architecture.
    pub use_cache: Option<bool>,
    /// Where that comes from (`config`, `flag`, `checkpointing`, `encoder`, `toml`); null
    /// without an architecture.
    pub use_cache_from: Option<String>,
    /// The device the estimate is for.
    pub target: String,
}

/// What set the reserved peak: the allocation that grew the segments last.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReservedSetByJson {
    /// Its size.
    pub bytes: Option<u64>,
    /// Its component (`parameters`, `activations`, ...).
    pub component: Option<String>,
    /// The phase it was made in (`forward`, `loss`, `backward`, `optimizer_step`).
    pub phase: Option<String>,
    /// The simulated iteration.
    pub iteration: Option<u32>,
}

/// The memory at the peak by component, in bytes; null where not computed (no architecture).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ComponentsJson {
    /// Weights.
    pub parameters: Option<u64>,
    /// Gradients.
    pub gradients: Option<u64>,
    /// Optimizer state.
    pub optimizer_state: Option<u64>,
    /// Activations saved for backward.
    pub activations: Option<u64>,
    /// Temporaries live at the peak.
    pub temporaries: Option<u64>,
    /// Autocast's casted weights.
    pub autocast_cache: Option<u64>,
    /// Library workspaces (cuBLAS).
    pub workspace: Option<u64>,
}

/// The peak of each phase, in bytes; null where not computed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PhasePeaksJson {
    /// Through the layers.
    pub forward: Option<u64>,
    /// Head, logits, loss.
    pub loss: Option<u64>,
    /// Backward.
    pub backward: Option<u64>,
    /// The optimizer step.
    pub optimizer_step: Option<u64>,
}

/// The rank an estimate describes.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorstRankJson {
    /// One GPU.
    Single,
    /// Every rank holds the same.
    AllAlike,
    /// The rank whose ZeRO-2 partition cuts the largest parameters.
    PartitionCuttingParameters,
    /// Rank 0 (uneven shards leave the last ranks less).
    Rank0,
}

impl From<WorstRank> for WorstRankJson {
    fn from(w: WorstRank) -> Self {
        match w {
            WorstRank::Single => WorstRankJson::Single,
            WorstRank::AllAlike => WorstRankJson::AllAlike,
            WorstRank::PartitionCuttingParameters => WorstRankJson::PartitionCuttingParameters,
            WorstRank::Rank0 => WorstRankJson::Rank0,
        }
    }
}

/// Host memory offloading needs; null without offload.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HostMemoryJson {
    /// Per rank.
    pub per_rank_bytes: Option<u64>,
    /// Of which pinned.
    pub pinned_per_rank_bytes: Option<u64>,
    /// Ranks on a node.
    pub ranks_per_node: Option<u64>,
    /// Per node.
    pub per_node_bytes: Option<u64>,
    /// Of which pinned.
    pub pinned_per_node_bytes: Option<u64>,
}

/// Where the figures stand among the GPUs.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RanksJson {
    /// Data-parallel ranks.
    pub data_parallel_ranks: u64,
    /// `micro_batch × grad_accum × ranks`; null if it overflows.
    pub effective_batch: Option<u64>,
    /// The rank described; null for a bare parameter count.
    pub worst_rank: Option<WorstRankJson>,
    /// Host memory offloading needs.
    pub host_memory: HostMemoryJson,
    /// NCCL's buffers, outside PyTorch's allocator.
    pub nccl_allowance_bytes: u64,
}

/// `vramfit estimate --format json`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EstimateJson {
    /// The version of this schema.
    pub schema_version: u32,
    /// What the estimate assumes.
    pub assumed: AssumedJson,
    /// The model's label; null for `--params`.
    pub model: Option<String>,
    /// What the model's description was read from.
    pub model_source: ModelSourceJson,
    /// Parameters.
    pub parameters: u64,
    /// Trainable parameters, with LoRA or frozen parts only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trainable_parameters: Option<u64>,
    /// Parameters with the adapters, with LoRA or frozen parts only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters_with_adapters: Option<u64>,
    /// `max_memory_allocated()` predicted; null without an architecture.
    pub peak_allocated_bytes: Option<u64>,
    /// The phase of that peak.
    pub peak_phase: Option<String>,
    /// `max_memory_reserved()` predicted.
    pub peak_reserved_bytes: Option<u64>,
    /// Reserved but unallocated at the reserved peak.
    pub fragmentation_bytes: Option<u64>,
    /// What set the reserved peak.
    pub reserved_peak_set_by: Option<ReservedSetByJson>,
    /// Parameters, gradients and optimizer state.
    pub model_states_bytes: u64,
    /// The memory at the peak by component.
    pub components: ComponentsJson,
    /// The peak of each phase.
    pub phase_peaks: PhasePeaksJson,
    /// Where the figures stand among the GPUs.
    pub ranks: RanksJson,
    /// The setup.
    pub setup: SetupJson,
    /// The verdict against `--gpu`, every key null without it.
    #[serde(flatten)]
    pub verdict: VerdictJson,
    /// Things the user should know.
    pub warnings: Vec<String>,
}

/// What a model's description was read from, and the architecture it is simulated as.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ModelSourceJson {
    /// `built-in`, `config.json`, `hub` (a config.json in the local Hugging Face cache),
    /// `toml` (a model TOML: your own transformer's sizes) or `params` (`--params`, a bare
    /// count).
    pub kind: String,
    /// The file read; null for a built-in model and `--params`.
    pub path: Option<String>,
    /// The architecture (`model_type`) simulated: for a model TOML, the one its ffn, norm and
    /// positions select; null for `--params`.
    pub architecture: Option<String>,
}

/// The verdict against a GPU (keys of the top-level object), null without `--gpu`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VerdictJson {
    /// The GPU's label.
    pub gpu: Option<String>,
    /// Memory CUDA exposes to PyTorch on that card.
    pub cuda_visible_bytes: Option<u64>,
    /// The CUDA context's budget.
    pub cuda_context_bytes: Option<u64>,
    /// Where that figure comes from: given, observed, derived, eager or default.
    pub cuda_context_basis: Option<String>,
    /// What PyTorch's allocator may reserve.
    pub capacity_bytes: Option<u64>,
    /// Kept free on the card.
    pub margin_bytes: Option<u64>,
    /// What nvidia-smi would show for the process.
    pub device_used_bytes: Option<u64>,
    /// Whether it fits.
    pub fits: Option<bool>,
    /// Card less margin minus device usage (negative when it does not fit).
    pub headroom_bytes: Option<i128>,
    /// The largest micro-batch that fits.
    pub max_micro_batch: Option<u64>,
}

fn ranks_json(setup: &TrainSetup, report: Option<&vramfit_core::RankReport>) -> RanksJson {
    let host = report.and_then(|r| r.host_memory);
    RanksJson {
        data_parallel_ranks: setup.parallel.ranks(),
        effective_batch: vramfit_core::parallel::effective_batch(setup),
        worst_rank: report.map(|r| r.worst_rank.into()),
        host_memory: HostMemoryJson {
            per_rank_bytes: host.map(|h| h.per_rank.get()),
            pinned_per_rank_bytes: host.map(|h| h.pinned_per_rank.get()),
            ranks_per_node: host.map(|h| h.ranks_per_node),
            per_node_bytes: host.map(|h| h.per_node.get()),
            pinned_per_node_bytes: host.map(|h| h.pinned_per_node.get()),
        },
        nccl_allowance_bytes: setup.parallel.nccl_allowance().get(),
    }
}

/// The report as its typed JSON.
pub fn output(report: &Report) -> EstimateJson {
    match report {
        Report::Full {
            model,
            origin,
            architecture,
            setup,
            estimate,
            verdict,
            warnings,
            trainable,
            assumed,
            ..
        } => {
            let r = estimate.reserved;
            let c = &estimate.components_at_peak;
            let p = &estimate.phase_peaks;
            EstimateJson {
                schema_version: SCHEMA_VERSION,
                assumed: AssumedJson {
                    training_loop: assumed.training_loop.name().into(),
                    zero_grad: assumed.zero_grad.name().into(),
                    use_cache: Some(assumed.kv_cache),
                    use_cache_from: Some(assumed.kv_cache_from.into()),
                    target: assumed.target.name().into(),
                },
                model: Some(model.clone()),
                model_source: ModelSourceJson {
                    kind: origin.kind().into(),
                    path: origin.path().map(str::to_string),
                    architecture: Some(architecture.model_type().into()),
                },
                parameters: estimate.parameters,
                trainable_parameters: trainable.map(|(t, _)| t),
                parameters_with_adapters: trainable.map(|(_, total)| total),
                peak_allocated_bytes: Some(estimate.peak_allocated.get()),
                peak_phase: Some(estimate.peak_phase.name().into()),
                peak_reserved_bytes: r.map(|r| r.peak_reserved),
                fragmentation_bytes: r.map(|r| r.fragmentation),
                reserved_peak_set_by: r.map(|r| ReservedSetByJson {
                    bytes: Some(r.set_by.bytes),
                    component: Some(r.set_by.component.name().into()),
                    phase: Some(r.set_by.phase.name().into()),
                    iteration: Some(r.set_by.iteration),
                }),
                model_states_bytes: estimate.model_states.get(),
                components: ComponentsJson {
                    parameters: Some(c.parameters.get()),
                    gradients: Some(c.gradients.get()),
                    optimizer_state: Some(c.optimizer_state.get()),
                    activations: Some(c.activations.get()),
                    temporaries: Some(c.temporaries.get()),
                    autocast_cache: Some(c.autocast_cache.get()),
                    workspace: Some(c.workspace.get()),
                },
                phase_peaks: PhasePeaksJson {
                    forward: Some(p.forward.get()),
                    loss: Some(p.loss.get()),
                    backward: Some(p.backward.get()),
                    optimizer_step: Some(p.optimizer_step.get()),
                },
                ranks: ranks_json(setup, Some(&estimate.ranks)),
                setup: setup_json(setup),
                verdict: VerdictJson::of(verdict.as_ref()),
                warnings: warnings.clone(),
            }
        }
        Report::StatesOnly { parameters, setup, states, verdict, warnings, target } => {
            // Without an architecture there is no step: no activations, so no step peak, and
            // the loop, zero_grad and the cache change nothing.
            EstimateJson {
                schema_version: SCHEMA_VERSION,
                assumed: AssumedJson {
                    training_loop: setup.training_loop.name().into(),
                    zero_grad: setup.zero_grad.name().into(),
                    use_cache: None,
                    use_cache_from: None,
                    target: target.name().into(),
                },
                model: None,
                model_source: ModelSourceJson {
                    kind: "params".into(),
                    path: None,
                    architecture: None,
                },
                parameters: *parameters,
                trainable_parameters: None,
                parameters_with_adapters: None,
                peak_allocated_bytes: None,
                peak_phase: None,
                peak_reserved_bytes: None,
                fragmentation_bytes: None,
                reserved_peak_set_by: Some(ReservedSetByJson {
                    bytes: None,
                    component: None,
                    phase: None,
                    iteration: None,
                }),
                model_states_bytes: states.total.get(),
                components: ComponentsJson {
                    parameters: Some(states.parameters.get()),
                    gradients: Some(states.gradients.get()),
                    optimizer_state: Some(states.optimizer_state.get()),
                    activations: None,
                    temporaries: None,
                    autocast_cache: None,
                    workspace: None,
                },
                phase_peaks: PhasePeaksJson {
                    forward: None,
                    loss: None,
                    backward: None,
                    optimizer_step: None,
                },
                ranks: ranks_json(setup, None),
                setup: setup_json(setup),
                verdict: VerdictJson::of(verdict.as_ref()),
                warnings: warnings.clone(),
            }
        }
    }
}

impl VerdictJson {
    fn of(v: Option<&super::Verdict>) -> VerdictJson {
        VerdictJson {
            gpu: v.map(|v| v.gpu.clone()),
            cuda_visible_bytes: v.map(|v| v.cuda_visible_bytes),
            cuda_context_bytes: v.map(|v| v.cuda_context_bytes),
            cuda_context_basis: v.map(|v| v.cuda_context_basis.into()),
            capacity_bytes: v.map(|v| v.capacity_bytes),
            margin_bytes: v.map(|v| v.margin_bytes),
            device_used_bytes: v.map(|v| v.device_used_bytes),
            fits: v.map(|v| v.fits),
            headroom_bytes: v.map(|v| v.headroom_bytes),
            max_micro_batch: v.and_then(|v| v.max_micro_batch),
        }
    }
}

/// The schema of [`EstimateJson`], as `docs/schema/estimate.schema.json` holds it.
#[cfg(test)]
pub fn schema() -> String {
    crate::commands::schema::schema_text::<EstimateJson>(
        "estimate",
        SCHEMA_VERSION,
        "The peak of one training step; the keys are the same for every input, null where not computed (no --gpu; no architecture behind --params).",
    )
}

/// Renders a report as one JSON object and a newline.
pub fn render(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    crate::commands::schema::write_json(out, &output(report))
}

#[cfg(test)]
mod tests {
    use vramfit_core::Checkpointing;
    use vramfit_core::parallel::{Offload, Strategy};
    use vramfit_core::setup::{Freeze, Lora, LoraTargets};

    use super::*;

    /// The typed setup writes what the core's own serialization writes (with the CLI's dtype
    /// names and `parallel` always present): a field added to `TrainSetup` and not to
    /// `SetupJson` fails here.
    #[test]
    fn setup_json_matches_the_cores_serialization() {
        let lora = TrainSetup {
            lora: Some(Lora {
                rank: 16,
                alpha: 32,
                targets: LoraTargets::Modules(vec!["q_proj".into(), "v_proj".into()]),
                dropout: true,
                modules_to_save: vec!["lm_head".into()],
                use_dora: true,
            }),
            freeze: Freeze { embeddings: true, first_layers: 2 },
            loss: LossKernel::Chunked,
            checkpointing: Checkpointing::Every(3),
            optimizer_state_dtype: Some(DType::U8),
            use_cache: Some(false),
            ..TrainSetup::default()
        };
        let mut parallel = TrainSetup::default();
        parallel.parallel.gpus_per_node = 8;
        parallel.parallel.strategy = Strategy::Zero3;
        parallel.parallel.offload = Offload::Both;
        let all_linear = TrainSetup {
            lora: Some(Lora {
                rank: 8,
                alpha: 8,
                targets: LoraTargets::AllLinear,
                dropout: false,
                modules_to_save: Vec::new(),
                use_dora: false,
            }),
            quantization: Some(vramfit_core::Quantization {
                kind: vramfit_core::QuantType::Nf4,
                double_quant: true,
                compute_dtype: DType::Bf16,
                skip_modules: vec!["score".into()],
            }),
            ..TrainSetup::default()
        };
        for setup in [TrainSetup::default(), lora, parallel, all_linear] {
            let mut core = serde_json::to_value(&setup).unwrap();
            let obj = core.as_object_mut().unwrap();
            obj.insert(
                "optimizer_state_dtype".into(),
                serde_json::json!(setup.optimizer_state_dtype.map(dtype_name)),
            );
            obj.insert("parallel".into(), serde_json::to_value(setup.parallel).unwrap());
            if let Some(q) = &setup.quantization {
                obj["quantization"]["compute_dtype"] =
                    serde_json::json!(dtype_name(q.compute_dtype));
            }
            assert_eq!(serde_json::to_value(setup_json(&setup)).unwrap(), core);
        }
    }
}
