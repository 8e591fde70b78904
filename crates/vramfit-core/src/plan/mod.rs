//! The planner: the cheapest changes that make a training run fit its GPU.
//!
//! [`plan`] searches the setups that keep the user's global batch and sequence length — the
//! micro-batch × accumulation × data-parallel GPUs that make the global batch, and every lever
//! of [`lever::Lever`] — and returns those that fit, cheapest first and none dominated by
//! another (cheaper and with more headroom). "Fits" is decided only by the whole-card verdict
//! ([`crate::card::judge`] against a [`CardBudget`]), on a full estimate of exactly the setup
//! returned; the cost is [`cost`]'s model. [`remedies`] lists every single change to the run
//! with the memory it saves, in order of cost. Pure: no I/O.
//!
//! The search is built to be fast on large models (a benchmark holds it to it): per
//! configuration of the levers, the largest fitting micro-batch is found by a binary search
//! (memory grows with the micro-batch), a configuration whose model states alone overflow the
//! card is pruned without a simulation, the peak of the step's own tensors (activations,
//! temporaries) is simulated once for all the configurations that compute alike and differ
//! only in strategy, offload, optimizer or allocator settings and bounds each of them, a
//! candidate whose allocated peak overflows the card is refused before the caching allocator
//! is replayed, and configurations are visited cheapest first so that the search stops once no
//! cheaper plan can remain.

pub mod cost;
pub mod lever;
mod remedies;
mod search;

use serde::Serialize;

use crate::allocator::AllocConf;
use crate::card::{CardBudget, CardVerdict};
use crate::estimate::{Estimate, EstimateError, MAX_GRAD_ACCUM, MAX_MICRO_BATCH};
use crate::model::ModelSpec;
use crate::setup::TrainSetup;
use crate::units::Bytes;

pub use cost::Cost;
pub use lever::{Config, GpuFacts, Lever, MathNote, Setting};
pub use remedies::{Remedy, remedies};
pub use search::{plan, plan_without_activation_bound};

/// What to plan for.
#[derive(Debug, Clone)]
pub struct PlanRequest<'a> {
    /// The model.
    pub spec: &'a ModelSpec,
    /// The setup as the user runs it (its micro-batch and accumulation are the reference the
    /// step times are relative to).
    pub setup: TrainSetup,
    /// The user's `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc: AllocConf,
    /// The card's library workspaces (`overhead::cublas_workspaces`), as its estimates have.
    pub workspaces: &'static [u64],
    /// Sequences per optimizer step over all GPUs: micro-batch × accumulation × data-parallel
    /// GPUs. Never changed.
    pub global_batch: u64,
    /// GPUs that split the batch: the setup's data-parallel ranks.
    pub data_parallel: u64,
    /// Host memory a node offers to offloading (a plan whose offload needs more per node is
    /// not offered).
    pub host_ram: Bytes,
    /// What the GPU can run.
    pub gpu: GpuFacts,
    /// The card: CUDA-visible memory, context, margin.
    pub budget: CardBudget,
    /// What the user keeps, forbids and allows.
    pub constraints: Constraints,
    /// How many plans to return.
    pub top: usize,
}

/// What the plans may change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Constraints {
    /// Levers left as the user has them (`--keep`).
    pub keep: Vec<Lever>,
    /// Settings never used, by [`Setting::name`] (`--forbid`); forbidding the user's own
    /// setting makes every plan change it.
    pub forbid: Vec<String>,
    /// Opt-in levers the user allows (`--allow lora`).
    pub allow: Vec<Lever>,
}

impl Constraints {
    /// Whether a lever may change.
    pub fn may_change(&self, lever: Lever) -> bool {
        !self.keep.contains(&lever) && (!lever.opt_in() || self.allow.contains(&lever))
    }

    /// Whether a setting may be used.
    pub fn permits(&self, setting: &Setting) -> bool {
        !self.forbid.iter().any(|f| *f == setting.name())
    }
}

/// One change from the user's setup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The lever.
    pub lever: Lever,
    /// The user's value.
    pub from: String,
    /// The plan's.
    pub to: String,
}

/// A setup that fits (or, among the closest misses, one that does not), with the numbers of
/// its full estimate and its cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The setup and allocator settings.
    pub config: Config,
    /// What differs from the user's setup, in lever order.
    pub changes: Vec<Change>,
    /// What those changes do to the maths.
    pub notes: Vec<MathNote>,
    /// Data-parallel GPUs.
    pub data_parallel: u64,
    /// The full estimate of exactly this setup.
    pub estimate: Estimate,
    /// Its verdict on the card.
    pub verdict: CardVerdict,
    /// Its cost.
    pub cost: Cost,
}

impl Plan {
    /// Micro-batch × accumulation × data-parallel GPUs.
    pub fn global_batch(&self) -> u64 {
        self.config.setup.micro_batch * self.config.setup.grad_accum * self.data_parallel
    }
}

