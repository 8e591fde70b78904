//! [`ModelSpec`]: a transformer's shape with every default made explicit.
//!
//! A spec comes from a Hugging Face `config.json` in two steps: [`RawConfig::parse`] mirrors the
//! JSON (aliases folded, nothing decided), then [`ModelSpec::resolve`] — the one place that knows
//! each architecture's defaults and module layout as `transformers` builds it — checks the
//! values and fills in what the file leaves out.

use std::fmt;

use serde::Serialize;

use self::architecture::{
    BiasRule, CacheRule, ClassifierDropoutRule, DeepseekMoeRule, EmbeddingDropoutRule,
    ExpertWidthRule, HeadDimRule, LocalLayerRule, MlaRule, NormTopKRule, PositionRule, Seq2SeqRule,
    traits,
};
use crate::hf_config::RawConfig;

mod architecture;

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
    /// Gemma 3 text (`gemma3_text`: Gemma 2's norms, q/k norms, 5 local : 1 global layers).
    Gemma3Text,
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
    /// OLMo 2 (norms after the sublayers only, q/k norms over all heads).
    Olmo2,
    /// Qwen2-MoE / Qwen1.5-MoE (fine-grained experts and a gated shared expert).
    Qwen2Moe,
    /// Qwen 3 MoE (fine-grained experts, per-head q/k RMSNorm).
    Qwen3Moe,
    /// ModernBERT (pre-norm encoder, GeGLU, rotary, alternating global and sliding-window
    /// attention).
    ModernBert,
    /// DeepSeek-V2 (multi-head latent attention, dense first layers, shared experts, softmax
    /// routing).
    DeepseekV2,
    /// DeepSeek-V3 (V2's attention with interleaved rotary, sigmoid routing with a bias).
    DeepseekV3,
    /// T5 / T5 v1.1 / Flan-T5 (encoder-decoder: relative position bias, cross-attention,
    /// RMS norms without bias, ReLU or gated-GELU feed-forward).
    T5,
    /// mT5 (T5 v1.1's layers, a 250k vocabulary).
    Mt5,
}

impl Architecture {
    /// Every supported architecture.
    pub const ALL: [Architecture; 21] = [
        Architecture::Llama,
        Architecture::Mistral,
        Architecture::Mixtral,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Gemma,
        Architecture::Gemma2,
        Architecture::Gemma3Text,
        Architecture::Phi3,
        Architecture::Gpt2,
        Architecture::GptNeox,
        Architecture::Bert,
        Architecture::Roberta,
        Architecture::Olmo2,
        Architecture::Qwen2Moe,
        Architecture::Qwen3Moe,
        Architecture::ModernBert,
        Architecture::DeepseekV2,
        Architecture::DeepseekV3,
        Architecture::T5,
        Architecture::Mt5,
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
            Architecture::Gemma3Text => "gemma3_text",
            Architecture::Phi3 => "phi3",
            Architecture::Gpt2 => "gpt2",
            Architecture::GptNeox => "gpt_neox",
            Architecture::Bert => "bert",
            Architecture::Roberta => "roberta",
            Architecture::Olmo2 => "olmo2",
            Architecture::Qwen2Moe => "qwen2_moe",
            Architecture::Qwen3Moe => "qwen3_moe",
            Architecture::ModernBert => "modernbert",
            Architecture::DeepseekV2 => "deepseek_v2",
            Architecture::DeepseekV3 => "deepseek_v3",
            Architecture::T5 => "t5",
            Architecture::Mt5 => "mt5",
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
    /// OLMo 2's RMSNorm: fp32 throughout, `weight * normalised` in fp32, cast at the end.
    Olmo2RmsNorm,
    /// `T5LayerNorm`: the variance from an fp32 copy, `x * rsqrt(variance)` on the input as it
    /// is (promoted to fp32), cast to a 16-bit weight's dtype, `weight * h`.
    T5RmsNorm,
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
        /// The ids are a slice of a registered buffer expanded to the batch, so the lookup's
        /// output is `[B, S, H]` (BERT); otherwise an int64 `arange` `[1, S]` computed per
        /// forward and saved by the lookup, whose output broadcasts as `[1, S, H]` (GPT-2).
        ids_from_buffer: bool,
    },
    /// T5's relative position bias: the first layer of each stack looks up a
    /// `[buckets, heads]` table into a `[1, heads, q, k]` bias that every layer of the stack
    /// adds to its attention scores.
    Relative {
        /// `relative_attention_num_buckets`.
        buckets: u64,
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
    /// `*ForSequenceClassification`: one row of label scores per sequence.
    SequenceClassification(Pooling),
    /// `*ForTokenClassification`: dropout, then a linear to the labels at every token.
    TokenClassification,
    /// An encoder-decoder's language-model head over the decoder's `target_len` tokens
    /// (`T5ForConditionalGeneration`: tied to the shared embedding, `CrossEntropyLoss`).
    Seq2SeqLm,
}

/// How a sequence classifier reduces a sequence to one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// BERT: the base model's pooler (`dense` + `tanh` on the first token), dropout, then the
    /// classifier with a bias.
    Pooler,
    /// RoBERTa's `RobertaClassificationHead`: the first token, dropout, `dense` + `tanh`,
    /// dropout, `out_proj` with a bias.
    ClassificationHead,
    /// Decoders (`GenericForSequenceClassification`, GPT-2, GPT-NeoX): `score` (no bias) at
    /// every token, then the logits of the last token that is not padding.
    LastToken,
    /// ModernBERT with `classifier_pooling: "cls"`: the first token, the prediction head
    /// (dense, activation, LayerNorm), dropout, the classifier with a bias.
    FirstTokenHead,
    /// ModernBERT with `classifier_pooling: "mean"`: the mean over the sequence
    /// (`(h * mask).sum(1) / mask.sum(1)`, the mask all ones without padding), then as
    /// [`Pooling::FirstTokenHead`].
    MeanHead,
}

