//! [`ModelSpec`]: a transformer's shape with every default made explicit.
//!
//! A spec comes from a Hugging Face `config.json` in two steps: [`RawConfig::parse`] mirrors the
//! JSON (aliases folded, nothing decided), then [`ModelSpec::resolve`] — the one place that knows
//! each architecture's defaults and module layout as `transformers` builds it — checks the
//! values and fills in what the file leaves out.

use std::fmt;

use serde::Serialize;

use crate::hf_config::RawConfig;

/// An architecture (`model_type`) vramfit models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Architecture {
    /// Llama 2 / 3.x.
    Llama,
    /// Mistral.
    Mistral,
    /// Mixtral (sparse mixture of experts, top-k routing).
    Mixtral,
    /// Qwen 2 / 2.5 (q/k/v biases).
    Qwen2,
    /// Qwen 3 (per-head q/k RMSNorm).
    Qwen3,
    /// Gemma (tied, GeGLU, scaled embeddings).
    Gemma,
    /// Gemma 2 (sandwich norms, logit softcapping).
    Gemma2,
    /// Phi-3 (fused qkv and gate/up projections).
    Phi3,
    /// GPT-2 (Conv1D, learned positions, dropouts).
    Gpt2,
    /// GPT-NeoX / Pythia (parallel residual, partial rotary).
    GptNeox,
    /// BERT (masked-LM head, token types).
    Bert,
    /// RoBERTa.
    Roberta,
}

impl Architecture {
    /// Every supported architecture.
    pub const ALL: [Architecture; 12] = [
        Architecture::Llama,
        Architecture::Mistral,
        Architecture::Mixtral,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Gemma,
        Architecture::Gemma2,
        Architecture::Phi3,
        Architecture::Gpt2,
        Architecture::GptNeox,
        Architecture::Bert,
        Architecture::Roberta,
    ];

    /// The `model_type` string of `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Mixtral => "mixtral",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Gemma => "gemma",
            Architecture::Gemma2 => "gemma2",
            Architecture::Phi3 => "phi3",
            Architecture::Gpt2 => "gpt2",
            Architecture::GptNeox => "gpt_neox",
            Architecture::Bert => "bert",
            Architecture::Roberta => "roberta",
        }
    }

    fn from_model_type(s: &str) -> Option<Architecture> {
        Architecture::ALL.into_iter().find(|a| a.model_type() == s)
    }

    fn supported_list() -> String {
        Architecture::ALL.map(Architecture::model_type).join(", ")
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.model_type())
    }
}

/// The MLP's activation function, as far as memory is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `F.silu`: saves its input.
    Silu,
    /// `F.gelu` (exact or tanh): saves its input.
    Gelu,
    /// `gelu_new` / `gelu_fast`: a Python formula of several element-wise ops, each saving.
    GeluPython,
    /// `F.relu`: saves its output.
    Relu,
}

/// The normalisation layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// HF RMSNorm (Llama family): fp32 upcast, weight × normalised.
    RmsNorm,
    /// Gemma RMSNorm: fp32 throughout, `(1 + weight)` scale, cast at the end.
    GemmaRmsNorm,
    /// `nn.LayerNorm` with bias.
    LayerNorm,
}

/// How positions enter the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Positions {
    /// Rotary embeddings on the first `dims` of each head.
    Rotary {
        /// Rotated dimensions per head.
        dims: u64,
    },
    /// A learned position table (GPT-2, BERT).
    Learned {
        /// Rows of the table (`max_position_embeddings`).
        max_positions: u64,
    },
}

/// The output head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Head {
    /// Next-token prediction over the vocabulary.
    CausalLm,
    /// BERT's masked-LM head: dense + activation + LayerNorm + decoder over the vocabulary.
    MaskedLm,
}

/// A sparse mixture of experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Moe {
    /// Experts per layer.
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
}