/// How much work the search did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SearchStats {
    /// Setups in the search space (configurations × micro-batches): each simulated or pruned.
    pub candidates: u64,
    /// Candidates whose step was simulated.
    pub simulated: u64,
    /// Of those, replayed through the caching allocator too (the rest were refused on their
    /// allocated peak alone).
    pub replayed: u64,
    /// Candidates decided without a simulation of their own: by the model-states bound, by
    /// the activation bound (simulations shared by many configurations, counted in
    /// `activation_simulations`), by monotonicity in the micro-batch, or because no cheaper
    /// plan could remain.
    pub pruned: u64,
    /// Lever configurations.
    pub configurations: u64,
    /// Simulations of the step's own tensors (activations, temporaries), each shared by the
    /// configurations that compute alike and differ only in strategy, offload, optimizer or
    /// allocator settings (not candidates: they bound them).
    pub activation_simulations: u64,
    /// Of the candidates replayed through the caching allocator, those whose replay was an
    /// earlier candidate's: the same allocation stream under the same allocator settings
    /// (settings that change nothing the allocator sees, such as the optimizer's
    /// implementation under ZeRO). Their estimates are the same, to the byte.
    pub replays_shared: u64,
}

/// What it would take when nothing fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Requirement {
    /// Device memory the closest setup needs at micro-batch 1.
    pub device_needed: Bytes,
    /// What the card gives (CUDA-visible minus the margin).
    pub usable: Bytes,
    /// Parameters, gradients and optimizer state of the closest setup (what sharding divides).
    pub model_states: Bytes,
    /// When the model states alone overflow the card: the fewest GPUs of this kind (a power
    /// of two) over which ZeRO-3 fits the closest setup at micro-batch 1, by full estimates.
    /// `None` when the model states fit and one micro-batch's activations are what overflow,
    /// or when even 4096 GPUs do not fit it.
    pub gpus_of_this_kind: Option<u64>,
    /// The smallest catalog GPU on which the closest setup fits, if any.
    pub larger_gpu: Option<String>,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanOutcome {
    /// The user's setup as given, estimated.
    pub baseline: Baseline,
    /// The plans that fit, cheapest first, none dominated by another.
    pub plans: Vec<Plan>,
    /// When none fits: the setups that come closest (they do not fit).
    pub closest: Vec<Plan>,
    /// When none fits: what it would take.
    pub requirement: Option<Requirement>,
    /// The search's work.
    pub stats: SearchStats,
}

/// The user's own setup.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// Its estimate.
    pub estimate: Estimate,
    /// Its verdict.
    pub verdict: CardVerdict,
    /// Seconds per step, when the GPU's throughput is known (the reference of every relative
    /// step time).
    pub step_seconds: Option<f64>,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The global batch does not split over the data-parallel GPUs.
    #[error("a global batch of {global} does not split over {gpus} GPUs")]
    GlobalBatchNotDivisible {
        /// The global batch.
        global: u64,
        /// The data-parallel GPUs.
        gpus: u64,
        /// The nearest global batches that do (below, above).
        nearest: (u64, u64),
    },
    /// The global batch is zero or absurd.
    #[error("a global batch of {0} is out of range (1..={max})", max = MAX_MICRO_BATCH * MAX_GRAD_ACCUM)]
    GlobalBatchOutOfRange(u64),
    /// Zero data-parallel GPUs.
    #[error("the number of GPUs must be positive")]
    NoGpus,
    /// The micro-batch is kept but does not make the global batch.
    #[error(
        "the micro-batch is kept at {micro_batch}, which does not divide a global batch of {global} over {gpus} GPU(s)"
    )]
    KeptMicroBatch {
        /// The kept micro-batch.
        micro_batch: u64,
        /// The global batch.
        global: u64,
        /// The data-parallel GPUs.
        gpus: u64,
    },
    /// A lever is both kept and required to change (its current setting forbidden).
    #[error("{lever} is kept, but its current setting {setting} is forbidden")]
    KeptAndForbidden {
        /// The lever.
        lever: Lever,
        /// The user's setting.
        setting: String,
    },
    /// A lever is kept at a setting the GPU does not run.
    #[error("{lever} is kept at {setting}, which {gpu} does not run")]
    KeptUnsupported {
        /// The lever.
        lever: Lever,
        /// The user's setting.
        setting: String,
        /// The GPU.
        gpu: String,
    },
    /// An opt-in lever is both allowed and kept or forbidden.
    #[error("{lever} is both allowed and {how}")]
    AllowedAndRefused {
        /// The lever.
        lever: Lever,
        /// `kept` or `forbidden`.
        how: &'static str,
    },
    /// Every setting of a lever is forbidden, the user's own included.
    #[error("every setting of {lever} is forbidden ({settings})")]
    NothingLeft {
        /// The lever.
        lever: Lever,
        /// Its settings, comma separated.
        settings: String,
    },
    /// The user's own setup cannot be estimated.
    #[error(transparent)]
    Estimate(#[from] EstimateError),
    /// The planner's levers (LoRA, sharding, the loss kernels, ...) are not modelled for an
    /// encoder-decoder model.
    #[error("the planner does not search encoder-decoder models ({0}) yet")]
    EncoderDecoder(crate::model::Architecture),
}

/// The nearest multiples of `gpus` around `global` (below, above; below is at least `gpus`).
pub fn nearest_divisible(global: u64, gpus: u64) -> (u64, u64) {
    let gpus = gpus.max(1);
    let below = (global / gpus * gpus).max(gpus);
    let above = global.div_ceil(gpus).saturating_mul(gpus);
    (below, above)
}

#[cfg(test)]
mod tests;