/// What the model is trained for: the `AutoModelFor*` class around the base model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// `AutoModelForCausalLM` (decoders' default).
    CausalLm,
    /// `AutoModelForMaskedLM` (encoders' default).
    MaskedLm,
    /// `AutoModelForSequenceClassification`.
    SeqCls,
    /// `AutoModelForTokenClassification`.
    TokenCls,
    /// `AutoModelForSeq2SeqLM` (encoder-decoders' default and only task here).
    Seq2Seq,
}

impl Task {
    /// Every task, in the order the CLI lists them.
    pub const ALL: [Task; 5] =
        [Task::CausalLm, Task::MaskedLm, Task::SeqCls, Task::TokenCls, Task::Seq2Seq];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Task::CausalLm => "causal-lm",
            Task::MaskedLm => "masked-lm",
            Task::SeqCls => "seq-cls",
            Task::TokenCls => "token-cls",
            Task::Seq2Seq => "seq2seq",
        }
    }

    /// The `transformers` auto class that builds the model for this task.
    pub fn auto_class(self) -> &'static str {
        match self {
            Task::CausalLm => "AutoModelForCausalLM",
            Task::MaskedLm => "AutoModelForMaskedLM",
            Task::SeqCls => "AutoModelForSequenceClassification",
            Task::TokenCls => "AutoModelForTokenClassification",
            Task::Seq2Seq => "AutoModelForSeq2SeqLM",
        }
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Task {
    type Err = TaskError;

    fn from_str(s: &str) -> Result<Task, TaskError> {
        let lower = s.trim().to_ascii_lowercase();
        Task::ALL.into_iter().find(|t| t.name() == lower).ok_or_else(|| TaskError::Unknown {
            given: s.to_string(),
            expected: Task::ALL.map(Task::name).join(", "),
        })
    }
}

/// A task the model cannot be trained for, or a bad label count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// Not a task name.
    #[error("unknown task '{given}' (expected one of: {expected})")]
    Unknown {
        /// What was given.
        given: String,
        /// The task names.
        expected: String,
    },
    /// `transformers` has the head, vramfit does not model it yet.
    #[error("{architecture}'s {task} head is not modelled yet (it does: {supported})")]
    NotModelled {
        /// The architecture.
        architecture: Architecture,
        /// The task asked for.
        task: Task,
        /// The tasks it does, comma separated.
        supported: String,
    },
    /// `transformers` has no such head for the architecture.
    #[error("{architecture} has no {task} head in transformers (it does: {supported})")]
    Unsupported {
        /// The architecture.
        architecture: Architecture,
        /// The task asked for.
        task: Task,
        /// The tasks it does, comma separated.
        supported: String,
    },
    /// `classifier_dropout` outside `[0, 1)`.
    #[error("classifier_dropout = {given} is out of range (0..1)")]
    Dropout {
        /// The value found.
        given: String,
    },
    /// A classifier with no labels.
    #[error("num_labels = {given} is out of range (1..={max})")]
    Labels {
        /// The value given.
        given: u64,
        /// The largest accepted.
        max: u64,
    },
}

/// A classification head's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Classifier {
    /// Labels (`num_labels`): the classifier's output width.
    pub labels: u64,
    /// The dropout before the classifier (and, for RoBERTa's head, before its dense).
    pub dropout: f64,
    /// The classifier's linear has a bias.
    pub bias: bool,
}

/// A sparse mixture of experts, as transformers 5 runs it: a router (`[experts, hidden]`,
/// softmax in fp32, top-k), the experts as two 3-D parameters run by the `grouped_mm`
/// experts implementation, and optionally a shared expert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Moe {
    /// Experts per layer.
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// One expert's MLP width (Mixtral: `intermediate_size`; Qwen-MoE:
    /// `moe_intermediate_size`).
    pub expert_intermediate_size: u64,
    /// The top-k routing weights are renormalised to sum to 1 (Mixtral always; Qwen-MoE's
    /// `norm_topk_prob`).
    pub norm_topk_prob: bool,
    /// The routing weights are cast back to the router logits' dtype (Qwen-MoE: 16-bit under
    /// autocast) rather than kept in fp32 (Mixtral).
    pub weights_in_logits_dtype: bool,
    /// The width of a shared expert every token goes through, scaled by
    /// `sigmoid(shared_expert_gate(x))` (Qwen2-MoE); `None` without one.
    pub shared_expert_intermediate_size: Option<u64>,
    /// The router.
    pub router: Router,
}

/// How a mixture of experts routes its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Router {
    /// An `[experts, hidden]` linear, softmax in fp32, top-k (Mixtral, Qwen-MoE).
    Softmax,
    /// DeepSeek-V2's `DeepseekV2TopkRouter`: an fp32 weight and fp32 logits, softmax, top-k
    /// (greedy, or group-limited: the best `topk_group` of `groups` groups by their maximum),
    /// times `routed_scaling_factor`; the shared experts are ungated.
    DeepseekSoftmax {
        /// `(n_group, topk_group)` when `topk_method` is `group_limited_greedy`.
        groups: Option<(u64, u64)>,
    },
    /// DeepSeek-V3's `DeepseekV3TopkRouter`: an fp32 weight, sigmoid scores plus the fp32
    /// `e_score_correction_bias` buffer, the best `topk_group` of `groups` groups (by the sum
    /// of their top 2), top-k, gathered, renormalised, times `routed_scaling_factor`.
    DeepseekSigmoid {
        /// `n_group`.
        groups: u64,
        /// `topk_group`.
        topk_group: u64,
    },
}

