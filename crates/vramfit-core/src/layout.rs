//! [`ParameterLayout`]: a model's parameters and buffers, declared once.
//!
//! Each architecture's tensors are listed here, in the order `transformers` registers them,
//! with their shape and how they are used. The parameter count, the simulated step's
//! parameters (and through them gradients and optimizer state), and later sharding and
//! adapters are all derived from this one list.

use serde::Serialize;

use crate::model::{Head, ModelSpec, Moe, Norm, Pooling, Positions, Router};
use crate::units::DType;

/// A parameter's shape, as far as memory is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// A 2-D weight (or a 3-D expert weight folded to 2-D: `[experts · rows, cols]`).
    Matrix {
        /// Rows.
        rows: u64,
        /// Columns.
        cols: u64,
    },
    /// A 1-D parameter (norm weights, biases).
    Vector {
        /// Elements.
        len: u64,
    },
}

impl Shape {
    /// Elements, or `None` on overflow.
    pub fn numel(self) -> Option<u64> {
        match self {
            Shape::Matrix { rows, cols } => rows.checked_mul(cols),
            Shape::Vector { len } => Some(len),
        }
    }

    /// `(rows, cols)` of a matrix.
    pub fn matrix(self) -> Option<(u64, u64)> {
        match self {
            Shape::Matrix { rows, cols } => Some((rows, cols)),
            Shape::Vector { .. } => None,
        }
    }
}

/// Where a parameter sits in the model, which is what the step code asks for it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    /// The token embedding table.
    Embed,
    /// The learned position table.
    Positions,
    /// The token-type table.
    TokenTypes,
    /// The embedding norm.
    EmbedNorm,
    /// A layer's first norm (before attention; after it in post-norm layers).
    Norm1,
    /// A q, k, v (or fused qkv) projection weight.
    Qkv,
    /// Its bias.
    QkvBias,
    /// The per-head q and k norms.
    QkNorm,
    /// The attention output projection.
    O,
    /// Its bias.
    OBias,
    /// A layer's second norm.
    Norm2,
    /// The sandwich norms after attention and after the MLP.
    Sandwich,
    /// The mixture-of-experts router.
    Router,
    /// An MLP (or expert) projection weight.
    Mlp,
    /// A shared expert's projection weight (gate, up, down).
    SharedExpert,
    /// The shared expert's gate (`shared_expert_gate`, one output).
    SharedExpertGate,
    /// Its bias.
    MlpBias,
    /// The final norm.
    FinalNorm,
    /// The masked-LM head's transform (dense, bias, norm).
    Mlm,
    /// A sequence classifier's dense + `tanh` before the output (BERT's pooler, RoBERTa's
    /// classification head).
    Pooler,
    /// The output projection (absent when tied to the embedding).
    Head,
    /// The output projection's bias.
    HeadBias,
    /// T5's relative position bias table (`[buckets, heads]`, one per stack, in its first
    /// layer).
    RelativeBias,
    /// A decoder layer's norm before cross-attention (T5).
    CrossNorm,
    /// A cross-attention q, k or v projection weight (T5: q reads the decoder, k and v the
    /// encoder's output).
    CrossQkv,
    /// The cross-attention output projection.
    CrossO,
}

/// One parameter tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct ParameterDecl {
    /// Where it sits.
    pub slot: Slot,
    /// Its name in `transformers`, without the layer prefix.
    pub name: &'static str,
    /// Its shape.
    pub shape: Shape,
    /// A matmul uses it, so autocast keeps a low-precision copy of it per forward.
    pub matmul: bool,
    /// It requires a gradient.
    pub trains: bool,
}

/// A registered buffer (no gradient, no optimizer state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct BufferDecl {
    /// Its name in `transformers`.
    pub name: &'static str,
    /// Elements.
    pub numel: u64,
    /// Its dtype; `None` follows the parameters' dtype.
    pub dtype: Option<DType>,
}

/// Every parameter and buffer of a model, in registration order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParameterLayout {
    /// Before the layers (embeddings).
    pub before: Vec<ParameterDecl>,
    /// One layer's parameters; every layer has the same but those in `dense_layers`.
    pub layer: Vec<ParameterDecl>,
    /// Layers.
    pub n_layers: u64,
    /// The layers of the second form (ascending; empty for most models): a mixture-of-experts
    /// model's layers with the dense MLP instead of the sparse block, ModernBERT's first layer
    /// (no attention-input norm), an encoder-decoder's decoder layers (with cross-attention).
    pub dense_layers: Vec<u64>,
    /// Their parameters (empty when there is none).
    pub dense_layer: Vec<ParameterDecl>,
    /// After the layers (final norm, head).
    pub after: Vec<ParameterDecl>,
    /// The output head is the embedding matrix.
    pub tied: bool,
    /// Buffers, allocated after the parameters.
    pub buffers: Vec<BufferDecl>,
    /// The experts' names as PEFT converts them for transformers 5 (`None`: no MoE, or one
    /// PEFT leaves as it is).
    pub peft_moe: Option<crate::peft::PeftMoe>,
}