/// A transformer's shape with every default explicit. Build it with
/// [`ModelSpec::from_hf_config`] (or [`ModelSpec::resolve`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    /// The architecture.
    pub architecture: Architecture,
    /// Vocabulary rows of the embedding table.
    pub vocab_size: u64,
    /// Model width.
    pub hidden_size: u64,
    /// Decoder (or encoder) layers.
    pub n_layers: u64,
    /// Query heads.
    pub n_heads: u64,
    /// Key/value heads (= `n_heads` without GQA, 1 for MQA).
    pub n_kv_heads: u64,
    /// Width of one head.
    pub head_dim: u64,
    /// MLP inner width (per expert for MoE).
    pub intermediate_size: u64,
    /// `down(act(gate(x)) * up(x))` rather than `down(act(up(x)))`.
    pub gated_mlp: bool,
    /// The MLP activation.
    pub activation: Activation,
    /// The normalisation layer.
    pub norm: Norm,
    /// Biases on the q, k, v projections.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub o_bias: bool,
    /// Biases on the MLP projections.
    pub mlp_bias: bool,
    /// q, k, v computed by one projection (GPT-2, GPT-NeoX, Phi-3).
    pub fused_qkv: bool,
    /// Gate and up computed by one projection (Phi-3).
    pub fused_gate_up: bool,
    /// Per-head RMSNorm on q and k (Qwen 3).
    pub qk_norm: bool,
    /// Norms after attention and MLP as well as before (Gemma 2).
    pub sandwich_norm: bool,
    /// Attention and MLP read the same input, outputs summed (GPT-NeoX).
    pub parallel_residual: bool,
    /// The output head shares the embedding matrix.
    pub tied_embeddings: bool,
    /// Embeddings multiplied by `sqrt(hidden_size)` (Gemma).
    pub scaled_embeddings: bool,
    /// Position encoding.
    pub positions: Positions,
    /// Rows of the token-type table (BERT; 0 when absent).
    pub type_vocab_size: u64,
    /// Mixture of experts, if any.
    pub moe: Option<Moe>,
    /// Dropout on attention probabilities.
    pub attention_dropout: f64,
    /// Dropout on residual branches (and hidden states).
    pub hidden_dropout: f64,
    /// Dropout on the embedding output.
    pub embedding_dropout: f64,
    /// `tanh` softcapping of attention scores (Gemma 2).
    pub attn_softcap: Option<f64>,
    /// `tanh` softcapping of the final logits (Gemma 2).
    pub final_softcap: Option<f64>,
    /// The output head.
    pub head: Head,
}

/// A `config.json` that cannot be turned into a [`ModelSpec`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON, or truncated.
    #[error("config.json is not valid JSON at line {line} column {column}: {message}")]
    Json {
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// What serde_json said.
        message: String,
    },
    /// Valid JSON but not an object.
    #[error("config.json must be a JSON object")]
    NotAnObject,
    /// Far larger than any real config.
    #[error("config.json is {bytes} bytes, larger than any model config")]
    TooLarge {
        /// Its size.
        bytes: u64,
    },
    /// A field has the wrong JSON type.
    #[error("field '{field}' must be {expected}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// What it should be.
        expected: &'static str,
    },
    /// A required field is absent.
    #[error("config.json lacks the field '{field}'")]
    Missing {
        /// The field.
        field: &'static str,
    },
    /// `model_type` is not one vramfit models.
    #[error("unknown model_type '{given}' (supported: {supported})")]
    UnknownArchitecture {
        /// What the file says.
        given: String,
        /// The supported `model_type`s, comma separated.
        supported: String,
    },
    /// A value outside what any real model uses.
    #[error("field '{field}' = {value} is out of range ({min}..={max})")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value found.
        value: String,
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// Two fields that must divide do not.
    #[error("field '{field}' = {value} does not divide {other} = {other_value}")]
    NotDivisible {
        /// The divisor field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The dividend field.
        other: &'static str,
        /// Its value.
        other_value: u64,
    },
    /// An activation function vramfit does not know.
    #[error(
        "field '{field}' = '{given}' is not a supported activation (silu, gelu, gelu_new, gelu_pytorch_tanh, relu)"
    )]
    UnknownActivation {
        /// The field.
        field: &'static str,
        /// The value found.
        given: String,
    },
    /// The parameter count overflows 64 bits.
    #[error("the model's parameter count overflows 64 bits")]
    Overflow,
}

