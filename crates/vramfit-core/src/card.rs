//! The whole card: what the run takes of the GPU (what `nvidia-smi` shows for the process)
//! and whether that fits, as values a planner can compare.
//!
//! A run fails on the number the driver sees, not on `max_memory_allocated()`: PyTorch's
//! allocator reserves whole segments and keeps them cached ([`crate::allocator`]), and the
//! CUDA context and lazily loaded kernels sit outside it. So the device usage is the reserved
//! peak plus the context, and it is held against the CUDA-visible total (the OOM message's
//! "total capacity") minus a safety margin for what is modelled but not measured.

use crate::device::Device;
use crate::estimate::{Estimate, EstimateError};
use crate::model::ModelSpec;
use crate::setup::TrainSetup;
use crate::units::Bytes;

/// The default safety margin, in percent of the CUDA-visible total: the allocator replay is
/// checked against PyTorch's rules but not yet against a real GPU, and cuDNN / Triton
/// workspaces and kernels loaded during the first iteration add to the context.
pub const DEFAULT_MARGIN_PERCENT: u64 = 3;

/// The default margin for a card.
pub fn default_margin(cuda_visible: Bytes) -> Bytes {
    Bytes(cuda_visible.get() / 100 * DEFAULT_MARGIN_PERCENT)
}

/// What a run is budgeted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardBudget {
    /// Memory CUDA exposes to PyTorch (`total capacity`).
    pub cuda_visible: Bytes,
    /// The CUDA context and kernels, outside the allocator.
    pub cuda_context: Bytes,
    /// Kept free for what the model does not know.
    pub margin: Bytes,
}

/// A budget that cannot hold anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// The context and margin together take the whole card.
    #[error(
        "the margin ({margin}) and CUDA context ({context}) leave nothing of the card's {visible}"
    )]
    NothingLeft {
        /// The margin.
        margin: Bytes,
        /// The context.
        context: Bytes,
        /// The card.
        visible: Bytes,
    },
}

impl CardBudget {
    /// A budget, refused when context and margin leave nothing.
    pub fn new(
        cuda_visible: Bytes,
        cuda_context: Bytes,
        margin: Bytes,
    ) -> Result<CardBudget, CardError> {
        if cuda_context.get().saturating_add(margin.get()) >= cuda_visible.get() {
            return Err(CardError::NothingLeft {
                margin,
                context: cuda_context,
                visible: cuda_visible,
            });
        }
        Ok(CardBudget { cuda_visible, cuda_context, margin })
    }

    /// What the process may take of the card: CUDA-visible minus the margin.
    pub fn usable(&self) -> Bytes {
        self.cuda_visible.saturating_sub(self.margin)
    }

    /// What the allocator may reserve: usable minus the context.
    pub fn for_allocator(&self) -> Bytes {
        self.usable().saturating_sub(self.cuda_context)
    }
}

/// The verdict on one estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardVerdict {
    /// `max_memory_reserved()` predicted (the allocated peak where no allocator is modelled).
    pub peak_reserved: Bytes,
    /// Reserved but unallocated at the reserved peak.
    pub fragmentation: Bytes,
    /// What nvidia-smi would show for the process at its peak: reserved + context.
    pub device_used: Bytes,
    /// The card's usable memory (CUDA-visible minus margin).
    pub usable: Bytes,
    /// Whether the device usage fits.
    pub fits: bool,
    /// Usable minus device usage (negative when it does not fit).
    pub headroom: i128,
}

/// Device usage for an estimate: the reserved peak (or the allocated peak) plus the context.
pub fn device_used(estimate: &Estimate, cuda_context: Bytes) -> Bytes {
    add(reserved(estimate).0, cuda_context)
}

fn add(a: Bytes, b: Bytes) -> Bytes {
    Bytes(a.get().saturating_add(b.get()))
}

fn reserved(estimate: &Estimate) -> (Bytes, Bytes) {
    match estimate.reserved {
        Some(r) => (Bytes(r.peak_reserved), Bytes(r.fragmentation)),
        None => (estimate.peak_allocated, Bytes(0)),
    }
}

/// Judges an estimate against a card.
pub fn judge(estimate: &Estimate, budget: &CardBudget) -> CardVerdict {
    let (peak_reserved, fragmentation) = reserved(estimate);
    let used = add(peak_reserved, budget.cuda_context);
    let usable = budget.usable();
    CardVerdict {
        peak_reserved,
        fragmentation,
        device_used: used,
        usable,
        fits: used <= usable,
        headroom: i128::from(usable.get()) - i128::from(used.get()),
    }
}

