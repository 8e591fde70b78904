//! The flags of several GPUs: how many, how they share the model, what is offloaded, and the
//! knobs of DDP and DeepSpeed (hidden from `-h`, listed by `--help`).

use vramfit_core::parallel::{DdpConfig, ZeroConfig};
use vramfit_core::{Offload, Parallel, Strategy, TrainSetup};

use crate::Failure;

/// Several GPUs.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ParallelArgs {
    /// GPUs per node, one data-parallel rank each. Figures are per GPU (the worst rank).
    /// Without --strategy, several GPUs run DDP.
    #[arg(long, value_name = "N")]
    pub gpus: Option<u64>,

    /// Nodes of --gpus GPUs each.
    #[arg(long, value_name = "M")]
    pub nodes: Option<u64>,

    /// How the ranks share the model: ddp, zero1, zero2, zero3 (DeepSpeed), fsdp (FSDP2
    /// fully_shard on every layer; FSDP1's full-shard), hsdp (shard within a node, replicate
    /// across nodes). FSDP1's names are accepted: full-shard, shard-grad-op (fsdp without
    /// resharding after forward), hybrid-shard.
    #[arg(long, value_name = "STRATEGY")]
    pub strategy: Option<String>,

    /// FSDP: free each layer's gathered parameters after its forward (true, FULL_SHARD) or keep
    /// them until its backward (false, FSDP1's SHARD_GRAD_OP).
    #[arg(long, value_name = "BOOL")]
    pub reshard_after_forward: Option<bool>,

    /// Move to host memory: optimizer (ZeRO-Offload), params (ZeRO-3 offload_param; FSDP's
    /// CPUOffloadPolicy, which takes gradients and the optimizer along), both. The host RAM it
    /// needs is reported per node.
    #[arg(long, value_name = "WHAT")]
    pub offload: Option<String>,

    /// The global batch (sequences per optimizer step over all GPUs): sets --grad-accum to
    /// global / (batch × GPUs × nodes), which must divide evenly.
    #[arg(long, value_name = "N")]
    pub global_batch: Option<u64>,

    /// DDP: make the .grads views into the gradient buckets (no second copy of the gradients).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true",
        hide_short_help = true
    )]
    pub gradient_as_bucket_view: Option<bool>,

    /// DDP's bucket_cap_mb (default 25).
    #[arg(long, value_name = "MB", hide_short_help = true)]
    pub bucket_cap_mb: Option<u64>,

    /// DeepSpeed's reduce_bucket_size, in elements (default 5e8).
    #[arg(long, value_name = "N", hide_short_help = true)]
    pub reduce_bucket_size: Option<String>,

    /// DeepSpeed's allgather_bucket_size, in elements (default 5e8).
    #[arg(long, value_name = "N", hide_short_help = true)]
    pub allgather_bucket_size: Option<String>,

    /// DeepSpeed's stage3_prefetch_bucket_size, in elements (default 5e7).
    #[arg(long, value_name = "N", hide_short_help = true)]
    pub stage3_prefetch_bucket_size: Option<String>,

    /// DeepSpeed's stage3_max_live_parameters, in elements (default 1e9).
    #[arg(long, value_name = "N", hide_short_help = true)]
    pub stage3_max_live_parameters: Option<String>,

    /// DeepSpeed's stage3_param_persistence_threshold, in elements (default 1e5).
    #[arg(long, value_name = "N", hide_short_help = true)]
    pub stage3_param_persistence_threshold: Option<String>,
}

