//! Several GPUs: how many data-parallel ranks a step runs on and how they share the model, and
//! what that changes in the memory of one rank.
//!
//! A strategy is two things here. It **shards the layout** (what each rank holds of every
//! parameter, gradient and optimizer state: [`shard`]), and it **acts at the graph's layer
//! boundaries** — the forward entering and leaving a layer, backward entering and leaving it,
//! the places where a checkpointed layer is replayed — by gathering and freeing a unit's
//! parameters and reducing its gradients there ([`fsdp`], [`zero`], [`ddp`]). Everything is
//! simulated in the one allocation stream of the step, for one rank: the worst one, which
//! [`shard`] identifies without simulating the others.
//!
//! What each strategy is, and where its defaults come from (the sources, as pinned: torch
//! 2.15.0, DeepSpeed 0.19.8):
//!
//! * **DDP** (`torch/nn/parallel/distributed.py`, `torch/csrc/distributed/c10d/reducer.cpp`):
//!   every rank holds the whole model; gradient buckets of `bucket_cap_mb` = 25 MiB (the first
//!   capped at `dist._DEFAULT_FIRST_BUCKET_BYTES` = 1 MiB), filled in reverse parameter order,
//!   allocated once when the model is wrapped and kept for the run — a second copy of every
//!   gradient unless `gradient_as_bucket_view=True` makes the `.grad`s views into them.
//! * **ZeRO-1/2** (`deepspeed/runtime/zero/stage_1_and_2.py`): the 16-bit model in one flat
//!   buffer padded to a multiple of 2 × ranks elements; each rank keeps the fp32 master
//!   partition and its optimizer state; ZeRO-2 also keeps only its partition of the gradients,
//!   reduced through `reduce_bucket_size` (5e8 elements) contiguous buckets as they are produced;
//!   ZeRO-1 keeps every gradient until the end of backward.
//! * **ZeRO-3** (`stage3.py`, `partition_parameters.py`, `partitioned_param_coordinator.py`):
//!   each parameter partitioned into `ceil(numel / ranks)` elements per rank, gathered when its
//!   layer runs and released after, with `stage3_prefetch_bucket_size` (5e7 elements) of the next
//!   parameters prefetched, at most `stage3_max_live_parameters` (1e9) gathered,
//!   parameters of at most `stage3_param_persistence_threshold` (1e5) elements kept whole, and a
//!   gathered layer kept when it is used again within `stage3_max_reuse_distance` (1e9) elements.
//! * **FSDP** (`torch/distributed/fsdp/_fully_shard/`): FSDP2's `fully_shard` on every decoder
//!   layer and on the root, each parameter sharded on dim 0 with the last shards padded; a
//!   layer's parameters all-gathered in its pre-forward and pre-backward, the next layer's
//!   all-gather prefetched in backward, the layer resharded after forward unless
//!   `reshard_after_forward=False` (FSDP1's `SHARD_GRAD_OP`), its gradients reduce-scattered in
//!   its post-backward. HSDP shards within a node and replicates across nodes.
//!
//! Mixed precision under a sharding strategy is the framework's own, not `torch.autocast`:
//! DeepSpeed's `bf16`/`fp16` run the module in 16 bits with fp32 master partitions; FSDP's
//! `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` (torchtitan's) keeps fp32
//! sharded parameters and computes with gathered 16-bit ones.

pub(crate) mod ddp;
pub(crate) mod fsdp;
pub(crate) mod host;
pub(crate) mod runtime;
pub(crate) mod shard;
pub(crate) mod zero;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::setup::{Precision, TrainSetup, UnknownName};
use crate::units::{Bytes, DType};

pub use self::host::HostMemory;
pub use self::shard::WorstRank;

/// The most GPUs per node and nodes accepted.
pub const MAX_GPUS_PER_NODE: u64 = 1024;
/// The most nodes accepted.
pub const MAX_NODES: u64 = 1 << 16;

