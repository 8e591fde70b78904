//! Optimizer state and the step's temporaries, per parameter tensor.
//!
//! State is created lazily at the first `step()` (so the first step's peak includes it); the
//! default foreach implementations allocate whole lists of temporaries at once.

use crate::graph::Graph;
use crate::setup::{Optimizer, OptimizerImpl, TrainSetup};
use crate::timeline::{Component, Tid};
use crate::units::{DType, Overflow};

/// bitsandbytes quantises state block-wise: one fp32 absmax per 256 elements.
pub(crate) const BNB_BLOCK: u64 = 256;
/// bitsandbytes keeps parameters with fewer elements than this in 32-bit state.
pub(crate) const BNB_MIN_8BIT_SIZE: u64 = 4096;
/// Paged optimizers put state buffers of at least this many elements in managed memory.
pub(crate) const BNB_PAGED_MIN: u64 = 100_000;

/// Persistent state bytes for one parameter tensor of `numel` elements (`matrix` = its 2-D
/// shape), with `dtype` the state dtype for optimizers that follow the parameter.
pub(crate) fn state_bytes(
    opt: Optimizer,
    numel: u64,
    matrix: Option<(u64, u64)>,
    dtype: DType,
    count_paged: bool,
) -> Result<u64, Overflow> {
    let m = |k: u64| numel.checked_mul(k).ok_or(Overflow);
    Ok(match opt {
        Optimizer::Sgd | Optimizer::None => 0,
        Optimizer::SgdMomentum | Optimizer::Lion => m(dtype.size())?,
        Optimizer::Adam | Optimizer::Adamw => m(2 * dtype.size())?,
        Optimizer::Adafactor => match matrix {
            Some((r, c)) => {
                r.checked_add(c).and_then(|x| x.checked_mul(dtype.size())).ok_or(Overflow)?
            }
            None => m(dtype.size())?,
        },
        // bitsandbytes' 32-bit state is fp32 whatever the parameter's dtype.
        Optimizer::PagedAdamw => {
            if numel >= BNB_PAGED_MIN && !count_paged {
                0
            } else {
                m(8)?
            }
        }
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => {
            if numel < BNB_MIN_8BIT_SIZE {
                m(8)?
            } else if opt == Optimizer::PagedAdamw8bit && numel >= BNB_PAGED_MIN && !count_paged {
                // Managed memory: outside the caching allocator's count.
                0
            } else {
                m(2)?.checked_add(numel.div_ceil(BNB_BLOCK) * 2 * 4).ok_or(Overflow)?
            }
        }
    })
}

/// The dtype of the optimizer's state: bitsandbytes' 8-bit optimizers keep uint8 (whatever
/// is asked); the others follow the parameter unless told otherwise. The one rule, for the
/// simulated step and for `--params` alike.
pub(crate) fn state_dtype(setup: &TrainSetup, param_dtype: DType) -> DType {
    match setup.optimizer {
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => DType::U8,
        Optimizer::PagedAdamw => DType::F32,
        _ => setup.optimizer_state_dtype.unwrap_or(param_dtype),
    }
}

/// A parameter the optimizer steps: elements and, for a matrix, its shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stepped {
    pub(crate) numel: u64,
    pub(crate) matrix: Option<(u64, u64)>,
    /// The parameter's dtype (the state follows it unless the setup says otherwise).
    pub(crate) dtype: DType,
}

/// The optimizer across steps, over the parameters that train (a frozen parameter has no
/// gradient, so `step()` skips it and creates no state for it).
pub(crate) struct OptimizerRun {
    opt: Optimizer,
    params: Vec<Stepped>,
    /// Each parameter's state dtype.
    dtypes: Vec<DType>,
    /// Persistent state bytes per parameter (what `state_dict()` holds on the device).
    state_bytes: Vec<u64>,
    state: Vec<Tid>,
    step_counters_on_device: bool,
    implementation: OptimizerImpl,
}

impl OptimizerRun {
    pub(crate) fn new(
        setup: &TrainSetup,
        params: Vec<Stepped>,
        device: &crate::device::Device,
    ) -> Result<OptimizerRun, Overflow> {
        let dtypes: Vec<DType> = params.iter().map(|p| state_dtype(setup, p.dtype)).collect();
        // Without managed memory a paged optimizer's buffers are ordinary tensors.
        let count_paged = !device.managed_memory;
        let state_bytes = params
            .iter()
            .zip(&dtypes)
            .map(|(p, &dtype)| state_bytes(setup.optimizer, p.numel, p.matrix, dtype, count_paged))
            .collect::<Result<_, _>>()?;
        Ok(OptimizerRun {
            opt: setup.optimizer,
            dtypes,
            params,
            state_bytes,
            state: Vec::new(),
            step_counters_on_device: device.step_counters_on_device,
            implementation: setup.optimizer_impl,
        })
    }

    /// The state a paged optimizer keeps in CUDA managed memory, outside the allocator's
    /// count (0 for every other optimizer).
    pub(crate) fn paged_state(&self) -> Result<u64, Overflow> {
        let mut total = 0u64;
        for ((p, &dtype), &on_device) in self.params.iter().zip(&self.dtypes).zip(&self.state_bytes)
        {
            let all = state_bytes(self.opt, p.numel, p.matrix, dtype, true)?;
            total = total.checked_add(all.saturating_sub(on_device)).ok_or(Overflow)?;
        }
        Ok(total)
    }