impl ConfigError {
    /// A one-line hint for the user.
    pub fn hint(&self) -> String {
        match self {
            ConfigError::Json { .. } | ConfigError::NotAnObject | ConfigError::TooLarge { .. } => {
                "pass the model's config.json (the small JSON file next to the weights), or a catalog name such as llama-3.1-8b".into()
            }
            ConfigError::UnknownArchitecture { .. } => {
                "estimate a similar supported architecture, or use --params for model states only".into()
            }
            ConfigError::Missing { field } => {
                format!("add '{field}' to config.json (see the model card's config on the Hugging Face Hub)")
            }
            ConfigError::WrongType { field, .. }
            | ConfigError::OutOfRange { field, .. }
            | ConfigError::NotDivisible { field, .. }
            | ConfigError::UnknownActivation { field, .. } => {
                format!("check '{field}' against the model's published config.json")
            }
            ConfigError::Overflow => "check the sizes in config.json; no real model is this large".into(),
        }
    }
}

const MAX_VOCAB: u64 = 1 << 24;
const MAX_HIDDEN: u64 = 1 << 18;
const MAX_LAYERS: u64 = 4096;
const MAX_HEADS: u64 = 4096;
const MAX_INTERMEDIATE: u64 = 1 << 21;
const MAX_POSITIONS: u64 = 1 << 24;
const MAX_EXPERTS: u64 = 4096;

fn required(value: Option<u64>, field: &'static str) -> Result<u64, ConfigError> {
    value.ok_or(ConfigError::Missing { field })
}

fn in_range(value: u64, field: &'static str, min: u64, max: u64) -> Result<u64, ConfigError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::OutOfRange { field, value: value.to_string(), min, max })
    }
}

fn probability(value: Option<f64>, field: &'static str, default: f64) -> Result<f64, ConfigError> {
    let p = value.unwrap_or(default);
    if (0.0..1.0).contains(&p) {
        Ok(p)
    } else {
        Err(ConfigError::OutOfRange { field, value: p.to_string(), min: 0, max: 1 })
    }
}

fn activation(name: &str, field: &'static str) -> Result<Activation, ConfigError> {
    Ok(match name {
        "silu" | "swish" => Activation::Silu,
        "gelu" | "gelu_pytorch_tanh" | "gelu_10" => Activation::Gelu,
        "gelu_new" | "gelu_fast" | "gelu_python" | "gelu_accurate" | "gelu_python_tanh" => {
            Activation::GeluPython
        }
        "relu" => Activation::Relu,
        _ => return Err(ConfigError::UnknownActivation { field, given: name.to_string() }),
    })
}

impl ModelSpec {
    /// Parses a Hugging Face `config.json` and resolves it.
    pub fn from_hf_config(json: &str) -> Result<ModelSpec, ConfigError> {
        ModelSpec::resolve(&RawConfig::parse(json)?)
    }