impl ParameterLayout {
    /// `sum(p.numel() for p in model.parameters())` (a tied matrix once), or `None` on
    /// overflow.
    pub fn parameter_count(&self) -> Option<u64> {
        let sum = |decls: &[ParameterDecl]| {
            decls.iter().try_fold(0u64, |a, d| a.checked_add(d.shape.numel()?))
        };
        let dense = self.dense_layers.len() as u64;
        sum(&self.layer)?
            .checked_mul(self.n_layers.checked_sub(dense)?)?
            .checked_add(sum(&self.dense_layer)?.checked_mul(dense)?)?
            .checked_add(sum(&self.before)?)?
            .checked_add(sum(&self.after)?)
    }

    /// The parameters of layer `l`.
    pub fn layer_decls(&self, l: u64) -> &[ParameterDecl] {
        if self.dense_layers.binary_search(&l).is_ok() { &self.dense_layer } else { &self.layer }
    }

    /// Every parameter in registration order, with its layer (`None` outside the layers).
    pub fn iter(&self) -> impl Iterator<Item = (Option<u64>, &ParameterDecl)> {
        let layers =
            (0..self.n_layers).flat_map(|l| self.layer_decls(l).iter().map(move |d| (Some(l), d)));
        self.before
            .iter()
            .map(|d| (None, d))
            .chain(layers)
            .chain(self.after.iter().map(|d| (None, d)))
    }
}

fn matrix(slot: Slot, name: &'static str, rows: u64, cols: u64) -> ParameterDecl {
    ParameterDecl { slot, name, shape: Shape::Matrix { rows, cols }, matmul: true, trains: true }
}

fn table(slot: Slot, name: &'static str, rows: u64, cols: u64) -> ParameterDecl {
    ParameterDecl { slot, name, shape: Shape::Matrix { rows, cols }, matmul: false, trains: true }
}

/// A linear layer's bias (autocast casts it with the weight).
fn bias(slot: Slot, name: &'static str, len: u64) -> ParameterDecl {
    ParameterDecl { slot, name, shape: Shape::Vector { len }, matmul: true, trains: true }
}

/// A norm's weight and (LayerNorm) bias.
/// The masked-LM head's transform (BERT's `cls.predictions.transform`, ModernBERT's
/// `ModernBertPredictionHead`, which its classifiers run too): dense, optional bias, norm.
fn prediction_head(out: &mut Vec<ParameterDecl>, spec: &ModelSpec, h: u64) {
    out.push(matrix(Slot::Mlm, "transform.dense.weight", h, h));
    if spec.mlm_dense_bias {
        out.push(bias(Slot::Mlm, "transform.dense.bias", h));
    }
    norm(out, spec, Slot::Mlm, "transform.LayerNorm.weight", h);
}

fn norm(out: &mut Vec<ParameterDecl>, spec: &ModelSpec, slot: Slot, name: &'static str, len: u64) {
    let vector = |name| ParameterDecl {
        slot,
        name,
        shape: Shape::Vector { len },
        matmul: false,
        trains: true,
    };
    out.push(vector(name));
    if spec.norm == Norm::LayerNorm && spec.norm_bias {
        out.push(vector("bias"));
    }
}

/// The dense MLP's projections (and biases), `i` wide.
fn dense_mlp(out: &mut Vec<ParameterDecl>, spec: &ModelSpec, h: u64, i: u64) {
    let projections: &[(&str, &str, u64, u64)] = if !spec.gated_mlp {
        &[("up_proj.weight", "up_proj.bias", h, i), ("down_proj.weight", "down_proj.bias", i, h)]
    } else if spec.fused_gate_up {
        &[
            ("gate_up_proj.weight", "gate_up_proj.bias", h, 2 * i),
            ("down_proj.weight", "down_proj.bias", i, h),
        ]
    } else {
        &[
            ("gate_proj.weight", "gate_proj.bias", h, i),
            ("up_proj.weight", "up_proj.bias", h, i),
            ("down_proj.weight", "down_proj.bias", i, h),
        ]
    };
    for &(name, bias_name, rows, cols) in projections {
        out.push(matrix(Slot::Mlp, name, rows, cols));
        if spec.mlp_bias {
            out.push(bias(Slot::MlpBias, bias_name, cols));
        }
    }
}