/// Multi-head latent attention (DeepSeek-V2/V3): q through `q_proj`, or the low-rank
/// `q_a_proj` → `q_a_layernorm` → `q_b_proj`; keys and values from a compressed latent
/// (`kv_a_proj_with_mqa` → `kv_lora_rank` + a shared rotary key of `qk_rope_head_dim`,
/// `kv_a_layernorm`, `kv_b_proj` to every head's no-rotary key and value). A query/key head
/// is `qk_nope_head_dim + qk_rope_head_dim` wide (the spec's `head_dim`), a value head
/// `v_head_dim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Mla {
    /// `q_lora_rank` (`None`: one `q_proj`).
    pub q_lora_rank: Option<u64>,
    /// `kv_lora_rank`.
    pub kv_lora_rank: u64,
    /// `qk_nope_head_dim`.
    pub qk_nope_head_dim: u64,
    /// `qk_rope_head_dim`.
    pub qk_rope_head_dim: u64,
    /// `v_head_dim`.
    pub v_head_dim: u64,
    /// V3's interleaved rotary (real arithmetic on even/odd halves) rather than V2's
    /// complex-number rotary (`view_as_complex` of an fp32 copy).
    pub rope_interleave: bool,
}

/// Local attention layers (Gemma 3's `sliding_attention` layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct SlidingWindow {
    /// Tokens each query sees (`sliding_window`).
    pub window: u64,
    /// Layers with local attention.
    pub local_layers: u64,
    /// Layers with global attention.
    pub global_layers: u64,
}

/// A transformer's shape with every default explicit. Build it with
/// [`ModelSpec::from_hf_config`] (or [`ModelSpec::resolve`]); it cannot be built otherwise,
/// so every spec has been checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
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
    /// RMSNorm on q and k (Qwen 3: per head; OLMo 2: over all heads).
    pub qk_norm: bool,
    /// The q and k norms span all heads (`q_width`, `kv_width`) rather than one head.
    pub qk_norm_full_width: bool,
    /// Norms before attention and before the MLP (false for OLMo 2, whose layers normalise
    /// only the sublayers' outputs).
    pub input_norms: bool,
    /// Norms after attention and MLP as well as before (Gemma 2).
    pub sandwich_norm: bool,
    /// Norms after each residual addition instead of before the sublayers (BERT).
    pub post_norm: bool,
    /// A norm on the embedding output (BERT).
    pub embedding_norm: bool,
    /// A norm after the last layer (decoders).
    pub final_norm: bool,
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
    /// The base model registers int64 `position_ids` and `token_type_ids` buffers of
    /// `max_position_embeddings` entries (BERT).
    pub id_buffers: bool,
    /// Mixture of experts, if any.
    pub moe: Option<Moe>,
    /// The layers of a mixture-of-experts model that have the dense MLP
    /// (`intermediate_size` wide) instead of the sparse block, ascending: Qwen-MoE's
    /// `mlp_only_layers` and the layers `decoder_sparse_step` skips. Empty otherwise.
    pub dense_mlp_layers: Vec<u64>,
    /// Dropout on attention probabilities.
    pub attention_dropout: f64,
    /// Dropout on residual branches (and hidden states).
    pub hidden_dropout: f64,
    /// Dropout on the embedding output.
    pub embedding_dropout: f64,
    /// Rotary `cos`/`sin` tables the base model computes once per forward: one per kind of
    /// layer present (Gemma 3's local and global layers have their own rope bases), 1
    /// otherwise.
    pub rotary_tables: u64,
    /// The sliding window of the local layers and how many layers are local (Gemma 3);
    /// `None` when every layer attends to the whole sequence.
    pub sliding_window: Option<SlidingWindow>,
    /// `tanh` softcapping of attention scores (Gemma 2).
    pub attn_softcap: Option<f64>,
    /// `tanh` softcapping of the final logits (Gemma 2).
    pub final_softcap: Option<f64>,
    /// The output head.
    pub head: Head,
    /// The classification head's sizes (`None` for a language-model head).
    pub classifier: Option<Classifier>,
    /// `classifier_dropout` as `config.json` gives it (read when a classification head is
    /// put on the model by [`ModelSpec::for_task`]).
    #[serde(skip)]
    pub(crate) classifier_dropout_config: Option<f64>,
    /// `classifier_pooling: "mean"` (ModernBERT's sequence classifier averages the sequence
    /// instead of taking its first token).
    #[serde(skip)]
    pub(crate) classifier_mean_pooling: bool,
    /// The classifiers run the prediction head (the masked-LM head's dense, activation and
    /// norm) before their output layer (ModernBERT).
    #[serde(skip)]
    pub classifier_prediction_head: bool,
    /// The loss casts the logits to fp32 first (`ForCausalLMLoss`'s `logits.float()`); else
    /// `CrossEntropyLoss` takes them as they are (autocast still runs it in fp32).
    pub loss_upcasts_logits: bool,
    /// Eager attention calls `softmax(dtype=float32)` and casts back (Llama family), rather
    /// than plain `softmax` (GPT-2, BERT).
    pub eager_softmax_fp32: bool,
    /// `[B, 1, S, S]` masks the base model builds for eager attention and passes to every
    /// layer (Gemma 2: a full and a sliding-window one; encoders without padding: none).
    pub eager_masks: u64,
    /// The LayerNorms have a bias (false for ModernBERT's).
    pub norm_bias: bool,
    /// The first layer normalises its attention input (ModernBERT's does not).
    pub first_layer_input_norm: bool,
    /// The masked-LM head's dense has a bias.
    pub mlm_dense_bias: bool,
    /// The masked-LM decoder has a bias.
    pub mlm_decoder_bias: bool,
    /// The layers that attend within a sliding window (ModernBERT's local layers), ascending;
    /// empty when every layer attends globally.
    pub sliding_layers: Vec<u64>,
    /// The rotary embedding computes in fp32 and casts q and k back (ModernBERT).
    pub rotary_upcast: bool,
    /// Whether the model builds a KV cache (`DynamicCache`) when it runs in training: a
    /// decoder's `config.use_cache` (true by default in every `transformers` decoder config
    /// here), or `None` for an encoder, which never builds one. Gradient checkpointing turns
    /// it off.
    pub use_cache: Option<bool>,
    /// Multi-head latent attention (DeepSeek), if the model has it.
    pub mla: Option<Mla>,
    /// The checkpoint is stored in fp8 (`quantization_config.quant_method` `fp8`): the
    /// estimate takes its weights dequantised, in the training precision.
    pub fp8_checkpoint: bool,
    /// Of `n_layers`, the last this many are an encoder-decoder's decoder layers (self-,
    /// cross-attention and feed-forward; T5); 0 for a decoder-only or encoder-only model,
    /// whose `n_layers` are all alike.
    pub decoder_layers: u64,
    /// The decoder's output is multiplied by `d_model ** -0.5` before the tied LM head (T5
    /// unless `tie_word_embeddings` is written false; never mT5).
    pub scale_decoder_outputs: bool,
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
    /// A value that contradicts the model's other sizes.
    #[error("field '{field}' = {value} {why}")]
    Inconsistent {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What it contradicts.
        why: &'static str,
    },
}