    /// Resolves a raw config into a spec: the one place where defaults are chosen.
    ///
    /// Required everywhere: `model_type`, `vocab_size`, `hidden_size`, `num_hidden_layers`,
    /// `num_attention_heads`, and `intermediate_size` except for GPT-2 (`n_inner` defaults to
    /// 4 × width). Everything else takes the default of the architecture's `transformers`
    /// config class: `num_key_value_heads` = heads, `head_dim` = width / heads (Gemma: 256),
    /// activations (silu; GPT-2 `gelu_new`; Gemma 2 `gelu_pytorch_tanh`; BERT, NeoX `gelu`),
    /// tied embeddings (Gemma, GPT-2, BERT, RoBERTa: yes; others: no), dropouts (GPT-2 0.1,
    /// BERT/RoBERTa 0.1, others 0), NeoX `rotary_pct` 0.25 and parallel residual, Mixtral 8
    /// experts top-2, Gemma 2 softcaps 50 / 30, BERT `type_vocab_size` 2.
    pub fn resolve(raw: &RawConfig) -> Result<ModelSpec, ConfigError> {
        use Architecture as A;
        let model_type =
            raw.model_type.as_deref().ok_or(ConfigError::Missing { field: "model_type" })?;
        let arch = Architecture::from_model_type(model_type).ok_or_else(|| {
            ConfigError::UnknownArchitecture {
                given: model_type.to_string(),
                supported: Architecture::supported_list(),
            }
        })?;

        let vocab_size =
            in_range(required(raw.vocab_size, "vocab_size")?, "vocab_size", 1, MAX_VOCAB)?;
        let hidden_size =
            in_range(required(raw.hidden_size, "hidden_size")?, "hidden_size", 1, MAX_HIDDEN)?;
        let n_layers = in_range(
            required(raw.num_hidden_layers, "num_hidden_layers")?,
            "num_hidden_layers",
            1,
            MAX_LAYERS,
        )?;
        let n_heads = in_range(
            required(raw.num_attention_heads, "num_attention_heads")?,
            "num_attention_heads",
            1,
            MAX_HEADS,
        )?;
        let intermediate_size = match (arch, raw.intermediate_size) {
            (A::Gpt2, None) => hidden_size.checked_mul(4).ok_or(ConfigError::Overflow)?,
            (_, v) => required(v, "intermediate_size")?,
        };
        let intermediate_size =
            in_range(intermediate_size, "intermediate_size", 1, MAX_INTERMEDIATE)?;

        let n_kv_heads = in_range(
            raw.num_key_value_heads.unwrap_or(n_heads),
            "num_key_value_heads",
            1,
            MAX_HEADS,
        )?;
        if n_heads % n_kv_heads != 0 {
            return Err(ConfigError::NotDivisible {
                field: "num_key_value_heads",
                value: n_kv_heads,
                other: "num_attention_heads",
                other_value: n_heads,
            });
        }
        let explicit_head_dim = matches!(
            arch,
            A::Llama | A::Mistral | A::Mixtral | A::Qwen2 | A::Qwen3 | A::Gemma | A::Gemma2
        )
        .then_some(raw.head_dim)
        .flatten();
        let head_dim = match explicit_head_dim {
            Some(d) => in_range(d, "head_dim", 1, MAX_HIDDEN)?,
            None if matches!(arch, A::Gemma | A::Gemma2) => 256,
            None if matches!(arch, A::Qwen3) => 128,
            None => {
                if hidden_size % n_heads != 0 {
                    return Err(ConfigError::NotDivisible {
                        field: "num_attention_heads",
                        value: n_heads,
                        other: "hidden_size",
                        other_value: hidden_size,
                    });
                }
                hidden_size / n_heads
            }
        };

        let (act_field, act_name) = match (arch, &raw.hidden_activation, &raw.hidden_act) {
            (A::Gemma2, Some(a), _) => ("hidden_activation", a.as_str()),
            (A::Gemma2, None, _) => ("hidden_activation", "gelu_pytorch_tanh"),
            (_, _, Some(a)) => ("hidden_act", a.as_str()),
            (A::Gpt2, _, None) => ("activation_function", "gelu_new"),
            (A::Gemma, _, None) => ("hidden_act", "gelu_pytorch_tanh"),
            (A::Bert | A::Roberta | A::GptNeox, _, None) => ("hidden_act", "gelu"),
            (_, _, None) => ("hidden_act", "silu"),
        };
        let activation = activation(act_name, act_field)?;

        let llama_like = matches!(
            arch,
            A::Llama
                | A::Mistral
                | A::Mixtral
                | A::Qwen2
                | A::Qwen3
                | A::Gemma
                | A::Gemma2
                | A::Phi3
        );
        let encoder = matches!(arch, A::Bert | A::Roberta);
        let norm = match arch {
            A::Gemma | A::Gemma2 => Norm::GemmaRmsNorm,
            _ if llama_like => Norm::RmsNorm,
            _ => Norm::LayerNorm,
        };
        let attention_bias = raw.attention_bias;
        let (qkv_bias, o_bias) = match arch {
            A::Qwen2 => (true, false),
            A::Gpt2 | A::Bert | A::Roberta => (true, true),
            A::GptNeox => (attention_bias.unwrap_or(true), attention_bias.unwrap_or(true)),
            _ => (attention_bias.unwrap_or(false), attention_bias.unwrap_or(false)),
        };
        let mlp_bias = match arch {
            A::Llama => raw.mlp_bias.unwrap_or(false),
            A::Gpt2 | A::GptNeox | A::Bert | A::Roberta => true,
            _ => false,
        };
        let tied_embeddings = match arch {
            A::Gemma | A::Gemma2 | A::Gpt2 | A::Bert | A::Roberta => {
                raw.tie_word_embeddings.unwrap_or(true)
            }
            _ => raw.tie_word_embeddings.unwrap_or(false),
        };

        let max_positions = raw
            .max_position_embeddings
            .map(|p| in_range(p, "max_position_embeddings", 1, MAX_POSITIONS))
            .transpose()?;
        let positions = match arch {
            A::Gpt2 => Positions::Learned { max_positions: max_positions.unwrap_or(1024) },
            A::Bert | A::Roberta => {
                Positions::Learned { max_positions: max_positions.unwrap_or(512) }
            }
            A::GptNeox => {
                let pct = raw.rotary_pct.unwrap_or(0.25);
                if !(0.0..=1.0).contains(&pct) {
                    return Err(ConfigError::OutOfRange {
                        field: "rotary_pct",
                        value: pct.to_string(),
                        min: 0,
                        max: 1,
                    });
                }
                Positions::Rotary { dims: (head_dim as f64 * pct) as u64 }
            }
            _ => Positions::Rotary { dims: head_dim },
        };

        let moe = match arch {
            A::Mixtral => {
                let experts = in_range(
                    raw.num_local_experts.unwrap_or(8),
                    "num_local_experts",
                    1,
                    MAX_EXPERTS,
                )?;
                let top_k = in_range(
                    raw.num_experts_per_tok.unwrap_or(2),
                    "num_experts_per_tok",
                    1,
                    experts,
                )?;
                Some(Moe { experts, top_k })
            }
            _ => None,
        };

        let dropout_default =
            if matches!(arch, A::Gpt2 | A::Bert | A::Roberta) { 0.1 } else { 0.0 };
        let attention_dropout =
            probability(raw.attention_dropout, "attention_dropout", dropout_default)?;
        let hidden_dropout = probability(raw.hidden_dropout, "hidden_dropout", dropout_default)?;
        let embedding_dropout = match arch {
            A::Gpt2 | A::Phi3 => probability(raw.embedding_dropout, "embd_pdrop", dropout_default)?,
            A::Bert | A::Roberta | A::GptNeox => hidden_dropout,
            _ => 0.0,
        };
        let (attn_softcap, final_softcap) = match arch {
            A::Gemma2 => (
                Some(raw.attn_logit_softcapping.unwrap_or(50.0)),
                Some(raw.final_logit_softcapping.unwrap_or(30.0)),
            ),
            _ => (None, None),
        };
        let type_vocab_size = if encoder {
            in_range(raw.type_vocab_size.unwrap_or(2), "type_vocab_size", 1, MAX_VOCAB)?
        } else {
            0
        };

        let spec = ModelSpec {
            architecture: arch,
            vocab_size,
            hidden_size,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            intermediate_size,
            gated_mlp: llama_like,
            activation,
            norm,
            qkv_bias,
            o_bias,
            mlp_bias,
            fused_qkv: matches!(arch, A::Gpt2 | A::GptNeox | A::Phi3),
            fused_gate_up: matches!(arch, A::Phi3),
            qk_norm: matches!(arch, A::Qwen3),
            sandwich_norm: matches!(arch, A::Gemma2),
            parallel_residual: arch == A::GptNeox && raw.use_parallel_residual.unwrap_or(true),
            tied_embeddings,
            scaled_embeddings: matches!(arch, A::Gemma | A::Gemma2),
            positions,
            type_vocab_size,
            moe,
            attention_dropout,
            hidden_dropout,
            embedding_dropout,
            attn_softcap,
            final_softcap,
            head: if encoder { Head::MaskedLm } else { Head::CausalLm },
        };
        // Reject shapes whose parameter count overflows before anyone multiplies by a batch.
        spec.checked_parameter_count().ok_or(ConfigError::Overflow)?;
        Ok(spec)
    }