/// How the data-parallel ranks share the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// One process per GPU with no wrapper (a single GPU).
    #[default]
    None,
    /// `DistributedDataParallel`: whole replicas, gradients all-reduced in buckets.
    Ddp,
    /// DeepSpeed ZeRO stage 1: optimizer state partitioned.
    Zero1,
    /// DeepSpeed ZeRO stage 2: optimizer state and gradients partitioned.
    Zero2,
    /// DeepSpeed ZeRO stage 3: parameters too.
    Zero3,
    /// FSDP (`fully_shard`): parameters, gradients and optimizer state sharded over all ranks.
    Fsdp,
    /// Hybrid sharding: FSDP within a node, replicas across nodes.
    Hsdp,
}

impl Strategy {
    /// All variants, in the order the CLI lists them.
    pub const ALL: [Strategy; 7] = [
        Strategy::None,
        Strategy::Ddp,
        Strategy::Zero1,
        Strategy::Zero2,
        Strategy::Zero3,
        Strategy::Fsdp,
        Strategy::Hsdp,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Ddp => "ddp",
            Strategy::Zero1 => "zero1",
            Strategy::Zero2 => "zero2",
            Strategy::Zero3 => "zero3",
            Strategy::Fsdp => "fsdp",
            Strategy::Hsdp => "hsdp",
        }
    }

    /// The ZeRO stage (1, 2, 3), for DeepSpeed's strategies.
    pub fn zero_stage(self) -> Option<u8> {
        match self {
            Strategy::Zero1 => Some(1),
            Strategy::Zero2 => Some(2),
            Strategy::Zero3 => Some(3),
            Strategy::None | Strategy::Ddp | Strategy::Fsdp | Strategy::Hsdp => None,
        }
    }

    /// FSDP or HSDP.
    pub fn is_fsdp(self) -> bool {
        matches!(self, Strategy::Fsdp | Strategy::Hsdp)
    }

    /// Whether each rank holds a shard of the parameters rather than all of them.
    pub fn shards_parameters(self) -> bool {
        matches!(self, Strategy::Zero3 | Strategy::Fsdp | Strategy::Hsdp)
    }

    /// Whether the framework, not `torch.autocast`, runs mixed precision (16-bit compute
    /// parameters, fp32 master copies held apart).
    pub fn owns_mixed_precision(self) -> bool {
        !matches!(self, Strategy::None | Strategy::Ddp)
    }
}

