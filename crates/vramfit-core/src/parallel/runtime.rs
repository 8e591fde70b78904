//! The strategy during a step: one value the step code calls at its layer boundaries, whatever
//! the strategy (one GPU and DDP do nothing there).

use super::ddp::Ddp;
use super::fsdp::Fsdp;
use super::host::HostMemory;
use super::shard::WorstRank;
use super::zero::Zero;
use super::{Dtypes, Strategy};

use crate::estimate::ModelStates;
use crate::graph::Graph;
use crate::optim::{OptimizerRun, Stepped, state_bytes, state_dtype};
use crate::setup::TrainSetup;
use crate::units::{Bytes, Overflow};

type Result<T> = std::result::Result<T, Overflow>;

/// The strategy's state across one rank's step.
#[derive(Debug)]
pub(crate) enum Ranks {
    /// One GPU (or each rank of a wrapper that changes nothing in the step).
    Single,
    /// DDP's buckets.
    Ddp(Ddp),
    /// FSDP's units.
    Fsdp(Fsdp),
    /// DeepSpeed ZeRO.
    Zero(Zero),
}

/// Whether every rank holds each parameter as a tensor of its own (so the model is built
/// with one resident storage per parameter) rather than in the strategy's shards or flat
/// buffers.
pub(crate) fn whole_parameters(setup: &TrainSetup) -> bool {
    matches!(setup.parallel.strategy, Strategy::None | Strategy::Ddp)
}

impl Ranks {
    /// Wraps the built model: shards it and allocates what the strategy keeps for the run.
    /// `n_layers` is `None` for a bare parameter count (one flat parameter, no layers).
    pub(crate) fn new(g: &mut Graph, setup: &TrainSetup, n_layers: Option<u64>) -> Result<Ranks> {
        let p = &setup.parallel;
        let dtypes = Dtypes::of(setup);
        let world = p.shard_world();
        Ok(match p.strategy {
            Strategy::None => Ranks::Single,
            Strategy::Ddp => Ranks::Ddp(Ddp::new(g, &p.ddp)?),
            Strategy::Fsdp | Strategy::Hsdp => Ranks::Fsdp(Fsdp::new(
                g,
                n_layers.unwrap_or(0),
                world,
                p.reshard_after_forward,
                p.offload.params(),
                dtypes,
            )?),
            Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 => {
                let stage = p.strategy.zero_stage().unwrap_or(3);
                Ranks::Zero(Zero::new(g, n_layers, stage, world, p.offload, dtypes, p.zero)?)
            }
        })
    }

    /// The model's forward starts (its root's pre-forward).
    pub(crate) fn forward_start(&mut self, g: &mut Graph) -> Result<()> {
        match self {
            Ranks::Fsdp(f) => f.forward_start(g),
            Ranks::Zero(z) => z.forward_start(g),
            Ranks::Single | Ranks::Ddp(_) => Ok(()),
        }
    }