    /// Width of all query heads together.
    pub fn q_width(&self) -> u64 {
        self.n_heads * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_width(&self) -> u64 {
        self.n_kv_heads * self.head_dim
    }

    /// The trainable parameters of one layer, as `(weight matrices, small vectors)` element
    /// counts by tensor, in the order `transformers` registers them.
    pub(crate) fn layer_parameters(&self) -> Option<Vec<u64>> {
        let h = self.hidden_size;
        let i = self.intermediate_size;
        let q = self.q_width();
        let kv = self.kv_width();
        let mut p = Vec::with_capacity(24);
        let norm = |p: &mut Vec<u64>| {
            p.push(h);
            if self.norm == Norm::LayerNorm {
                p.push(h);
            }
        };
        // Pre-attention norm (BERT's norms sit after the sublayers, same count).
        norm(&mut p);
        if self.fused_qkv {
            p.push(h.checked_mul(q.checked_add(kv.checked_mul(2)?)?)?);
            if self.qkv_bias {
                p.push(q + 2 * kv);
            }
        } else {
            p.push(h.checked_mul(q)?);
            if self.qkv_bias {
                p.push(q);
            }
            p.push(h.checked_mul(kv)?);
            if self.qkv_bias {
                p.push(kv);
            }
            p.push(h.checked_mul(kv)?);
            if self.qkv_bias {
                p.push(kv);
            }
        }
        if self.qk_norm {
            p.push(self.head_dim);
            p.push(self.head_dim);
        }
        p.push(q.checked_mul(h)?);
        if self.o_bias {
            p.push(h);
        }
        norm(&mut p);
        if self.sandwich_norm {
            norm(&mut p);
            norm(&mut p);
        }
        let experts = self.moe.map_or(1, |m| m.experts);
        if let Some(m) = self.moe {
            p.push(h.checked_mul(m.experts)?);
        }
        for _ in 0..experts {
            if self.gated_mlp {
                if self.fused_gate_up {
                    p.push(h.checked_mul(i.checked_mul(2)?)?);
                } else {
                    p.push(h.checked_mul(i)?);
                    p.push(h.checked_mul(i)?);
                }
                if self.mlp_bias {
                    p.push(i);
                    p.push(i);
                }
            } else {
                p.push(h.checked_mul(i)?);
                if self.mlp_bias {
                    p.push(i);
                }
            }
            p.push(i.checked_mul(h)?);
            if self.mlp_bias {
                p.push(h);
            }
        }
        Some(p)
    }

    /// Parameters outside the layers, by tensor: embeddings, final norm, head.
    pub(crate) fn outer_parameters(&self) -> Option<Vec<u64>> {
        let h = self.hidden_size;
        let v = self.vocab_size;
        let mut p = vec![v.checked_mul(h)?];
        if let Positions::Learned { max_positions } = self.positions {
            p.push(max_positions.checked_mul(h)?);
        }
        if self.type_vocab_size > 0 {
            p.push(self.type_vocab_size.checked_mul(h)?);
        }
        let ln = self.norm == Norm::LayerNorm;
        match self.head {
            Head::CausalLm => {
                // Final norm.
                p.push(h);
                if ln {
                    p.push(h);
                }
            }
            Head::MaskedLm => {
                // Embedding LayerNorm; MLM transform dense + LayerNorm; decoder bias.
                p.extend([h, h]);
                p.push(h.checked_mul(h)?);
                p.extend([h, h, h]);
                p.push(v);
            }
        }
        if !self.tied_embeddings {
            p.push(v.checked_mul(h)?);
        }
        Some(p)
    }

    fn checked_parameter_count(&self) -> Option<u64> {
        let layer = self.layer_parameters()?.into_iter().try_fold(0u64, u64::checked_add)?;
        let outer = self.outer_parameters()?.into_iter().try_fold(0u64, u64::checked_add)?;
        layer.checked_mul(self.n_layers)?.checked_add(outer)
    }

    /// Trainable parameters (tied matrices counted once), as `sum(p.numel() for p in
    /// model.parameters())` reports.
    pub fn parameter_count(&self) -> u64 {
        // `resolve` has checked this does not overflow.
        self.checked_parameter_count().unwrap_or(u64::MAX)
    }
}