impl ParallelArgs {
    /// The GPUs and strategy from the flags.
    pub fn parallel(&self) -> Result<Parallel, Failure> {
        let unknown = |e: vramfit_core::UnknownName| {
            Failure::with_hint(
                e.to_string(),
                format!("see `vramfit estimate --help` for the {} choices", e.kind),
            )
        };
        if self.nodes.is_some() && self.gpus.is_none() {
            return Err(Failure::with_hint(
                "--nodes needs --gpus (the GPUs of each node)",
                "pass --gpus N as well, such as --gpus 8 --nodes 2 for 16 GPUs",
            ));
        }
        let gpus = self.gpus.unwrap_or(1);
        let nodes = self.nodes.unwrap_or(1);
        // FSDP1's `SHARD_GRAD_OP` is FSDP without resharding after forward.
        let grad_op = self.strategy.as_deref().is_some_and(|text| {
            matches!(
                text.trim().to_ascii_lowercase().as_str(),
                "shard-grad-op" | "shard_grad_op" | "fsdp-grad-op"
            )
        });
        let strategy = match self.strategy.as_deref() {
            Some(_) if grad_op => Strategy::Fsdp,
            Some(text) => text.parse::<Strategy>().map_err(unknown)?,
            None if gpus.saturating_mul(nodes) > 1 => Strategy::Ddp,
            None => Strategy::None,
        };
        let reshard_after_forward = self.reshard_after_forward.unwrap_or(!grad_op);
        if strategy == Strategy::None && gpus.saturating_mul(nodes) > 1 {
            return Err(Failure::with_hint(
                format!("{} GPUs need a strategy to share the model", gpus.saturating_mul(nodes)),
                "pass --strategy ddp, zero1, zero2, zero3, fsdp or hsdp (or leave --strategy out for DDP)",
            ));
        }
        let offload = match self.offload.as_deref() {
            Some(text) => text.parse::<Offload>().map_err(unknown)?,
            None => Offload::None,
        };
        let gradient_as_bucket_view = self.gradient_as_bucket_view.unwrap_or(false);
        if gradient_as_bucket_view && strategy != Strategy::Ddp {
            return Err(Failure::with_hint(
                format!("--gradient-as-bucket-view is a DDP setting, not {strategy}'s"),
                "drop it, or use --strategy ddp",
            ));
        }
        let mut ddp = DdpConfig { gradient_as_bucket_view, ..DdpConfig::default() };
        if let Some(mb) = self.bucket_cap_mb {
            if strategy != Strategy::Ddp {
                return Err(Failure::with_hint(
                    format!("--bucket-cap-mb is a DDP setting, not {strategy}'s"),
                    "drop it, or use --strategy ddp (ZeRO's buckets are --reduce-bucket-size)",
                ));
            }
            ddp.bucket_cap_bytes = mb.checked_mul(1 << 20).filter(|&b| b > 0).ok_or_else(|| {
                Failure::with_hint(
                    format!("--bucket-cap-mb {mb} is out of range"),
                    "give DDP's bucket size in MiB, such as 25",
                )
            })?;
        }
        let mut zero = ZeroConfig::default();
        for (flag, value, field) in [
            ("--reduce-bucket-size", &self.reduce_bucket_size, &mut zero.reduce_bucket_size),
            (
                "--allgather-bucket-size",
                &self.allgather_bucket_size,
                &mut zero.allgather_bucket_size,
            ),
            (
                "--stage3-prefetch-bucket-size",
                &self.stage3_prefetch_bucket_size,
                &mut zero.prefetch_bucket_size,
            ),
            (
                "--stage3-max-live-parameters",
                &self.stage3_max_live_parameters,
                &mut zero.max_live_parameters,
            ),
            (
                "--stage3-param-persistence-threshold",
                &self.stage3_param_persistence_threshold,
                &mut zero.param_persistence_threshold,
            ),
        ] {
            if let Some(text) = value {
                *field = elements(flag, text)?;
                if strategy.zero_stage().is_none() {
                    return Err(Failure::with_hint(
                        format!("{flag} is a DeepSpeed ZeRO setting, not {strategy}'s"),
                        "drop it, or use --strategy zero1, zero2 or zero3",
                    ));
                }
            }
        }
        Ok(Parallel {
            gpus_per_node: gpus,
            nodes,
            strategy,
            reshard_after_forward,
            offload,
            ddp,
            zero,
        })
    }
}

/// An element count as DeepSpeed's config writes it (`5e8`, `500000000`, `500M`).
fn elements(flag: &str, text: &str) -> Result<u64, Failure> {
    if text.trim() == "0" {
        return Ok(0);
    }
    vramfit_core::parse_count(text).ok_or_else(|| {
        Failure::with_hint(
            format!("invalid {flag} '{text}'"),
            "give a number of elements, such as 5e8 or 500000000",
        )
    })
}

/// `--global-batch`: the accumulation steps it implies.
pub trait WithGlobalBatch: Sized {
    /// The setup with `grad_accum` derived from a global batch.
    fn with_global_batch(
        self,
        global: Option<u64>,
        grad_accum_given: bool,
    ) -> Result<Self, Failure>;
}

impl WithGlobalBatch for TrainSetup {
    fn with_global_batch(
        self,
        global: Option<u64>,
        grad_accum_given: bool,
    ) -> Result<Self, Failure> {
        let Some(global) = global else { return Ok(self) };
        let ranks = self.parallel.ranks();
        let per_step = self.micro_batch.saturating_mul(ranks);
        let gpus = if ranks == 1 { "1 GPU".to_string() } else { format!("{ranks} GPUs") };
        if global == 0 || per_step == 0 || global % per_step != 0 {
            return Err(Failure::with_hint(
                format!(
                    "--global-batch {global} is not a multiple of --batch {} × {gpus} = {per_step}",
                    self.micro_batch
                ),
                "choose --gpus, --nodes and --batch whose product divides the global batch, or another --global-batch",
            ));
        }
        let k = global / per_step;
        if grad_accum_given && k != self.grad_accum {
            return Err(Failure::with_hint(
                format!(
                    "--global-batch {global} needs --grad-accum {k} with --batch {} × {gpus}, not {}",
                    self.micro_batch, self.grad_accum
                ),
                "drop --grad-accum (the global batch sets it) or --global-batch",
            ));
        }
        Ok(TrainSetup { grad_accum: k, ..self })
    }
}