    /// The forward enters a layer.
    pub(crate) fn pre_forward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        match self {
            Ranks::Fsdp(f) => f.pre_forward(g, layer),
            Ranks::Zero(z) => z.pre_forward(g, layer),
            Ranks::Single | Ranks::Ddp(_) => Ok(()),
        }
    }

    /// The forward leaves a layer.
    pub(crate) fn post_forward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        match self {
            Ranks::Fsdp(f) => {
                f.post_forward(g, layer);
                Ok(())
            }
            Ranks::Zero(z) => z.post_forward(g, layer),
            Ranks::Single | Ranks::Ddp(_) => Ok(()),
        }
    }

    /// The model's forward (with its loss) returns.
    pub(crate) fn forward_end(&mut self, g: &mut Graph) {
        if let Ranks::Fsdp(f) = self {
            f.forward_end(g);
        }
    }

    /// Backward starts: the loss's gradient exists.
    pub(crate) fn backward_start(&mut self, g: &mut Graph) -> Result<()> {
        match self {
            Ranks::Fsdp(f) => f.backward_start(g),
            Ranks::Zero(z) => z.backward_start(g),
            Ranks::Single | Ranks::Ddp(_) => Ok(()),
        }
    }

    /// Backward enters a layer (before a checkpointed layer is replayed).
    pub(crate) fn pre_backward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        match self {
            Ranks::Fsdp(f) => f.pre_backward(g, layer),
            Ranks::Zero(z) => z.pre_backward(g, layer),
            Ranks::Single | Ranks::Ddp(_) => Ok(()),
        }
    }

    /// Backward leaves a layer (its input's gradient exists).
    pub(crate) fn post_backward(&mut self, g: &mut Graph, layer: usize) -> Result<()> {
        match self {
            Ranks::Fsdp(f) => f.post_backward(g, layer),
            Ranks::Zero(z) => z.post_backward(g, layer),
            Ranks::Single | Ranks::Ddp(_) => Ok(()),
        }
    }

    /// Backward has finished (its final callback).
    pub(crate) fn backward_end(&mut self, g: &mut Graph) -> Result<()> {
        match self {
            Ranks::Fsdp(f) => f.backward_end(g),
            Ranks::Zero(z) => {
                z.backward_end(g);
                Ok(())
            }
            Ranks::Single | Ranks::Ddp(_) => Ok(()),
        }
    }

    /// What the optimizer steps on this rank's device.
    pub(crate) fn stepped(&self, g: &Graph) -> Vec<Stepped> {
        match self {
            Ranks::Single | Ranks::Ddp(_) => g
                .params
                .iter()
                .filter(|p| p.trains)
                .map(|p| Stepped { numel: p.numel, matrix: p.matrix, dtype: p.dtype })
                .collect(),
            Ranks::Fsdp(f) => f.stepped(g),
            Ranks::Zero(z) => z.stepped(),
        }
    }

    /// `optimizer.step()` (DeepSpeed's `engine.step()`).
    pub(crate) fn step(&mut self, g: &mut Graph, opt: &mut OptimizerRun) -> Result<()> {
        match self {
            Ranks::Zero(z) => z.step(g, opt),
            Ranks::Single | Ranks::Ddp(_) | Ranks::Fsdp(_) => opt.step(g),
        }
    }

    /// `zero_grad(set_to_none=True)`: the strategy's own gradients (the `.grad`s are the
    /// graph's).
    pub(crate) fn zero_grad(&mut self, g: &mut Graph) {
        if let Ranks::Fsdp(f) = self {
            f.zero_grad(g);
        }
    }

    /// Parameters, gradients and optimizer state as this rank holds them at the step.
    pub(crate) fn model_states(&self, g: &Graph, opt: &OptimizerRun) -> Result<ModelStates> {
        let resident =
            g.params.iter().try_fold(0u64, |a, p| a.checked_add(p.resident)).ok_or(Overflow)?;
        let trainable_grads = || {
            g.params
                .iter()
                .filter(|p| p.trains)
                .try_fold(0u64, |a, p| a.checked_add(p.grad_bytes()))
                .ok_or(Overflow)
        };
        let (parameters, gradients) = match self {
            Ranks::Single => (resident, trainable_grads()?),
            Ranks::Ddp(d) => (resident, d.gradient_bytes(g)?),
            Ranks::Fsdp(f) => (resident, f.gradient_bytes(g)?),
            Ranks::Zero(z) => (
                resident.checked_add(z.flat_parameter_bytes()).ok_or(Overflow)?,
                z.gradient_bytes(),
            ),
        };
        let optimizer_state = opt.persistent_state()?;
        let total = parameters
            .checked_add(gradients)
            .and_then(|x| x.checked_add(optimizer_state))
            .ok_or(Overflow)?;
        Ok(ModelStates {
            parameters: Bytes(parameters),
            gradients: Bytes(gradients),
            optimizer_state: Bytes(optimizer_state),
            total: Bytes(total),
        })
    }

    /// The rank the simulation describes.
    pub(crate) fn worst_rank(&self, g: &Graph) -> WorstRank {
        match self {
            Ranks::Single => WorstRank::Single,
            Ranks::Fsdp(f) if f.uneven(g) => WorstRank::Rank0,
            Ranks::Zero(z) if z.uneven() => WorstRank::PartitionCuttingParameters,
            Ranks::Ddp(_) | Ranks::Fsdp(_) | Ranks::Zero(_) => WorstRank::AllAlike,
        }
    }

    /// The host memory offloading takes (`None` without offload).
    pub(crate) fn host_memory(&self, g: &Graph, setup: &TrainSetup) -> Result<Option<HostMemory>> {
        let p = &setup.parallel;
        if p.offload == super::Offload::None {
            return Ok(None);
        }
        let (pinned, pageable) = match self {
            Ranks::Fsdp(f) => f.host(g, setup)?,
            Ranks::Zero(z) => z.host(g, setup)?,
            Ranks::Single | Ranks::Ddp(_) => return Ok(None),
        };
        Ok(Some(HostMemory::new(pinned, pageable, p.gpus_per_node)?))
    }
}

/// The optimizer state a host optimizer keeps for `stepped` (paged states counted: on the host
/// nothing is outside the count).
pub(crate) fn host_state(setup: &TrainSetup, stepped: &[Stepped]) -> Result<u64> {
    stepped.iter().try_fold(0u64, |a, s| {
        let dtype = state_dtype(setup, s.dtype);
        a.checked_add(state_bytes(setup.optimizer, s.numel, s.matrix, dtype, true)?).ok_or(Overflow)
    })
}