    /// The persistent state, summed (without `step` counters).
    pub(crate) fn persistent_state(&self) -> Result<u64, Overflow> {
        self.state_bytes.iter().try_fold(0u64, |a, &b| a.checked_add(b)).ok_or(Overflow)
    }

    /// The state the first `step()` creates (`zeros_like` per parameter, in order).
    pub(crate) fn create_state(&mut self, g: &mut Graph) -> Result<(), Overflow> {
        if self.state.is_empty() {
            // torch keeps `step` as a 0-d fp32 tensor on the CPU: device memory only when the
            // device is the CPU.
            let counters = self.step_counters_on_device
                && !matches!(self.opt, Optimizer::Sgd | Optimizer::SgdMomentum | Optimizer::None);
            for &bytes in &self.state_bytes {
                let bytes = if counters { bytes + 4 } else { bytes };
                if bytes > 0 {
                    self.state.push(g.tl.alloc(Component::OptimizerState, bytes)?);
                }
            }
        }
        Ok(())
    }

    /// `optimizer.step()`: creates the state on the first call, then the step's temporaries.
    pub(crate) fn step(&mut self, g: &mut Graph) -> Result<(), Overflow> {
        self.step_range(g, 0..self.params.len())
    }

    /// `optimizer.step()` over some of the parameters (DeepSpeed steps its sub-groups one at a
    /// time): the state is created for all of them on the first call, the temporaries are
    /// those of the range.
    pub(crate) fn step_range(
        &mut self,
        g: &mut Graph,
        range: std::ops::Range<usize>,
    ) -> Result<(), Overflow> {
        self.create_state(g)?;
        let eight_bit = matches!(self.opt, Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit);
        // Each parameter's temporary: its elements in its state dtype.
        let sizes = self.params[range.clone()]
            .iter()
            .zip(&self.dtypes[range])
            .map(|(p, d)| {
                let size = if eight_bit { 0 } else { d.size() };
                p.numel.checked_mul(size).map(|b| (b, p.matrix.is_some())).ok_or(Overflow)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let largest = sizes.iter().map(|&(b, _)| b).max().unwrap_or(0);
        let list = |matrices: Option<bool>| -> Vec<u64> {
            sizes
                .iter()
                .filter(|&&(_, m)| matrices.is_none_or(|want| m == want))
                .map(|&(b, _)| b)
                .collect()
        };
        let total = |list: &[u64]| list.iter().try_fold(0u64, |a, &b| a.checked_add(b));
        // The temporaries alive at once: PyTorch allocates each separately (so each is rounded
        // to the allocator's blocks), all of a list before any is freed.
        let temporaries: Vec<u64> = match (self.implementation, self.opt) {
            (OptimizerImpl::Fused, _) => Vec::new(),
            // exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs): one per parameter.
            (OptimizerImpl::Foreach, Optimizer::Adam | Optimizer::Adamw) => list(None),
            // var_estimates = row_var @ col_var for every matrix (grad dtype), one list at a
            // time: the matrices', then the vectors'.
            (OptimizerImpl::Foreach, Optimizer::Adafactor) => {
                let (matrices, vectors) = (list(Some(true)), list(Some(false)));
                if total(&matrices) >= total(&vectors) { matrices } else { vectors }
            }
            // Single-tensor Adam: `exp_avg_sq.sqrt() / bias_correction2_sqrt` holds two
            // temporaries of one parameter at once.
            (OptimizerImpl::ForLoop, Optimizer::Adam | Optimizer::Adamw) => vec![largest, largest],
            // lion-pytorch: one update tensor at a time; single-tensor Adafactor likewise.
            (_, Optimizer::Lion) | (OptimizerImpl::ForLoop, Optimizer::Adafactor) => vec![largest],
            (
                _,
                Optimizer::Sgd
                | Optimizer::None
                | Optimizer::SgdMomentum
                | Optimizer::Adamw8bit
                | Optimizer::PagedAdamw8bit
                // One fused kernel per parameter, updating in place.
                | Optimizer::PagedAdamw,
            ) => Vec::new(),
        };
        let mut alive = Vec::with_capacity(temporaries.len());
        for bytes in temporaries.into_iter().filter(|&b| b > 0) {
            alive.push(g.tl.alloc(Component::Temporaries, bytes)?);
        }
        for t in alive {
            g.tl.release(t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bitsandbytes' `PagedAdamW`: two fp32 states whatever the parameter's dtype
    /// (`optim_bits=32`); on CUDA the buffers of 100,000 elements or more live in managed
    /// memory, outside the allocator's count, and on the CPU they are ordinary tensors.
    #[test]
    fn paged_adamw_keeps_fp32_state_and_pages_the_large_buffers() {
        let opt = Optimizer::PagedAdamw;
        let large = BNB_PAGED_MIN;
        let small = BNB_PAGED_MIN - 1;
        assert_eq!(state_bytes(opt, large, Some((1000, 100)), DType::F32, false), Ok(0));
        assert_eq!(state_bytes(opt, large, Some((1000, 100)), DType::F32, true), Ok(large * 8));
        assert_eq!(state_bytes(opt, small, None, DType::F32, false), Ok(small * 8));
        let setup = TrainSetup { optimizer: opt, ..TrainSetup::default() };
        assert_eq!(state_dtype(&setup, DType::Bf16), DType::F32);
    }
}
