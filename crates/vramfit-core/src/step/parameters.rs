//! The model's parameters as the step uses them: registered from the layout, grouped by
//! where the forward asks for them.

use super::{Context, Result, mul};
use crate::graph::{Graph, ParamId};
use crate::timeline::Component;
use crate::units::Overflow;

/// Parameters of one layer, in use order.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayerParams {
    pub(super) norm1: Vec<ParamId>,
    pub(super) qkv: Vec<ParamId>,
    pub(super) qkv_bias: Vec<ParamId>,
    pub(super) qk_norm: Vec<ParamId>,
    pub(super) o: Option<ParamId>,
    pub(super) o_bias: Option<ParamId>,
    pub(super) norm2: Vec<ParamId>,
    pub(super) sandwich: Vec<ParamId>,
    pub(super) router: Option<ParamId>,
    pub(super) mlp: Vec<ParamId>,
    pub(super) mlp_bias: Vec<ParamId>,
}

pub(crate) struct Model {
    pub(crate) embed: ParamId,
    pub(crate) positions: Option<ParamId>,
    pub(crate) token_types: Option<ParamId>,
    pub(crate) embed_norm: Vec<ParamId>,
    pub(crate) layers: Vec<LayerParams>,
    pub(crate) final_norm: Vec<ParamId>,
    pub(crate) mlm: Vec<ParamId>,
    pub(crate) head: ParamId,
    pub(crate) head_bias: Option<ParamId>,
}

/// Registers the model's parameters from its layout (resident from the start), then its
/// buffers.
pub(crate) fn build_model(
    g: &mut Graph,
    cx: &Context<'_>,
    layout: &crate::layout::ParameterLayout,
) -> Result<Model> {
    use crate::layout::Slot;
    let mut model = Model {
        embed: ParamId(usize::MAX),
        positions: None,
        token_types: None,
        embed_norm: Vec::new(),
        layers: vec![LayerParams::default(); layout.n_layers as usize],
        final_norm: Vec::new(),
        mlm: Vec::new(),
        head: ParamId(usize::MAX),
        head_bias: None,
    };
    for (layer, decl) in layout.iter() {
        let numel = decl.shape.numel().ok_or(Overflow)?;
        let cast =
            if cx.autocast && decl.matmul { mul(numel, cx.compute_dtype.size())? } else { 0 };
        let id = g.add_param(numel, cx.param_dtype, decl.trains, cast)?;
        g.tl.alloc(Component::Parameters, g.param(id).resident)?;
        if let Some((rows, cols)) = decl.shape.matrix() {
            g.set_matrix(id, rows, cols);
        }
        match (layer, decl.slot) {
            (None, Slot::Embed) => model.embed = id,
            (None, Slot::Positions) => model.positions = Some(id),
            (None, Slot::TokenTypes) => model.token_types = Some(id),
            (None, Slot::EmbedNorm) => model.embed_norm.push(id),
            (None, Slot::FinalNorm) => model.final_norm.push(id),
            (None, Slot::Mlm) => model.mlm.push(id),
            (None, Slot::Head) => model.head = id,
            (None, Slot::HeadBias) => model.head_bias = Some(id),
            (Some(l), slot) => {
                let lp = &mut model.layers[l as usize];
                match slot {
                    Slot::Norm1 => lp.norm1.push(id),
                    Slot::Qkv => lp.qkv.push(id),
                    Slot::QkvBias => lp.qkv_bias.push(id),
                    Slot::QkNorm => lp.qk_norm.push(id),
                    Slot::O => lp.o = Some(id),
                    Slot::OBias => lp.o_bias = Some(id),
                    Slot::Norm2 => lp.norm2.push(id),
                    Slot::Sandwich => lp.sandwich.push(id),
                    Slot::Router => lp.router = Some(id),
                    Slot::Mlp => lp.mlp.push(id),
                    Slot::MlpBias => lp.mlp_bias.push(id),
                    other => unreachable!("{other:?} is not a layer slot"),
                }
            }
            (None, other) => unreachable!("{other:?} is a layer slot"),
        }
    }
    if layout.tied {
        g.set_shared(model.embed);
        model.head = model.embed;
    }
    // Buffers.
    let mut buffers = 0u64;
    for b in &layout.buffers {
        let size = b.dtype.unwrap_or(cx.param_dtype).size();
        buffers = buffers.checked_add(mul(b.numel, size)?).ok_or(Overflow)?;
    }
    if buffers > 0 {
        g.tl.alloc(Component::Parameters, buffers)?;
    }
    Ok(model)
}
