//! `DistributedDataParallel` on one rank: the reducer's gradient buckets.
//!
//! `torch/nn/parallel/distributed.py` hands the parameters that require a gradient, in reverse
//! order, to `dist._compute_bucket_assignment_by_size` with the caps
//! `[_DEFAULT_FIRST_BUCKET_BYTES (1 MiB), bucket_cap_mb (25 MiB)]`: a bucket takes parameters of
//! one dtype until its size reaches its cap (`reducer.cpp`, `compute_bucket_assignment_by_size`).
//! `Reducer::initialize_buckets` allocates one flat tensor per bucket when the model is wrapped,
//! and the buckets stay for the run: each backward copies every gradient into its bucket,
//! all-reduces the bucket in place and copies it back. With `gradient_as_bucket_view=True` the
//! `.grad`s become views into the buckets, so the gradient autograd produces is freed once
//! copied in, and no second copy exists ("the saved memory size will be equal to the total
//! gradients size", the docstring).

use super::DdpConfig;
use crate::graph::Graph;
use crate::timeline::Component;
use crate::units::{DType, Overflow};

/// DDP's persistent buckets.
#[derive(Debug)]
pub(crate) struct Ddp {
    bucket_bytes: u64,
    as_bucket_view: bool,
}

/// The buckets' sizes in bytes, in allocation order, for parameters given in registration
/// order as `(bytes, dtype)` of those that require a gradient.
pub(crate) fn bucket_sizes(params: &[(u64, DType)], config: &DdpConfig) -> Vec<u64> {
    let caps = [config.first_bucket_cap_bytes, config.bucket_cap_bytes];
    // One open bucket (and how many were closed) per dtype.
    let mut open: Vec<(DType, u64, usize)> = Vec::new();
    let mut sizes = Vec::new();
    for &(bytes, dtype) in params.iter().rev() {
        let slot = match open.iter().position(|(d, ..)| *d == dtype) {
            Some(i) => i,
            None => {
                open.push((dtype, 0, 0));
                open.len() - 1
            }
        };
        let (_, size, closed) = &mut open[slot];
        *size = size.saturating_add(bytes);
        if *size >= caps[(*closed).min(1)] {
            sizes.push(*size);
            *size = 0;
            *closed += 1;
        }
    }
    sizes.extend(open.iter().map(|&(_, size, _)| size).filter(|&s| s > 0));
    sizes
}

impl Ddp {
    /// Wraps the model: allocates the buckets, and makes the gradients views into them when
    /// asked.
    pub(crate) fn new(g: &mut Graph, config: &DdpConfig) -> Result<Ddp, Overflow> {
        let params: Vec<(u64, DType)> =
            g.params.iter().filter(|p| p.trains).map(|p| (p.grad_bytes(), p.dtype)).collect();
        let mut bucket_bytes = 0u64;
        for size in bucket_sizes(&params, config) {
            g.tl.alloc(Component::Gradients, size)?;
            bucket_bytes = bucket_bytes.checked_add(size).ok_or(Overflow)?;
        }
        if config.gradient_as_bucket_view {
            for p in g.params.iter_mut().filter(|p| p.trains) {
                p.grad_to_buffer = true;
            }
        }
        Ok(Ddp { bucket_bytes, as_bucket_view: config.gradient_as_bucket_view })
    }

    /// The gradients a rank holds at the step: the buckets, and the `.grad`s unless they are
    /// views into them.
    pub(crate) fn gradient_bytes(&self, g: &Graph) -> Result<u64, Overflow> {
        if self.as_bucket_view {
            return Ok(self.bucket_bytes);
        }
        let grads = g
            .params
            .iter()
            .filter(|p| p.trains)
            .try_fold(0u64, |a, p| a.checked_add(p.grad_bytes()))
            .ok_or(Overflow)?;
        grads.checked_add(self.bucket_bytes).ok_or(Overflow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bucket_is_capped_at_one_mib_and_the_rest_at_25() {
        let config = DdpConfig::default();
        // Twenty 4 MiB fp32 gradients, registered in order: buckets fill from the last one.
        let params = vec![(4u64 << 20, DType::F32); 20];
        let sizes = bucket_sizes(&params, &config);
        assert_eq!(sizes[0], 4 << 20, "the first bucket closes after one 4 MiB gradient");
        assert_eq!(sizes[1], 28 << 20, "then seven 4 MiB gradients pass 25 MiB");
        assert_eq!(sizes.iter().sum::<u64>(), 80 << 20);
        // Dtypes are bucketed apart.
        let mixed = vec![(1 << 20, DType::F32), (1 << 20, DType::Bf16)];
        assert_eq!(bucket_sizes(&mixed, &config), vec![1 << 20, 1 << 20]);
    }
}