pub(crate) const MAX_VOCAB: u64 = 1 << 24;
pub(crate) const MAX_HIDDEN: u64 = 1 << 18;
pub(crate) const MAX_LAYERS: u64 = 4096;
pub(crate) const MAX_HEADS: u64 = 4096;
pub(crate) const MAX_INTERMEDIATE: u64 = 1 << 21;
pub(crate) const MAX_POSITIONS: u64 = 1 << 24;
const MAX_EXPERTS: u64 = 4096;
/// The most labels a classifier may have (beyond any vocabulary).
pub const MAX_LABELS: u64 = 1 << 24;

fn required(value: Option<u64>, field: &'static str) -> Result<u64, ConfigError> {
    value.ok_or(ConfigError::Missing { field })
}

/// Gemma 3's layer kinds: `layer_types` (its first `n_layers` entries are the layers that
/// run; the rotary tables are computed for every kind the list names), else every
/// `sliding_window_pattern`-th layer global and the others local. Returns the rotary tables
/// and the sliding window.
fn local_layers(
    raw: &RawConfig,
    rule: LocalLayerRule,
    n_layers: u64,
) -> Result<(u64, Option<SlidingWindow>), ConfigError> {
    let window =
        in_range(raw.sliding_window.unwrap_or(rule.window), "sliding_window", 1, MAX_POSITIONS)?;
    let (local_layers, kinds) = match &raw.layer_types {
        Some(types) => {
            let wrong = ConfigError::WrongType {
                field: "layer_types",
                expected: "a list of 'sliding_attention' or 'full_attention', one per layer",
            };
            if (types.len() as u64) < n_layers {
                return Err(wrong);
            }
            let mut local = 0;
            let (mut any_local, mut any_global) = (false, false);
            for (i, t) in types.iter().enumerate() {
                let is_local = match t.as_str() {
                    "sliding_attention" => true,
                    "full_attention" => false,
                    _ => return Err(wrong),
                };
                any_local |= is_local;
                any_global |= !is_local;
                if (i as u64) < n_layers && is_local {
                    local += 1;
                }
            }
            (local, u64::from(any_local) + u64::from(any_global))
        }
        None => {
            let pattern = in_range(
                raw.sliding_window_pattern.unwrap_or(rule.pattern),
                "sliding_window_pattern",
                1,
                MAX_LAYERS,
            )?;
            let global = n_layers / pattern;
            let local = n_layers - global;
            (local, u64::from(local > 0) + u64::from(global > 0))
        }
    };
    let sliding = (local_layers > 0).then_some(SlidingWindow {
        window,
        local_layers,
        global_layers: n_layers - local_layers,
    });
    Ok((kinds, sliding))
}