/// The largest micro-batch whose device usage fits the budget (0 if none): exponential
/// search, then binary search. Reserved memory is not strictly monotone in the batch (block
/// packing changes), so this is the largest batch the search finds fitting, with every
/// smaller power of two fitting too.
pub fn max_micro_batch_on(
    spec: &ModelSpec,
    setup: &TrainSetup,
    device: &Device,
    budget: &CardBudget,
) -> Result<u64, EstimateError> {
    crate::estimate::largest_micro_batch(spec, setup, device, |e| judge(e, budget).fits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::Precision;

    fn spec(name: &str) -> ModelSpec {
        ModelSpec::from_hf_config(crate::catalog::config_json(name).unwrap()).unwrap()
    }

    #[test]
    fn device_usage_is_at_least_reserved_and_reserved_at_least_allocated() {
        let setup = TrainSetup { micro_batch: 4, seq_len: 512, ..TrainSetup::default() };
        let e = crate::estimate(&spec("gpt2"), &setup).unwrap();
        let budget = CardBudget::new(Bytes(24 << 30), Bytes(512 << 20), Bytes(0)).unwrap();
        let v = judge(&e, &budget);
        assert!(v.peak_reserved >= e.peak_allocated);
        assert!(v.device_used >= add(v.peak_reserved, Bytes(512 << 20)));
    }

    #[test]
    fn gpt2_fp32_batch_10_on_an_rtx_3080_does_not_fit_the_whole_card() {
        // Allocated alone left 52 MiB of a 9.88 GiB card; the card gives PyTorch 9.78 GiB,
        // and the allocator reserves more than it allocates.
        let gpu = crate::gpu::resolve("rtx-3080").unwrap();
        let setup = TrainSetup {
            micro_batch: 10,
            seq_len: 1024,
            precision: Precision::Fp32,
            ..TrainSetup::default()
        };
        let e = crate::estimate(&spec("gpt2"), &setup).unwrap();
        let visible = gpu.cuda_visible();
        let context = crate::overhead::cuda_context(&gpu, crate::overhead::ModuleLoading::Lazy);
        let budget = CardBudget::new(visible, context.bytes, default_margin(visible)).unwrap();
        assert!(!judge(&e, &budget).fits);
    }

    #[test]
    fn the_largest_micro_batch_fits_and_the_next_does_not() {
        let s = spec("gpt2");
        let setup = TrainSetup { seq_len: 1024, ..TrainSetup::default() };
        let budget = CardBudget::new(Bytes(16 << 30), Bytes(512 << 20), Bytes(0)).unwrap();
        let max = max_micro_batch_on(&s, &setup, &Device::CUDA, &budget).unwrap();
        assert!(max > 0);
        let at = |b| {
            let e = crate::estimate(&s, &TrainSetup { micro_batch: b, ..setup.clone() }).unwrap();
            judge(&e, &budget).fits
        };
        assert!(at(max));
        assert!(!at(max + 1));
    }

    #[test]
    fn a_margin_that_takes_the_card_is_refused() {
        let e = CardBudget::new(Bytes(8 << 30), Bytes(512 << 20), Bytes(8 << 30));
        assert!(matches!(e, Err(CardError::NothingLeft { .. })));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 16, ..Default::default() })]
        /// The allocated peak ≤ the reserved peak ≤ device use, for every loop, zero_grad and
        /// cache mode.
        #[test]
        fn device_use_is_at_least_reserved_which_is_at_least_allocated(
            m in 0usize..31,
            custom in proptest::bool::ANY,
            zeros in proptest::bool::ANY,
            cache in proptest::bool::ANY,
            b in 1u64..4,
        ) {
            use crate::setup::{TrainingLoop, ZeroGrad};
            let names = crate::catalog::names();
            let model = spec(names[m % names.len()]);
            // Encoder-decoder models (T5) are modelled with eager attention only.
            let attention = if model.is_encoder_decoder() {
                crate::setup::Attention::Eager
            } else {
                TrainSetup::default().attention
            };
            let setup = TrainSetup {
                micro_batch: b,
                seq_len: 128,
                attention,
                training_loop: if custom { TrainingLoop::Custom } else { TrainingLoop::Trainer },
                zero_grad: if zeros { ZeroGrad::Zeros } else { ZeroGrad::SetToNone },
                use_cache: Some(cache),
                ..TrainSetup::default()
            };
            let e = crate::estimate(&model, &setup).unwrap();
            let budget = CardBudget::new(Bytes(1 << 40), Bytes(512 << 20), Bytes(0)).unwrap();
            let v = judge(&e, &budget);
            let r = e.reserved.unwrap();
            proptest::prop_assert!(r.peak_allocated_blocks >= e.peak_allocated.get());
            proptest::prop_assert!(v.peak_reserved.get() >= r.peak_allocated_blocks);
            proptest::prop_assert!(v.device_used >= v.peak_reserved);
        }
    }
}