impl FromStr for Strategy {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        let lower = s.trim().to_ascii_lowercase();
        if let Some(v) = Strategy::ALL.iter().find(|v| v.name() == lower) {
            return Ok(*v);
        }
        Ok(match lower.as_str() {
            "zero-1" | "zero_1" | "deepspeed-zero1" => Strategy::Zero1,
            "zero-2" | "zero_2" | "deepspeed-zero2" => Strategy::Zero2,
            "zero-3" | "zero_3" | "deepspeed-zero3" => Strategy::Zero3,
            "fsdp2" | "full-shard" | "full_shard" => Strategy::Fsdp,
            "hybrid-shard" | "hybrid_shard" => Strategy::Hsdp,
            "single" | "single-gpu" => Strategy::None,
            _ => {
                return Err(UnknownName {
                    kind: "strategy",
                    given: s.to_string(),
                    expected: Strategy::ALL
                        .iter()
                        .skip(1)
                        .map(|v| v.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        })
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What lives in host memory instead of on the GPU (DeepSpeed ZeRO-Offload / ZeRO-Infinity to
/// the CPU, FSDP's `CPUOffloadPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Offload {
    /// Nothing.
    #[default]
    None,
    /// The optimizer: fp32 master partitions, optimizer state and the step (ZeRO-Offload).
    Optimizer,
    /// The parameters (ZeRO-3 `offload_param`; FSDP's `CPUOffloadPolicy`, which takes the
    /// gradients and the optimizer step with them).
    Params,
    /// Both.
    Both,
}

impl Offload {
    /// All variants.
    pub const ALL: [Offload; 4] =
        [Offload::None, Offload::Optimizer, Offload::Params, Offload::Both];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Offload::None => "none",
            Offload::Optimizer => "optimizer",
            Offload::Params => "params",
            Offload::Both => "both",
        }
    }

    /// The optimizer (master weights, state, step) is on the host.
    pub fn optimizer(self) -> bool {
        matches!(self, Offload::Optimizer | Offload::Both)
    }

    /// The parameters are on the host.
    pub fn params(self) -> bool {
        matches!(self, Offload::Params | Offload::Both)
    }
}

impl FromStr for Offload {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        let lower = s.trim().to_ascii_lowercase();
        if let Some(v) = Offload::ALL.iter().find(|v| v.name() == lower) {
            return Ok(*v);
        }
        Ok(match lower.as_str() {
            "optim" | "optimizer-state" => Offload::Optimizer,
            "param" | "parameters" => Offload::Params,
            "all" | "params+optimizer" | "optimizer+params" => Offload::Both,
            _ => {
                return Err(UnknownName {
                    kind: "offload",
                    given: s.to_string(),
                    expected: Offload::ALL.iter().map(|v| v.name()).collect::<Vec<_>>().join(", "),
                });
            }
        })
    }
}

impl fmt::Display for Offload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// DDP's bucketing (`DistributedDataParallel(bucket_cap_mb=25, gradient_as_bucket_view=False)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DdpConfig {
    /// `bucket_cap_mb`, in bytes (25 MiB).
    pub bucket_cap_bytes: u64,
    /// The first bucket's cap (`dist._DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB), so the first
    /// all-reduce starts early.
    pub first_bucket_cap_bytes: u64,
    /// `gradient_as_bucket_view=True`: `.grad`s are views into the buckets.
    pub gradient_as_bucket_view: bool,
}

impl Default for DdpConfig {
    fn default() -> Self {
        DdpConfig {
            bucket_cap_bytes: 25 << 20,
            first_bucket_cap_bytes: 1 << 20,
            gradient_as_bucket_view: false,
        }
    }
}

/// DeepSpeed's ZeRO knobs, with the defaults of `deepspeed/runtime/zero/config.py`
/// (`DeepSpeedZeroConfig`), in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ZeroConfig {
    /// `reduce_bucket_size`: elements reduced at a time (the contiguous gradient bucket), 5e8.
    pub reduce_bucket_size: u64,
    /// `allgather_bucket_size`: elements all-gathered at a time after the step (ZeRO-1/2), 5e8;
    /// the in-place `all_gather_into_tensor` path, NCCL's, allocates nothing for it.
    pub allgather_bucket_size: u64,
    /// `stage3_prefetch_bucket_size`: elements of upcoming parameters fetched ahead, 5e7.
    pub prefetch_bucket_size: u64,
    /// `stage3_max_live_parameters`: the most elements gathered at once, 1e9.
    pub max_live_parameters: u64,
    /// `stage3_param_persistence_threshold`: parameters this small stay gathered, 1e5.
    pub param_persistence_threshold: u64,
    /// `stage3_max_reuse_distance`: a gathered parameter used again within this many elements
    /// is kept, 1e9.
    pub max_reuse_distance: u64,
    /// `sub_group_size`: the fp32 partition is stepped in tiles of this many elements, 1e9.
    pub sub_group_size: u64,
}

impl Default for ZeroConfig {
    fn default() -> Self {
        ZeroConfig {
            reduce_bucket_size: 500_000_000,
            allgather_bucket_size: 500_000_000,
            prefetch_bucket_size: 50_000_000,
            max_live_parameters: 1_000_000_000,
            param_persistence_threshold: 100_000,
            max_reuse_distance: 1_000_000_000,
            sub_group_size: 1_000_000_000,
        }
    }
}