/// Multi-head latent attention's sizes: each within range, the rotary part an even width
/// (its pairs rotate together), keys and values at the query head count.
fn mla(raw: &RawConfig, rule: MlaRule, n_heads: u64, n_kv_heads: u64) -> Result<Mla, ConfigError> {
    let size =
        |v: Option<u64>, default: u64, field| in_range(v.unwrap_or(default), field, 1, MAX_HIDDEN);
    // `q_lora_rank: null` is a plain `q_proj`; an absent key takes the class default.
    let q_lora_rank = match (raw.q_lora_rank, rule.q_lora_rank) {
        (Some(r), _) => Some(in_range(r, "q_lora_rank", 1, MAX_HIDDEN)?),
        (None, _) if raw.q_lora_rank_null => None,
        (None, default) => default,
    };
    let qk_rope_head_dim = size(raw.qk_rope_head_dim, rule.qk_rope_head_dim, "qk_rope_head_dim")?;
    if !qk_rope_head_dim.is_multiple_of(2) {
        return Err(ConfigError::Inconsistent {
            field: "qk_rope_head_dim",
            value: qk_rope_head_dim,
            why: "must be even (rotary dimensions rotate in pairs)",
        });
    }
    if n_kv_heads != n_heads {
        return Err(ConfigError::Inconsistent {
            field: "num_key_value_heads",
            value: n_kv_heads,
            why: "must equal num_attention_heads (latent attention expands keys and values to every head)",
        });
    }
    Ok(Mla {
        q_lora_rank,
        kv_lora_rank: size(raw.kv_lora_rank, rule.kv_lora_rank, "kv_lora_rank")?,
        qk_nope_head_dim: size(raw.qk_nope_head_dim, rule.qk_nope_head_dim, "qk_nope_head_dim")?,
        qk_rope_head_dim,
        v_head_dim: size(raw.v_head_dim, rule.v_head_dim, "v_head_dim")?,
        rope_interleave: rule.rope_interleave.is_some_and(|d| raw.rope_interleave.unwrap_or(d)),
    })
}