impl ModelSpec {
    /// The model's parameters and buffers (elements may overflow only for specs that
    /// [`ModelSpec::resolve`] rejects).
    pub fn parameter_layout(&self) -> ParameterLayout {
        if self.is_encoder_decoder() {
            return self.seq2seq_layout();
        }
        let h = self.hidden_size;
        let v = self.vocab_size;
        let q = self.q_width();
        let kv = self.kv_width();
        let i = self.intermediate_size;
        let wide = |a: u64, b: u64| a.saturating_mul(b);

        let mut before = vec![matrix(Slot::Embed, "embed_tokens.weight", v, h)];
        if !self.tied_embeddings {
            // Only a tied embedding is used by a matmul.
            before[0].matmul = false;
        }
        if let Positions::Learned { max_positions, .. } = self.positions {
            before.push(table(Slot::Positions, "position_embeddings.weight", max_positions, h));
        }
        if self.type_vocab_size > 0 {
            before.push(table(
                Slot::TokenTypes,
                "token_type_embeddings.weight",
                self.type_vocab_size,
                h,
            ));
        }
        if self.embedding_norm {
            norm(&mut before, self, Slot::EmbedNorm, "embeddings.norm.weight", h);
        }

        let mut layer = Vec::new();
        if self.input_norms {
            norm(&mut layer, self, Slot::Norm1, "input_layernorm.weight", h);
        }
        if let Some(mla) = self.mla {
            // DeepseekV2Attention / DeepseekV3Attention, in the order the forward uses them
            // (the step reads the `Qkv` weights and the two latent norms in this order).
            let heads = self.n_heads;
            let latent_norm = |name, len| ParameterDecl {
                slot: Slot::QkNorm,
                name,
                shape: Shape::Vector { len },
                matmul: false,
                trains: true,
            };
            match mla.q_lora_rank {
                None => layer.push(matrix(Slot::Qkv, "q_proj.weight", h, q)),
                Some(r) => {
                    layer.push(matrix(Slot::Qkv, "q_a_proj.weight", h, r));
                    if self.qkv_bias {
                        layer.push(bias(Slot::QkvBias, "q_a_proj.bias", r));
                    }
                    layer.push(latent_norm("q_a_layernorm.weight", r));
                    layer.push(matrix(Slot::Qkv, "q_b_proj.weight", r, q));
                }
            }
            let latent = mla.kv_lora_rank + mla.qk_rope_head_dim;
            layer.push(matrix(Slot::Qkv, "kv_a_proj_with_mqa.weight", h, latent));
            if self.qkv_bias {
                layer.push(bias(Slot::QkvBias, "kv_a_proj_with_mqa.bias", latent));
            }
            layer.push(latent_norm("kv_a_layernorm.weight", mla.kv_lora_rank));
            layer.push(matrix(
                Slot::Qkv,
                "kv_b_proj.weight",
                mla.kv_lora_rank,
                wide(heads, mla.qk_nope_head_dim + mla.v_head_dim),
            ));
            layer.push(matrix(Slot::O, "o_proj.weight", wide(heads, mla.v_head_dim), h));
            if self.o_bias {
                layer.push(bias(Slot::OBias, "o_proj.bias", h));
            }
        } else if self.fused_qkv {
            layer.push(matrix(Slot::Qkv, "qkv_proj.weight", h, q + 2 * kv));
            if self.qkv_bias {
                layer.push(bias(Slot::QkvBias, "qkv_proj.bias", q + 2 * kv));
            }
        } else {
            for (name, bias_name, width) in [
                ("q_proj.weight", "q_proj.bias", q),
                ("k_proj.weight", "k_proj.bias", kv),
                ("v_proj.weight", "v_proj.bias", kv),
            ] {
                layer.push(matrix(Slot::Qkv, name, h, width));
                if self.qkv_bias {
                    layer.push(bias(Slot::QkvBias, bias_name, width));
                }
            }
        }
        if self.qk_norm {
            let (q_len, k_len) =
                if self.qk_norm_full_width { (q, kv) } else { (self.head_dim, self.head_dim) };
            for (name, len) in [("q_norm.weight", q_len), ("k_norm.weight", k_len)] {
                layer.push(ParameterDecl {
                    slot: Slot::QkNorm,
                    name,
                    shape: Shape::Vector { len },
                    matmul: false,
                    trains: true,
                });
            }
        }
        if self.mla.is_none() {
            layer.push(matrix(Slot::O, "o_proj.weight", q, h));
            if self.o_bias {
                layer.push(bias(Slot::OBias, "o_proj.bias", h));
            }
        }
        if self.input_norms {
            norm(&mut layer, self, Slot::Norm2, "post_attention_layernorm.weight", h);
        }
        if self.sandwich_norm {
            norm(&mut layer, self, Slot::Sandwich, "post_attention_norm.weight", h);
            norm(&mut layer, self, Slot::Sandwich, "post_feedforward_layernorm.weight", h);
        }
        // The attention half of a layer, shared by the sparse and the dense layers.
        let mut dense_layer = Vec::new();
        if let Some(m) = self.moe {
            if !self.dense_mlp_layers.is_empty() {
                dense_layer = layer.clone();
                dense_mlp(&mut dense_layer, self, h, i);
            }
            let e = m.expert_intermediate_size;
            // transformers 5 keeps each layer's experts as two 3-D parameters, run by
            // `grouped_mm` (no autocast: not a matmul autocast casts for):
            // gate_up_proj [E, 2I, H] and down_proj [E, H, I]. The router is a parameter of
            // its own module (`F.linear` on it, cast by autocast), not an `nn.Linear`.
            // (DeepSeek's router is `gate.weight`, kept in fp32: `_keep_in_fp32_modules_strict`.)
            let router = if m.router == Router::Softmax { "router.weight" } else { "gate.weight" };
            layer.push(matrix(Slot::Router, router, h, m.experts));
            let expert = |name, rows, cols| ParameterDecl {
                matmul: false,
                ..matrix(Slot::Mlp, name, rows, cols)
            };
            layer.push(expert("experts.gate_up_proj", wide(m.experts, 2 * e), h));
            layer.push(expert("experts.down_proj", wide(m.experts, h), e));
            if m.router != Router::Softmax {
                // DeepSeek: `n_shared_experts` fused into one ungated MLP.
                if let Some(s) = m.shared_expert_intermediate_size {
                    for (name, bias_name, rows, cols) in [
                        ("shared_experts.gate_proj.weight", "shared_experts.gate_proj.bias", h, s),
                        ("shared_experts.up_proj.weight", "shared_experts.up_proj.bias", h, s),
                        ("shared_experts.down_proj.weight", "shared_experts.down_proj.bias", s, h),
                    ] {
                        layer.push(matrix(Slot::SharedExpert, name, rows, cols));
                        if self.mlp_bias {
                            layer.push(bias(Slot::MlpBias, bias_name, cols));
                        }
                    }
                }
            } else if let Some(s) = m.shared_expert_intermediate_size {
                layer.push(matrix(Slot::SharedExpert, "shared_expert.gate_proj.weight", h, s));
                layer.push(matrix(Slot::SharedExpert, "shared_expert.up_proj.weight", h, s));
                layer.push(matrix(Slot::SharedExpert, "shared_expert.down_proj.weight", s, h));
                layer.push(matrix(Slot::SharedExpertGate, "shared_expert_gate.weight", h, 1));
            }
        } else {
            dense_mlp(&mut layer, self, h, i);
        }

        let mut after = Vec::new();
        if self.final_norm {
            norm(&mut after, self, Slot::FinalNorm, "norm.weight", h);
        }
        match (self.head, self.classifier) {
            (Head::CausalLm | Head::Seq2SeqLm, _) => {
                if !self.tied_embeddings {
                    after.push(matrix(Slot::Head, "lm_head.weight", v, h));
                }
            }
            (Head::MaskedLm, _) => {
                prediction_head(&mut after, self, h);
                if !self.tied_embeddings {
                    after.push(matrix(Slot::Head, "lm_head.weight", v, h));
                }
                if self.mlm_decoder_bias {
                    after.push(bias(Slot::HeadBias, "decoder.bias", v));
                }
            }
            (Head::SequenceClassification(pooling), Some(c)) => {
                // (the dense before the output: weight, bias), (the output: weight, bias)
                let (dense, (weight, bias_name)) = match pooling {
                    Pooling::Pooler => (
                        Some(("pooler.dense.weight", "pooler.dense.bias")),
                        ("classifier.weight", "classifier.bias"),
                    ),
                    Pooling::ClassificationHead => (
                        Some(("classifier.dense.weight", "classifier.dense.bias")),
                        ("classifier.out_proj.weight", "classifier.out_proj.bias"),
                    ),
                    Pooling::LastToken => (None, ("score.weight", "score.bias")),
                    Pooling::FirstTokenHead | Pooling::MeanHead => {
                        prediction_head(&mut after, self, h);
                        (None, ("classifier.weight", "classifier.bias"))
                    }
                };
                if let Some((dense_weight, dense_bias)) = dense {
                    after.push(matrix(Slot::Pooler, dense_weight, h, h));
                    after.push(bias(Slot::Pooler, dense_bias, h));
                }
                after.push(matrix(Slot::Head, weight, c.labels, h));
                if c.bias {
                    after.push(bias(Slot::HeadBias, bias_name, c.labels));
                }
            }
            (Head::TokenClassification, Some(c)) => {
                if self.classifier_prediction_head {
                    prediction_head(&mut after, self, h);
                }
                after.push(matrix(Slot::Head, "classifier.weight", c.labels, h));
                if c.bias {
                    after.push(bias(Slot::HeadBias, "classifier.bias", c.labels));
                }
            }
            (Head::SequenceClassification(_) | Head::TokenClassification, None) => {
                unreachable!("ModelSpec::for_task sets a classifier with a classification head")
            }
        }

        let mut buffers = Vec::new();
        if let Positions::Rotary { dims } = self.positions {
            // `inv_freq` and `original_inv_freq`, `dims / 2` each, in the parameters' dtype.
            // One pair per attention type with its own base (ModernBERT).
            buffers.push(BufferDecl {
                name: "rotary_emb.inv_freq",
                numel: dims / 2 * 2 * self.rotary_inv_freq_pairs(),
                dtype: None,
            });
        }
        if let Some(Moe { experts, router: Router::DeepseekSigmoid { .. }, .. }) = self.moe {
            // DeepSeek-V3's `e_score_correction_bias`, fp32, one per sparse layer.
            let sparse = self.n_layers.saturating_sub(self.dense_mlp_layers.len() as u64);
            buffers.push(BufferDecl {
                name: "mlp.gate.e_score_correction_bias",
                numel: experts.saturating_mul(sparse),
                dtype: Some(DType::F32),
            });
        }
        if self.id_buffers
            && let Positions::Learned { max_positions, .. } = self.positions
        {
            for name in ["embeddings.position_ids", "embeddings.token_type_ids"] {
                buffers.push(BufferDecl { name, numel: max_positions, dtype: Some(DType::I64) });
            }
        }

        // ModernBERT's first layer has no attention-input norm (`nn.Identity()`): its second
        // form is the layer without it.
        let (dense_layers, dense_layer) = if self.first_layer_input_norm {
            (self.dense_mlp_layers.clone(), dense_layer)
        } else {
            // (No architecture has both this and a mixture of experts.)
            let first = layer.iter().filter(|d| d.slot != Slot::Norm1).copied().collect();
            (vec![0], first)
        };
        ParameterLayout {
            before,
            layer,
            n_layers: self.n_layers,
            dense_layers,
            dense_layer,
            after,
            tied: self.tied_embeddings,
            buffers,
            peft_moe: self.moe.and_then(|m| {
                let names =
                    crate::peft::MoeTargetNames::of_model_type(self.architecture.model_type())?;
                Some(crate::peft::PeftMoe { names, experts: m.experts })
            }),
        }
    }