/// The GPUs a step runs on and how they share the model. The default is one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Parallel {
    /// GPUs per node (one rank each).
    pub gpus_per_node: u64,
    /// Nodes.
    pub nodes: u64,
    /// How the ranks share the model.
    pub strategy: Strategy,
    /// FSDP: free a layer's gathered parameters after its forward (`reshard_after_forward`,
    /// FSDP1's `FULL_SHARD`) or keep them until its backward (`False`, `SHARD_GRAD_OP`).
    pub reshard_after_forward: bool,
    /// What lives in host memory.
    pub offload: Offload,
    /// DDP's buckets.
    pub ddp: DdpConfig,
    /// DeepSpeed's buckets and thresholds.
    pub zero: ZeroConfig,
}

impl Default for Parallel {
    fn default() -> Self {
        Parallel {
            gpus_per_node: 1,
            nodes: 1,
            strategy: Strategy::None,
            reshard_after_forward: true,
            offload: Offload::None,
            ddp: DdpConfig::default(),
            zero: ZeroConfig::default(),
        }
    }
}

impl Parallel {
    /// One GPU, no wrapper (what a setup without `--gpus` is).
    pub fn is_single(&self) -> bool {
        *self == Parallel::default()
    }

    /// The data-parallel ranks: every GPU of every node (no tensor or pipeline parallelism).
    pub fn ranks(&self) -> u64 {
        self.gpus_per_node.saturating_mul(self.nodes)
    }

    /// The ranks a parameter is sharded over: all of them, but the GPUs of one node for HSDP;
    /// 1 when nothing is sharded.
    pub fn shard_world(&self) -> u64 {
        match self.strategy {
            Strategy::None | Strategy::Ddp => 1,
            Strategy::Hsdp => self.gpus_per_node,
            Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 | Strategy::Fsdp => self.ranks(),
        }
    }

    /// The NCCL communicators a rank is part of: none alone, one data-parallel group, two for
    /// HSDP (the shard group within a node and the replica group across nodes).
    pub fn communicators(&self) -> u64 {
        if self.ranks() <= 1 {
            0
        } else if self.strategy == Strategy::Hsdp && self.nodes > 1 {
            2
        } else {
            1
        }
    }

    /// NCCL's own buffers, which it allocates with `cudaMalloc` outside PyTorch's allocator:
    /// the card table's allowance for a communicator of this many ranks
    /// ([`crate::overhead::nccl_buffers`], from NVIDIA/nccl#964), for each communicator a rank
    /// belongs to. It grows with the number of channels and of `NCCL_IB_HCA` interfaces
    /// (nccl#818), so it is an allowance, not a simulation.
    pub fn nccl_allowance(&self) -> Bytes {
        let one = crate::overhead::nccl_buffers(self.ranks());
        Bytes(one.get().saturating_mul(self.communicators()))
    }
}

/// The effective batch as the seed article writes it, `B_effective = B_micro × k × GPUs`:
/// sequences per optimizer step over all data-parallel ranks (`None` on overflow).
pub fn effective_batch(setup: &TrainSetup) -> Option<u64> {
    setup.micro_batch.checked_mul(setup.grad_accum)?.checked_mul(setup.parallel.ranks())
}

/// Why a multi-GPU setup cannot be estimated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParallelError {
    /// Zero or absurd GPU or node counts.
    #[error("{field} = {value} is out of range (1..={max})")]
    OutOfRange {
        /// `gpus` or `nodes`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The largest accepted.
        max: u64,
    },
    /// Offload asked of a strategy that has none of that kind.
    #[error("{} cannot offload {what} to the CPU", describe(*.strategy))]
    OffloadUnsupported {
        /// The strategy.
        strategy: Strategy,
        /// What was asked (`the optimizer`, `parameters`).
        what: &'static str,
    },
    /// `reshard_after_forward` is an FSDP setting.
    #[error("reshard-after-forward is an FSDP setting; {0} does not reshard")]
    ReshardWithoutFsdp(Strategy),
    /// DeepSpeed's 16-bit modes always keep fp32 master weights.
    #[error(
        "DeepSpeed ZeRO has no pure 16-bit mode (--precision bf16 or fp16-true): its bf16 and fp16 keep fp32 master weights"
    )]
    ZeroPureBf16,
    /// A bucket or threshold of zero elements.
    #[error("{0} must be positive")]
    ZeroBucket(&'static str),
    /// More FSDP ranks than any parameter has rows: the last ranks would hold only padding.
    #[error(
        "FSDP over {world} ranks leaves the last ranks nothing but padding: no parameter has more than {largest_dim0} rows to shard"
    )]
    IdleRanks {
        /// The ranks a parameter is sharded over.
        world: u64,
        /// The most rows any parameter has.
        largest_dim0: u64,
    },
}