/// DeepSeek's router, shared-expert width and dense layer count.
fn deepseek_moe(
    raw: &RawConfig,
    rule: DeepseekMoeRule,
    experts: u64,
    top_k: u64,
    width: u64,
) -> Result<(Router, Option<u64>, u64), ConfigError> {
    let shared = in_range(
        raw.n_shared_experts.unwrap_or(rule.shared_experts),
        "n_shared_experts",
        0,
        MAX_EXPERTS,
    )?;
    let first_k = in_range(
        raw.first_k_dense_replace.unwrap_or(rule.first_k_dense),
        "first_k_dense_replace",
        0,
        MAX_LAYERS,
    )?;
    let groups = |default: Option<u64>| -> Result<(u64, u64), ConfigError> {
        let n_group = in_range(raw.n_group.or(default).unwrap_or(1), "n_group", 1, experts)?;
        if !experts.is_multiple_of(n_group) {
            return Err(ConfigError::NotDivisible {
                field: "n_group",
                value: n_group,
                other: "n_routed_experts",
                other_value: experts,
            });
        }
        let topk_group = in_range(raw.topk_group.unwrap_or(n_group), "topk_group", 1, n_group)?;
        if topk_group * (experts / n_group) < top_k {
            return Err(ConfigError::Inconsistent {
                field: "num_experts_per_tok",
                value: top_k,
                why: "exceeds the experts of the topk_group groups a token may use",
            });
        }
        Ok((n_group, topk_group))
    };
    let router = if rule.sigmoid {
        let (groups, topk_group) = groups(rule.n_group)?;
        Router::DeepseekSigmoid { groups, topk_group }
    } else {
        match raw.topk_method.as_deref().unwrap_or("greedy") {
            "greedy" => Router::DeepseekSoftmax { groups: None },
            "group_limited_greedy" => {
                Router::DeepseekSoftmax { groups: Some(groups(rule.n_group)?) }
            }
            _ => {
                return Err(ConfigError::WrongType {
                    field: "topk_method",
                    expected: "'greedy' or 'group_limited_greedy'",
                });
            }
        }
    };
    // (`n_shared_experts: 0` still builds the shared MLP, zero wide: with `mlp_bias` its
    // down projection keeps a bias.)
    Ok((router, Some(width.saturating_mul(shared)), first_k))
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

/// T5's `feed_forward_proj`: `(gated, activation)`. transformers splits it on `-`: `gated-ACT`
/// is `T5DenseGatedActDense`, `ACT` `T5DenseActDense`; `gated-gelu` runs `gelu_new`.
fn feed_forward(raw: &RawConfig, rule: Seq2SeqRule) -> Result<(bool, Activation), ConfigError> {
    let proj = raw.feed_forward_proj.as_deref().unwrap_or(rule.feed_forward);
    let field = "feed_forward_proj";
    let (gated, act) = match proj.split_once('-') {
        Some(("gated", act)) => (true, act),
        None => (false, proj),
        Some(_) => {
            return Err(ConfigError::UnknownActivation { field, given: proj.to_string() });
        }
    };
    let act = if proj == "gated-gelu" { "gelu_new" } else { act };
    Ok((gated, activation(act, field)?))
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
    /// experts top-2, Qwen2-MoE 60 experts top-4 of width 1408 with a 5632-wide shared
    /// expert, Qwen3-MoE 128 experts top-8 of width 768 (both: `norm_topk_prob` false, every
    /// layer sparse: `decoder_sparse_step` 1, no `mlp_only_layers`; Qwen2-MoE: `qkv_bias`
    /// true), Gemma 2 softcaps 50 / 30 (Gemma 3: none
    /// unless configured; `sliding_window` 4096, `sliding_window_pattern` 6), BERT `type_vocab_size` 2, `use_cache` true (decoders;
    /// BERT and RoBERTa, encoders, never build a cache).
    pub fn resolve(raw: &RawConfig) -> Result<ModelSpec, ConfigError> {
        let model_type =
            raw.model_type.as_deref().ok_or(ConfigError::Missing { field: "model_type" })?;
        let arch = Architecture::from_model_type(model_type).ok_or_else(|| {
            ConfigError::UnknownArchitecture {
                given: model_type.to_string(),
                supported: Architecture::supported_list(),
            }
        })?;
        let t = traits(arch);

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
        let intermediate_size = match raw.intermediate_size {
            None if t.intermediate_defaults_to_4x => {
                hidden_size.checked_mul(4).ok_or(ConfigError::Overflow)?
            }
            v => required(v, "intermediate_size")?,
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
        let width_head_dim = || {
            if hidden_size % n_heads != 0 {
                return Err(ConfigError::NotDivisible {
                    field: "num_attention_heads",
                    value: n_heads,
                    other: "hidden_size",
                    other_value: hidden_size,
                });
            }
            Ok(hidden_size / n_heads)
        };
        let head_dim = match (t.head_dim, raw.head_dim) {
            (HeadDimRule::ConfigOrWidth | HeadDimRule::ConfigOr(_), Some(d)) => {
                in_range(d, "head_dim", 1, MAX_HIDDEN)?
            }
            (HeadDimRule::ConfigOr(default), None) => default,
            (HeadDimRule::Width, _) | (HeadDimRule::ConfigOrWidth, None) => width_head_dim()?,
        };

        let configured_activation = match t.activation_key {
            "hidden_activation" => &raw.hidden_activation,
            _ => &raw.hidden_act,
        };
        let (act_field, act_name) = match configured_activation {
            Some(a) => (t.activation_key, a.as_str()),
            None => t.activation,
        };
        let activation = activation(act_name, act_field)?;
        // T5's `feed_forward_proj`: `ACT` or `gated-ACT` (`gated-gelu` runs `gelu_new`).
        let (gated_mlp, activation) = match t.encoder_decoder {
            Some(rule) => feed_forward(raw, rule)?,
            None => (t.gated_mlp, activation),
        };
        // An encoder-decoder's `n_layers` are its encoder's then its decoder's.
        let decoder_layers = match t.encoder_decoder {
            Some(_) => in_range(
                raw.num_decoder_layers.unwrap_or(n_layers),
                "num_decoder_layers",
                1,
                MAX_LAYERS,
            )?,
            None => 0,
        };
        let n_layers = n_layers + decoder_layers;

        let bias = |rule: BiasRule, configured: Option<bool>| match rule {
            BiasRule::Always(b) => b,
            BiasRule::Config(default) => configured.unwrap_or(default),
            BiasRule::QkvBiasFlag(default) => raw.qkv_bias.unwrap_or(default),
        };
        let qkv_bias = bias(t.qkv_bias, raw.attention_bias);
        let o_bias = bias(t.o_bias, raw.attention_bias);
        let mlp_bias = bias(t.mlp_bias, raw.mlp_bias);
        // transformers 5 ties T5's LM head whatever the config says; `tie_word_embeddings:
        // false` (T5 v1.1, Flan-T5) only turns T5's output scaling off.
        let tied_embeddings = match t.encoder_decoder {
            Some(_) => true,
            None => raw.tie_word_embeddings.unwrap_or(t.tied_default),
        };
        let scale_decoder_outputs = t
            .encoder_decoder
            .is_some_and(|rule| rule.scale_unless_untied && raw.tie_word_embeddings != Some(false));

        let max_positions = raw
            .max_position_embeddings
            .map(|p| in_range(p, "max_position_embeddings", 1, MAX_POSITIONS))
            .transpose()?;
        let positions = match t.positions {
            PositionRule::Learned { default_max, ids_from_buffer } => Positions::Learned {
                max_positions: max_positions.unwrap_or(default_max),
                ids_from_buffer,
            },
            PositionRule::PartialRotary { default_pct } => {
                let pct = raw.rotary_pct.unwrap_or(default_pct);
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
            PositionRule::Rotary => Positions::Rotary { dims: head_dim },
            PositionRule::Relative { default_buckets } => Positions::Relative {
                buckets: in_range(
                    raw.relative_attention_num_buckets.unwrap_or(default_buckets),
                    "relative_attention_num_buckets",
                    1,
                    MAX_POSITIONS,
                )?,
            },
        };

        let mla = t.mla.map(|rule| mla(raw, rule, n_heads, n_kv_heads)).transpose()?;
        // MLA: a query/key head is `qk_nope_head_dim + qk_rope_head_dim` wide (the config's
        // `head_dim` is the rotary part), rotary on the last `qk_rope_head_dim` of it.
        let (head_dim, positions) = match mla {
            Some(m) => (
                m.qk_nope_head_dim + m.qk_rope_head_dim,
                Positions::Rotary { dims: m.qk_rope_head_dim },
            ),
            None => (head_dim, positions),
        };

        let (moe, dense_mlp_layers) = match t.moe {
            Some(rule) => {
                let experts = in_range(
                    raw.num_local_experts.unwrap_or(rule.experts),
                    "num_local_experts",
                    1,
                    MAX_EXPERTS,
                )?;
                let top_k = in_range(
                    raw.num_experts_per_tok.unwrap_or(rule.top_k),
                    "num_experts_per_tok",
                    1,
                    experts,
                )?;
                let expert_intermediate_size = match rule.width {
                    ExpertWidthRule::Intermediate => intermediate_size,
                    ExpertWidthRule::MoeIntermediate(default) => in_range(
                        raw.moe_intermediate_size.unwrap_or(default),
                        "moe_intermediate_size",
                        1,
                        MAX_INTERMEDIATE,
                    )?,
                };
                let norm_topk_prob = match rule.norm_topk_prob {
                    NormTopKRule::Always => true,
                    NormTopKRule::Config(default) => raw.norm_topk_prob.unwrap_or(default),
                };
                let deepseek = match rule.deepseek {
                    Some(d) => {
                        Some(deepseek_moe(raw, d, experts, top_k, expert_intermediate_size)?)
                    }
                    None => None,
                };
                let shared_expert_intermediate_size = rule
                    .shared_expert
                    .map(|default| {
                        in_range(
                            raw.shared_expert_intermediate_size.unwrap_or(default),
                            "shared_expert_intermediate_size",
                            1,
                            MAX_INTERMEDIATE,
                        )
                    })
                    .transpose()?;
                // transformers' decoder layer: sparse when `layer not in mlp_only_layers and
                // (layer + 1) % decoder_sparse_step == 0`.
                let dense = if let Some((_, _, first_k)) = deepseek {
                    (0..first_k.min(n_layers)).collect()
                } else if rule.sparse_layers_configured {
                    let step = in_range(
                        raw.decoder_sparse_step.unwrap_or(1),
                        "decoder_sparse_step",
                        1,
                        MAX_LAYERS,
                    )?;
                    let only = raw.mlp_only_layers.as_deref().unwrap_or_default();
                    (0..n_layers).filter(|l| only.contains(l) || (l + 1) % step != 0).collect()
                } else {
                    Vec::new()
                };
                let moe = Moe {
                    experts,
                    top_k,
                    expert_intermediate_size,
                    norm_topk_prob,
                    weights_in_logits_dtype: rule.weights_in_logits_dtype,
                    shared_expert_intermediate_size: match deepseek {
                        Some((_, shared, _)) => shared,
                        None => shared_expert_intermediate_size,
                    },
                    router: deepseek.map_or(Router::Softmax, |(router, _, _)| router),
                };
                (Some(moe), dense)
            }
            None => (None, Vec::new()),
        };

        let attention_dropout =
            probability(raw.attention_dropout, "attention_dropout", t.dropout_default)?;
        let hidden_dropout = probability(raw.hidden_dropout, "hidden_dropout", t.dropout_default)?;
        let embedding_dropout = match t.embedding_dropout {
            EmbeddingDropoutRule::Own => {
                probability(raw.embedding_dropout, "embd_pdrop", t.dropout_default)?
            }
            EmbeddingDropoutRule::Hidden => hidden_dropout,
            EmbeddingDropoutRule::Off => 0.0,
        };
        let (attn_softcap, final_softcap) = match t.softcaps {
            Some((attention, logits)) => {
                (raw.attn_logit_softcapping.or(attention), raw.final_logit_softcapping.or(logits))
            }
            None => (None, None),
        };
        let (rotary_tables, sliding_window) = match t.local_layers {
            Some(rule) => local_layers(raw, rule, n_layers)?,
            None => (1, None),
        };
        // ModernBERT's `layer_types`: layer `l` is global when `l % n == 0`.
        let sliding_layers = match t.global_every {
            Some(default) => {
                let every = in_range(
                    raw.global_attn_every_n_layers.unwrap_or(default),
                    "global_attn_every_n_layers",
                    1,
                    MAX_LAYERS,
                )?;
                (0..n_layers).filter(|l| l % every != 0).collect()
            }
            None => Vec::new(),
        };
        // ModernBERT's base model always builds the sliding-window mask (even when no layer
        // uses it); the global one is `None` without padding.
        let eager_masks = t.eager_masks + u64::from(t.global_every.is_some());
        // ModernBERT: one `cos`/`sin` table per attention type present (global and sliding
        // layers use different bases).
        let rotary_tables = match t.global_every {
            Some(_) => {
                let sliding = sliding_layers.len() as u64;
                if sliding > 0 && sliding < n_layers { 2 } else { 1 }
            }
            None => rotary_tables,
        };
        let type_vocab_size = if t.token_types {
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
            gated_mlp,
            activation,
            norm: t.norm,
            qkv_bias,
            o_bias,
            mlp_bias,
            fused_qkv: t.fused_qkv,
            fused_gate_up: t.fused_gate_up,
            qk_norm: t.qk_norm,
            qk_norm_full_width: t.qk_norm_full_width,
            input_norms: t.input_norms,
            sandwich_norm: t.sandwich_norm,
            post_norm: t.post_norm,
            embedding_norm: t.embedding_norm,
            final_norm: t.final_norm,
            parallel_residual: t.parallel_residual && raw.use_parallel_residual.unwrap_or(true),
            tied_embeddings,
            scaled_embeddings: t.scaled_embeddings,
            positions,
            type_vocab_size,
            id_buffers: t.id_buffers,
            moe,
            dense_mlp_layers,
            attention_dropout,
            hidden_dropout,
            embedding_dropout,
            rotary_tables,
            sliding_window,
            attn_softcap,
            final_softcap,
            head: match t.tasks.default {
                Task::MaskedLm => Head::MaskedLm,
                Task::Seq2Seq => Head::Seq2SeqLm,
                _ => Head::CausalLm,
            },
            classifier: None,
            classifier_dropout_config: raw.classifier_dropout,
            classifier_mean_pooling: match raw.classifier_pooling.as_deref() {
                None | Some("cls") => false,
                Some("mean") => true,
                Some(_) => {
                    return Err(ConfigError::WrongType {
                        field: "classifier_pooling",
                        expected: "\"cls\" or \"mean\"",
                    });
                }
            },
            classifier_prediction_head: t.tasks.prediction_head,
            loss_upcasts_logits: t.loss_upcasts_logits,
            eager_softmax_fp32: t.eager_softmax_fp32,
            eager_masks,
            norm_bias: bias(t.norm_bias, raw.norm_bias),
            first_layer_input_norm: t.first_layer_input_norm,
            mlm_dense_bias: bias(t.mlm_dense_bias, raw.classifier_bias),
            mlm_decoder_bias: bias(t.mlm_decoder_bias, raw.decoder_bias),
            sliding_layers,
            rotary_upcast: t.rotary_upcast,
            use_cache: match t.cache {
                CacheRule::Config(default) => Some(raw.use_cache.unwrap_or(default)),
                CacheRule::Never => None,
            },
            mla,
            fp8_checkpoint: raw.quant_method.as_deref() == Some("fp8"),
            decoder_layers,
            scale_decoder_outputs,
        };
        // Reject shapes whose parameter count overflows before anyone multiplies by a batch.
        spec.checked_parameter_count().ok_or(ConfigError::Overflow)?;
        Ok(spec)
    }

    /// An encoder-decoder (T5): `decoder_layers` of its `n_layers` are the decoder's.
    pub fn is_encoder_decoder(&self) -> bool {
        self.decoder_layers > 0
    }

    /// The encoder's layers (all of `n_layers` for a model without a decoder stack).
    pub fn encoder_layers(&self) -> u64 {
        self.n_layers - self.decoder_layers
    }

    /// Width of all query heads together.
    pub fn q_width(&self) -> u64 {
        self.n_heads * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_width(&self) -> u64 {
        self.n_kv_heads * self.head_dim
    }

    fn checked_parameter_count(&self) -> Option<u64> {
        self.parameter_layout().parameter_count()
    }

    /// Trainable parameters (tied matrices counted once), as `sum(p.numel() for p in
    /// model.parameters())` reports.
    pub fn parameter_count(&self) -> u64 {
        self.checked_parameter_count().expect("resolve rejects specs whose count overflows")
    }

    /// The task the architecture's default head does (`causal-lm` for decoders, `masked-lm`
    /// for encoders).
    pub fn default_task(&self) -> Task {
        traits(self.architecture).tasks.default
    }

    /// The tasks `transformers` has a head for on this architecture.
    pub fn tasks(&self) -> Vec<Task> {
        let rules = traits(self.architecture).tasks;
        Task::ALL
            .into_iter()
            .filter(|&t| match t {
                Task::CausalLm => rules.causal_lm,
                Task::MaskedLm => rules.masked_lm,
                Task::SeqCls => rules.classifiers,
                Task::TokenCls => rules.classifiers && rules.token_cls,
                Task::Seq2Seq => rules.seq2seq,
            })
            .collect()
    }

    /// Pairs of rotary `inv_freq` buffers the model registers: one per attention type with
    /// its own base module (ModernBERT's global and sliding layers), else one.
    pub fn rotary_inv_freq_pairs(&self) -> u64 {
        let sliding = self.sliding_layers.len() as u64;
        if sliding > 0 && sliding < self.n_layers { 2 } else { 1 }
    }

    /// The model with the head of `task` (`num_labels` labels for a classifier, ignored by
    /// the language-model heads), as the task's `AutoModelFor*` class builds it. The default
    /// task gives the spec back unchanged.
    pub fn for_task(&self, task: Task, num_labels: u64) -> Result<ModelSpec, TaskError> {
        let rules = traits(self.architecture).tasks;
        if matches!(task, Task::SeqCls | Task::TokenCls) && !rules.classifiers {
            return Err(TaskError::NotModelled {
                architecture: self.architecture,
                task,
                supported: self.tasks().into_iter().map(Task::name).collect::<Vec<_>>().join(", "),
            });
        }
        if !self.tasks().contains(&task) {
            return Err(TaskError::Unsupported {
                architecture: self.architecture,
                task,
                supported: self.tasks().into_iter().map(Task::name).collect::<Vec<_>>().join(", "),
            });
        }
        if task == rules.default {
            return Ok(self.clone());
        }
        if !(1..=MAX_LABELS).contains(&num_labels) {
            return Err(TaskError::Labels { given: num_labels, max: MAX_LABELS });
        }
        let configured = self.classifier_dropout_config;
        let dropout = |rule: ClassifierDropoutRule| match rule {
            ClassifierDropoutRule::ConfigOrHidden => configured.unwrap_or(self.hidden_dropout),
            ClassifierDropoutRule::ConfigOr(p) => configured.unwrap_or(p),
        };
        let (head, classifier, upcasts) = match task {
            Task::SeqCls => {
                let pooling = match rules.seq_cls {
                    Pooling::FirstTokenHead if self.classifier_mean_pooling => Pooling::MeanHead,
                    other => other,
                };
                let (p, bias) = match pooling {
                    Pooling::Pooler | Pooling::ClassificationHead => {
                        (dropout(ClassifierDropoutRule::ConfigOrHidden), true)
                    }
                    Pooling::LastToken => (0.0, false),
                    // `classifier_dropout`, 0.0 by default.
                    Pooling::FirstTokenHead | Pooling::MeanHead => {
                        (dropout(ClassifierDropoutRule::ConfigOr(0.0)), true)
                    }
                };
                (Head::SequenceClassification(pooling), (p, bias), false)
            }
            Task::TokenCls => (
                Head::TokenClassification,
                (dropout(rules.token_cls_dropout), true),
                rules.token_cls_upcasts,
            ),
            Task::CausalLm | Task::MaskedLm | Task::Seq2Seq => {
                unreachable!("an architecture's one language-model task is its default")
            }
        };
        let (dropout, bias) = classifier;
        if !(0.0..1.0).contains(&dropout) {
            return Err(TaskError::Dropout { given: dropout.to_string() });
        }
        Ok(ModelSpec {
            head,
            classifier: Some(Classifier { labels: num_labels, dropout, bias }),
            // The classification models hold the base model alone: no output layer tied to
            // the embedding, no logit soft-capping.
            tied_embeddings: false,
            final_softcap: None,
            loss_upcasts_logits: upcasts,
            ..self.clone()
        })
    }
}
