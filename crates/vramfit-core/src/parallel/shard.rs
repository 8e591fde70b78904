//! What each rank holds of a parameter, and which rank holds the most.
//!
//! * FSDP2 shards every parameter on its first dimension (`torch.chunk(param, world, dim=0)`,
//!   `_fsdp_param.py`): rank `r` gets rows `r·c .. min((r+1)·c, dim0)` with `c = ceil(dim0 /
//!   world)`, and every rank's storage is padded to `c` rows so the all-gather is uniform
//!   (`padded_sharded_param_size`). The optimizer state and the sharded gradient's view follow
//!   the unpadded local rows, so rank 0, whose chunk is always full, holds the most.
//! * ZeRO-3 flattens each parameter and gives every rank `ceil(numel / world)` elements, the
//!   last padded (`partition_parameters.py`, `_partition_param`): all ranks alike.
//! * ZeRO-1/2 flatten the whole group into one buffer padded to a multiple of `2 · world`
//!   elements (`stage_1_and_2.py`, `nccl_start_alignment_factor` = 2) and split it evenly.
//!
//! FSDP1's flat parameter (`_flat_param.py`) pads a whole unit to a multiple of the world size
//! instead of each parameter: at most `world − 1` elements per unit, against FSDP2's per-row
//! padding; vramfit shards as FSDP2 does.

use serde::Serialize;

use crate::layout::{ParameterDecl, Shape, Slot};
use crate::model::ModelSpec;

/// torch's first dimension of a parameter, the one FSDP shards: a table's rows, a linear
/// layer's `out_features`, a stacked expert tensor's expert count, a vector's length.
///
/// GPT-2's `Conv1D` stores its weight as `(in, out)` and so is sharded on its input dimension;
/// it is taken as a linear layer here, which differs only in the padding of world sizes that
/// divide neither dimension (none of GPT-2's sizes up to 16 GPUs but 5, 7, 9 …).
pub(crate) fn dim0(spec: &ModelSpec, decl: &ParameterDecl) -> u64 {
    match decl.shape {
        Shape::Vector { len } => len,
        Shape::Matrix { rows, cols } => match decl.slot {
            Slot::Embed | Slot::Positions | Slot::TokenTypes | Slot::Head => rows,
            // transformers' fused expert tensors, `[experts, out, in]`.
            Slot::Mlp if !decl.name.ends_with(".weight") => spec.moe.map_or(rows, |m| m.experts),
            _ => cols,
        },
    }
}

/// FSDP2: the elements of a parameter's dim-0 shard on every rank, padded (`c` rows of
/// `numel / dim0` elements).
pub(crate) fn fsdp_padded_shard(numel: u64, dim0: u64, world: u64) -> u64 {
    if numel == 0 || dim0 == 0 {
        return 0;
    }
    dim0.div_ceil(world).saturating_mul(numel / dim0)
}

/// ZeRO-3: the elements of a parameter's partition on every rank (`ceil(numel / world)`).
pub(crate) fn zero3_partition(numel: u64, world: u64) -> u64 {
    numel.div_ceil(world)
}

/// ZeRO-1/2: the elements of the flat group's partition on every rank (padded to a multiple
/// of `2 · world`).
pub(crate) fn zero_flat_partition(total: u64, world: u64) -> u64 {
    let align = world.saturating_mul(2);
    total.div_ceil(align).saturating_mul(align) / world
}

/// The rank an estimate describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorstRank {
    /// One GPU.
    Single,
    /// Every rank holds the same (whole replicas, or partitions padded to equal size).
    AllAlike,
    /// The rank whose ZeRO-2 partition overlaps the most parameter elements: it keeps the
    /// gradients of every parameter its partition cuts, whole.
    PartitionCuttingParameters,
    /// Rank 0: uneven dim-0 shards leave the last ranks fewer rows, whose optimizer state is
    /// smaller; rank 0's chunks are always full.
    Rank0,
}

impl WorstRank {
    /// A phrase for reports.
    pub fn describe(self) -> &'static str {
        match self {
            WorstRank::Single => "one GPU",
            WorstRank::AllAlike => "every rank alike",
            WorstRank::PartitionCuttingParameters => {
                "the rank whose partition cuts the largest parameters: ZeRO-2 keeps their gradients whole"
            }
            WorstRank::Rank0 => {
                "rank 0, the worst: uneven shards give the last ranks fewer rows (and less optimizer state)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn padding_rounds_up_to_whole_rows_and_equal_partitions() {
        // GPT-2's 50257-row embedding over 4 ranks: 12565 rows each, 3 padding rows in all.
        assert_eq!(fsdp_padded_shard(50257 * 768, 50257, 4), 12565 * 768);
        assert_eq!(fsdp_padded_shard(768, 768, 3), 256);
        // Fewer rows than ranks: one (padding) row each.
        assert_eq!(fsdp_padded_shard(8 * 4096, 8, 16), 4096);
        assert_eq!(zero3_partition(10, 4), 3);
        assert_eq!(zero_flat_partition(10, 4), 4);
        assert_eq!(zero_flat_partition(16, 4), 4);
    }

    /// Every parameter's first dimension divides it, and tables and linear layers are sharded
    /// on the dimension torch stores first (`nn.Embedding(v, h)` is `[v, h]`, `nn.Linear(h, o)`
    /// is `[o, h]`).
    #[test]
    fn first_dimensions_divide_every_catalog_parameter() {
        for name in catalog::names() {
            let spec = ModelSpec::from_hf_config(catalog::config_json(name).unwrap()).unwrap();
            let layout = spec.parameter_layout();
            for (_, decl) in layout.iter() {
                let numel = decl.shape.numel().unwrap();
                let d = dim0(&spec, decl);
                assert!(
                    d > 0 && numel % d == 0,
                    "{name} {}: {d} does not divide {numel}",
                    decl.name
                );
            }
            let embed = &layout.before[0];
            assert_eq!(dim0(&spec, embed), spec.vocab_size, "{name}");
            if let Some(o) = layout.layer.iter().find(|d| d.slot == Slot::O) {
                assert_eq!(dim0(&spec, o), spec.hidden_size, "{name} o_proj");
            }
        }
    }
}