/// How much of a rank's FSDP shards is padding, in tenths of a percent (`None` when nothing
/// is sharded on the first dimension), or the error when the last rank would hold nothing.
pub(crate) fn fsdp_padding(
    spec: &crate::model::ModelSpec,
    layout: &crate::layout::ParameterLayout,
    setup: &TrainSetup,
) -> Result<Option<u64>, ParallelError> {
    let p = &setup.parallel;
    if !p.strategy.is_fsdp() {
        return Ok(None);
    }
    let world = p.shard_world();
    let (mut padded, mut real, mut largest, mut used_by_last) = (0u128, 0u128, 0u64, false);
    for (_, decl) in layout.iter() {
        let numel = decl.shape.numel().unwrap_or(u64::MAX);
        let dim0 = shard::dim0(spec, decl);
        padded += u128::from(shard::fsdp_padded_shard(numel, dim0, world)) * u128::from(world);
        real += u128::from(numel);
        largest = largest.max(dim0);
        used_by_last |= (world - 1).saturating_mul(dim0.div_ceil(world)) < dim0;
    }
    if !used_by_last {
        return Err(ParallelError::IdleRanks { world, largest_dim0: largest });
    }
    if padded == 0 {
        return Ok(None);
    }
    let tenths = (padded - real) * 1000 / padded;
    Ok(Some(u64::try_from(tenths).unwrap_or(1000)))
}

/// A strategy as an error message names it.
fn describe(strategy: Strategy) -> String {
    match strategy {
        Strategy::None => "a GPU without a sharding strategy".into(),
        other => other.name().into(),
    }
}

/// Checks a setup's GPUs and strategy (the combinations that cannot run).
pub(crate) fn check(setup: &TrainSetup) -> Result<(), ParallelError> {
    let p = &setup.parallel;
    let range = |field, value, max| {
        if value == 0 || value > max {
            Err(ParallelError::OutOfRange { field, value, max })
        } else {
            Ok(())
        }
    };
    range("gpus", p.gpus_per_node, MAX_GPUS_PER_NODE)?;
    range("nodes", p.nodes, MAX_NODES)?;
    let s = p.strategy;
    let unsupported = |what| Err(ParallelError::OffloadUnsupported { strategy: s, what });
    match (s, p.offload) {
        (_, Offload::None)
        | (Strategy::Zero1 | Strategy::Zero2, Offload::Optimizer)
        | (Strategy::Zero3, _)
        | (Strategy::Fsdp | Strategy::Hsdp, Offload::Params | Offload::Both) => {}
        (Strategy::Fsdp | Strategy::Hsdp, Offload::Optimizer) => {
            return unsupported("the optimizer alone");
        }
        (Strategy::Zero1 | Strategy::Zero2, Offload::Params | Offload::Both) => {
            return unsupported("parameters");
        }
        (Strategy::None | Strategy::Ddp, o) => {
            return unsupported(if o.params() { "parameters" } else { "the optimizer" });
        }
    }
    if !p.reshard_after_forward && !s.is_fsdp() {
        return Err(ParallelError::ReshardWithoutFsdp(s));
    }
    if s.zero_stage().is_some() && setup.precision.is_pure() {
        return Err(ParallelError::ZeroPureBf16);
    }
    let z = &p.zero;
    if z.reduce_bucket_size == 0 {
        return Err(ParallelError::ZeroBucket("reduce-bucket-size"));
    }
    if z.allgather_bucket_size == 0 {
        return Err(ParallelError::ZeroBucket("allgather-bucket-size"));
    }
    if z.sub_group_size == 0 {
        return Err(ParallelError::ZeroBucket("sub-group-size"));
    }
    if p.ddp.bucket_cap_bytes == 0 {
        return Err(ParallelError::ZeroBucket("bucket-cap-mb"));
    }
    Ok(())
}