    /// T5's parameters (`T5ForConditionalGeneration`): the shared embedding (the LM head is
    /// tied to it), each stack's relative-bias table (held by its first layer's
    /// self-attention, listed here before the layers), the encoder layers (self-attention,
    /// feed-forward) then the decoder layers (self-attention, cross-attention, feed-forward:
    /// the layout's second form), each stack's final norm. No bias anywhere, no buffer.
    fn seq2seq_layout(&self) -> ParameterLayout {
        let h = self.hidden_size;
        let inner = self.q_width();
        let i = self.intermediate_size;
        let buckets = match self.positions {
            Positions::Relative { buckets } => buckets,
            Positions::Rotary { .. } | Positions::Learned { .. } => 0,
        };
        let vector = |slot, name| ParameterDecl {
            slot,
            name,
            shape: Shape::Vector { len: h },
            matmul: false,
            trains: true,
        };
        let before = vec![
            matrix(Slot::Embed, "shared.weight", self.vocab_size, h),
            table(
                Slot::RelativeBias,
                "encoder.relative_attention_bias.weight",
                buckets,
                self.n_heads,
            ),
            table(
                Slot::RelativeBias,
                "decoder.relative_attention_bias.weight",
                buckets,
                self.n_heads,
            ),
        ];
        let attention = |slot_qkv, slot_o, prefix: [&'static str; 4]| {
            vec![
                matrix(slot_qkv, prefix[0], h, inner),
                matrix(slot_qkv, prefix[1], h, inner),
                matrix(slot_qkv, prefix[2], h, inner),
                matrix(slot_o, prefix[3], inner, h),
            ]
        };
        let feed_forward: Vec<ParameterDecl> = if self.gated_mlp {
            vec![
                matrix(Slot::Mlp, "DenseReluDense.wi_0.weight", h, i),
                matrix(Slot::Mlp, "DenseReluDense.wi_1.weight", h, i),
                matrix(Slot::Mlp, "DenseReluDense.wo.weight", i, h),
            ]
        } else {
            vec![
                matrix(Slot::Mlp, "DenseReluDense.wi.weight", h, i),
                matrix(Slot::Mlp, "DenseReluDense.wo.weight", i, h),
            ]
        };
        let self_attention = attention(
            Slot::Qkv,
            Slot::O,
            [
                "SelfAttention.q.weight",
                "SelfAttention.k.weight",
                "SelfAttention.v.weight",
                "SelfAttention.o.weight",
            ],
        );
        let mut layer = self_attention.clone();
        layer.push(vector(Slot::Norm1, "layer.0.layer_norm.weight"));
        layer.extend(feed_forward.iter().copied());
        layer.push(vector(Slot::Norm2, "layer.1.layer_norm.weight"));
        let mut decoder_layer = self_attention;
        decoder_layer.push(vector(Slot::Norm1, "layer.0.layer_norm.weight"));
        decoder_layer.extend(attention(
            Slot::CrossQkv,
            Slot::CrossO,
            [
                "EncDecAttention.q.weight",
                "EncDecAttention.k.weight",
                "EncDecAttention.v.weight",
                "EncDecAttention.o.weight",
            ],
        ));
        decoder_layer.push(vector(Slot::CrossNorm, "layer.1.layer_norm.weight"));
        decoder_layer.extend(feed_forward);
        decoder_layer.push(vector(Slot::Norm2, "layer.2.layer_norm.weight"));
        let after = vec![
            vector(Slot::FinalNorm, "encoder.final_layer_norm.weight"),
            vector(Slot::FinalNorm, "decoder.final_layer_norm.weight"),
        ];
        ParameterLayout {
            before,
            layer,
            n_layers: self.n_layers,
            dense_layers: (self.encoder_layers()..self.n_layers).collect(),
            dense_layer: decoder_layer,
            after,
            tied: true,
            buffers: Vec::new(),
            peft_moe: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{ModelSpec, catalog};

    fn spec(name: &str, overrides: &[(&str, serde_json::Value)]) -> ModelSpec {
        let mut config: serde_json::Value =
            serde_json::from_str(catalog::config_json(name).expect("catalog")).expect("json");
        for (k, v) in overrides {
            config[*k] = v.clone();
        }
        ModelSpec::from_hf_config(&config.to_string()).expect("resolves")
    }

    #[track_caller]
    fn check_layer_names(name: &str, overrides: &[(&str, serde_json::Value)], expected: &[&str]) {
        let layout = spec(name, overrides).parameter_layout();
        let names: Vec<&str> = layout.layer.iter().map(|d| d.name).collect();
        assert_eq!(names, expected, "{name}");
    }

    #[test]
    fn mixtral_layers_hold_the_router_and_two_fused_expert_tensors() {
        check_layer_names(
            "mixtral-8x7b",
            &[],
            &[
                "input_layernorm.weight",
                "q_proj.weight",
                "k_proj.weight",
                "v_proj.weight",
                "o_proj.weight",
                "post_attention_layernorm.weight",
                "router.weight",
                "experts.gate_up_proj",
                "experts.down_proj",
            ],
        );
    }

    /// Qwen-MoE's layers: the router, the experts, the gated shared expert (Qwen2-MoE); the
    /// layers `mlp_only_layers` names or `decoder_sparse_step` skips have the dense MLP. The
    /// counts are transformers 5.24's (`AutoModelForCausalLM.from_config` on the meta device
    /// with these overrides).
    #[test]
    fn qwen_moe_layers_count_as_transformers_does() {
        use serde_json::json;
        check_layer_names(
            "qwen1.5-moe-a2.7b",
            &[],
            &[
                "input_layernorm.weight",
                "q_proj.weight",
                "q_proj.bias",
                "k_proj.weight",
                "k_proj.bias",
                "v_proj.weight",
                "v_proj.bias",
                "o_proj.weight",
                "post_attention_layernorm.weight",
                "router.weight",
                "experts.gate_up_proj",
                "experts.down_proj",
                "shared_expert.gate_proj.weight",
                "shared_expert.up_proj.weight",
                "shared_expert.down_proj.weight",
                "shared_expert_gate.weight",
            ],
        );
        for (name, overrides, dense, expected) in [
            (
                "qwen1.5-moe-a2.7b",
                vec![("num_hidden_layers", json!(3)), ("mlp_only_layers", json!([1]))],
                vec![1],
                1_814_843_392,
            ),
            (
                "qwen3-30b-a3b",
                vec![
                    ("num_hidden_layers", json!(4)),
                    ("decoder_sparse_step", json!(2)),
                    ("mlp_only_layers", json!([3])),
                ],
                vec![0, 2, 3],
                1_415_334_912,
            ),
            (
                "qwen3-30b-a3b",
                vec![("num_hidden_layers", json!(2)), ("num_experts", json!(8))],
                vec![],
                735_619_584,
            ),
            (
                "qwen1.5-moe-a2.7b",
                vec![
                    ("num_hidden_layers", json!(2)),
                    ("num_experts", json!(8)),
                    ("qkv_bias", json!(false)),
                ],
                vec![],
                863_549_440,
            ),
        ] {
            let s = spec(name, &overrides);
            assert_eq!(s.dense_mlp_layers, dense, "{name} {overrides:?}");
            assert_eq!(s.parameter_count(), expected, "{name} {overrides:?}");
            let layout = s.parameter_layout();
            for l in 0..s.n_layers {
                let routed = layout.layer_decls(l).iter().any(|d| d.slot == super::Slot::Router);
                assert_eq!(routed, !dense.contains(&l), "{name} layer {l}");
            }
        }
    }

    /// `LlamaMLP` gives all three projections a bias when `mlp_bias` is set.
    #[test]
    fn llama_mlp_bias_puts_a_bias_on_every_projection() {
        check_layer_names(
            "llama-3.2-1b",
            &[("mlp_bias", serde_json::Value::Bool(true))],
            &[
                "input_layernorm.weight",
                "q_proj.weight",
                "k_proj.weight",
                "v_proj.weight",
                "o_proj.weight",
                "post_attention_layernorm.weight",
                "gate_proj.weight",
                "gate_proj.bias",
                "up_proj.weight",
                "up_proj.bias",
                "down_proj.weight",
                "down_proj.bias",
            ],
        );
        let plain = spec("llama-3.2-1b", &[]);
        let biased = spec("llama-3.2-1b", &[("mlp_bias", serde_json::Value::Bool(true))]);
        let per_layer = 2 * plain.intermediate_size + plain.hidden_size;
        assert_eq!(biased.parameter_count() - plain.parameter_count(), per_layer * plain.n_layers);
    }

    /// The classification models' parameter counts, as transformers 5.24 reports them
    /// (`AutoModelFor*.from_config` on the meta device, `num_labels` set).
    #[test]
    fn task_heads_count_as_transformers_does() {
        use crate::model::Task;
        for (name, task, labels, expected) in [
            ("bert-base-uncased", Task::SeqCls, 2, 109_483_778),
            ("bert-base-uncased", Task::TokenCls, 9, 108_898_569),
            ("roberta-base", Task::SeqCls, 2, 124_647_170),
            ("llama-3.2-1b", Task::SeqCls, 2, 1_235_818_496),
            ("llama-3.2-1b", Task::TokenCls, 2, 1_235_818_498),
            ("gpt2", Task::TokenCls, 2, 124_441_346),
            ("gemma-2-2b", Task::SeqCls, 3, 2_614_348_800),
            // ModernBERT's classifiers keep the prediction head (transformers, meta device).
            ("modernbert-base", Task::SeqCls, 2, 149_606_402),
            ("modernbert-base", Task::SeqCls, 3, 149_607_171),
            ("modernbert-base", Task::TokenCls, 9, 149_611_785),
        ] {
            let s = spec(name, &[]).for_task(task, labels).expect("task");
            assert_eq!(s.parameter_count(), expected, "{name} {task}");
        }
    }

    #[test]
    fn the_default_task_changes_nothing_and_the_others_are_refused() {
        use crate::model::{Task, TaskError};
        for name in catalog::names() {
            let s = spec(name, &[]);
            assert_eq!(s.for_task(s.default_task(), 7), Ok(s.clone()), "{name}");
            for task in Task::ALL {
                let r = s.for_task(task, 2);
                assert_eq!(r.is_ok(), s.tasks().contains(&task), "{name} {task}");
            }
            if s.tasks().contains(&Task::SeqCls) {
                assert!(matches!(s.for_task(Task::SeqCls, 0), Err(TaskError::Labels { .. })));
            }
        }
        assert_eq!("seq2seq".parse::<Task>(), Ok(Task::Seq2Seq));
        assert!("translation".parse::<Task>().is_err());
        assert_eq!("SEQ-CLS".parse::<Task>(), Ok(Task::SeqCls));
    }

    #[test]
    fn modernbert_layer_zero_has_no_attention_norm_and_its_norms_no_bias() {
        let s = spec("modernbert-base", &[]);
        let layout = s.parameter_layout();
        assert_eq!(layout.layer_decls(0).len() + 1, layout.layer_decls(1).len());
        assert!(layout.layer_decls(0).iter().all(|d| d.slot != super::Slot::Norm1));
        assert!(layout.iter().all(|(_, d)| d.name != "bias"));
        // Layers 0, 3, 6, ... attend globally; two rotary tables.
        assert_eq!(s.sliding_layers.first(), Some(&1));
        assert!(!s.sliding_layers.contains(&3));
        assert_eq!(s.rotary_tables, 2);
        assert_eq!(s.eager_masks, 1);
        let one = spec("modernbert-base", &[("num_hidden_layers", 1.into())]);
        assert_eq!((one.rotary_tables, one.eager_masks), (1, 1));
    }

    #[test]
    fn a_tied_head_is_the_embedding() {
        for name in catalog::names() {
            let s = spec(name, &[]);
            let layout = s.parameter_layout();
            let heads = layout.after.iter().filter(|d| d.slot == super::Slot::Head).count();
            assert_eq!(heads, usize::from(!s.tied_embeddings), "{name}");
            assert_eq!(layout.before[0].matmul, s.tied_embeddings, "{name}");
        }
    }

    /// DeepSeek's layouts against transformers 5.24's counts (`sum(p.numel())` on the meta
    /// device): the low-rank query with biases, dense first layers, no shared experts, MLP
    /// biases; V3's fp32 `e_score_correction_bias` per sparse layer.
    #[test]
    fn deepseek_variants_count_as_transformers_builds_them() {
        use serde_json::json;
        let count = |name, overrides: &[(&str, serde_json::Value)]| {
            spec(name, overrides).parameter_layout().parameter_count().unwrap()
        };
        let q_lora = [
            ("q_lora_rank", json!(768)),
            ("attention_bias", json!(true)),
            ("num_hidden_layers", json!(4)),
        ];
        assert_eq!(count("deepseek-v2-lite", &q_lora), 2_245_562_624);
        let dense = [("num_hidden_layers", json!(7)), ("first_k_dense_replace", json!(5))];
        assert_eq!(count("deepseek-v3", &dense), 27_785_354_240);
        let v3 = spec("deepseek-v3", &dense).parameter_layout();
        let bias = v3.buffers.iter().find(|b| b.name.contains("e_score")).expect("the buffer");
        assert_eq!((bias.numel, bias.dtype), (2 * 256, Some(crate::units::DType::F32)));
        let unshared = [
            ("num_hidden_layers", json!(3)),
            ("mlp_bias", json!(true)),
            ("n_shared_experts", json!(0)),
        ];
        assert_eq!(count("deepseek-v2", &unshared), 9_236_463_616);
        let all_sparse = [
            ("num_hidden_layers", json!(3)),
            ("first_k_dense_replace", json!(0)),
            ("vocab_size", json!(1000)),
        ];
        assert_eq!(count("deepseek-v2-lite", &all_sparse), 1_758_641_664);
        check_layer_names(
            "deepseek-v3",
            &[("first_k_dense_replace", json!(0))],
            &[
                "input_layernorm.weight",
                "q_a_proj.weight",
                "q_a_layernorm.weight",
                "q_b_proj.weight",
                "kv_a_proj_with_mqa.weight",
                "kv_a_layernorm.weight",
                "kv_b_proj.weight",
                "o_proj.weight",
                "post_attention_layernorm.weight",
                "gate.weight",
                "experts.gate_up_proj",
                "experts.down_proj",
                "shared_experts.gate_proj.weight",
                "shared_experts.up_proj.weight",
                "shared_experts.down_proj.weight",
            ],
        );
    }

    /// T5's tensors as transformers builds them, piece by piece: the shared table (the LM head
    /// tied to it), two relative-bias tables of `buckets × heads`, encoder layers (q, k, v, o,
    /// two norms, the feed-forward), decoder layers (a cross-attention and its norm more),
    /// two final norms; the totals are transformers' counts (`validation/check_catalog.py`).
    #[test]
    fn t5_layouts_count_as_transformers_builds_them() {
        let s = spec("t5-small", &[]);
        let layout = s.parameter_layout();
        let (v, h, i, heads, inner) = (32128u64, 512u64, 2048u64, 8u64, 512u64);
        let attention = 3 * h * inner + inner * h;
        let encoder = attention + 2 * h * i + 2 * h;
        let decoder = 2 * attention + 2 * h * i + 3 * h;
        let expected = v * h + 2 * 32 * heads + 6 * encoder + 6 * decoder + 2 * h;
        assert_eq!(s.parameter_count(), expected);
        assert_eq!(expected, 60_506_624);
        assert_eq!((s.n_layers, s.decoder_layers, s.encoder_layers()), (12, 6, 6));
        assert!(layout.tied && layout.buffers.is_empty());
        assert_eq!(layout.layer_decls(5).len(), 8);
        assert_eq!(layout.layer_decls(6).len(), 13, "the decoder's cross-attention");
        assert!(s.scale_decoder_outputs, "T5 scales before its tied head");
        // Flan-T5: gated-GELU (`gelu_new`), written untied, which in transformers 5 only turns
        // the scaling off: the head stays tied.
        let flan = spec("flan-t5-base", &[]);
        assert!(flan.gated_mlp && flan.tied_embeddings && !flan.scale_decoder_outputs);
        assert_eq!(flan.activation, crate::model::Activation::GeluPython);
        assert_eq!(flan.parameter_count(), 222_903_552);
        // mT5: never scaled, a 250k vocabulary.
        let mt5 = spec("mt5-small", &[]);
        assert!(mt5.tied_embeddings && !mt5.scale_decoder_outputs);
        assert_eq!(mt5.parameter_count(), 172_119_424);
        // An uneven decoder and the buckets: the table grows, nothing else.
        let uneven = spec("t5-small", &[("num_decoder_layers", 2.into())]);
        assert_eq!(s.parameter_count() - uneven.parameter_count(), 4 * decoder);
        let buckets = spec("t5-small", &[("relative_attention_num_buckets", 64.into())]);
        assert_eq!(buckets.parameter_count() - s.parameter_count(), 2 * 32 * heads);
    }
}