/// The dtypes a rank computes and keeps in: the parameters the forward uses, whether
/// `torch.autocast` runs, the master copy the optimizer steps, and the gradient reduction's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dtypes {
    /// The parameters the forward and backward compute with (and their gradients).
    pub(crate) compute: DType,
    /// `torch.autocast` is on.
    pub(crate) autocast: bool,
    /// What the optimizer steps (the master weights).
    pub(crate) master: DType,
    /// Gradients are reduced (and kept sharded) in this dtype.
    pub(crate) reduce: DType,
}

impl Dtypes {
    /// The dtypes of a setup: autocast over the parameters' own dtype on one GPU and under DDP;
    /// the framework's mixed precision under ZeRO and FSDP.
    pub(crate) fn of(setup: &TrainSetup) -> Dtypes {
        let precision = setup.precision;
        if !setup.parallel.strategy.owns_mixed_precision() {
            let dtype = precision.param_dtype();
            return Dtypes {
                compute: dtype,
                autocast: precision.autocast(),
                master: dtype,
                reduce: dtype,
            };
        }
        match precision {
            Precision::Fp32 => Dtypes {
                compute: DType::F32,
                autocast: false,
                master: DType::F32,
                reduce: DType::F32,
            },
            Precision::Bf16 | Precision::Fp16True => {
                let pure = precision.param_dtype();
                Dtypes { compute: pure, autocast: false, master: pure, reduce: pure }
            }
            Precision::Fp16Mixed | Precision::Bf16Mixed => {
                let low = precision.compute_dtype();
                // FSDP reduces in fp32 (`reduce_dtype=float32`); DeepSpeed communicates in the
                // model's 16-bit dtype (`communication_data_type` unset).
                let reduce = if setup.parallel.strategy.is_fsdp() { DType::F32 } else { low };
                Dtypes { compute: low, autocast: false, master: DType::F32, reduce }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
        }
        for o in Offload::ALL {
            assert_eq!(o.name().parse::<Offload>(), Ok(o));
        }
        assert_eq!("full_shard".parse::<Strategy>(), Ok(Strategy::Fsdp));
        assert_eq!("hybrid-shard".parse::<Strategy>(), Ok(Strategy::Hsdp));
        assert!("tp".parse::<Strategy>().unwrap_err().to_string().contains("zero3"));
    }

    #[test]
    fn the_seed_articles_effective_batch() {
        let parallel =
            Parallel { gpus_per_node: 8, strategy: Strategy::Ddp, ..Parallel::default() };
        let setup = TrainSetup { micro_batch: 4, grad_accum: 8, parallel, ..TrainSetup::default() };
        assert_eq!(effective_batch(&setup), Some(4 * 8 * 8));
        assert_eq!(effective_batch(&TrainSetup::default()), Some(1));
    }

    #[test]
    fn hsdp_shards_within_a_node_and_talks_over_two_groups() {
        let p = Parallel {
            gpus_per_node: 8,
            nodes: 4,
            strategy: Strategy::Hsdp,
            ..Parallel::default()
        };
        assert_eq!((p.ranks(), p.shard_world(), p.communicators()), (32, 8, 2));
        let one = Parallel::default();
        assert_eq!((one.shard_world(), one.communicators()), (1, 0));
        assert_eq!(one.nccl_allowance(), Bytes::ZERO);
    }
}
