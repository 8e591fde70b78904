//! What each architecture decides, as `transformers` builds it: one exhaustive table.
//!
//! Every architecture answers every question here, in its own arm of [`traits`]: a new
//! architecture is a new arm, and the compiler refuses it until each field has an answer.
//! [`ModelSpec::resolve`](super::ModelSpec::resolve) combines these answers with the values of
//! a `config.json`; nothing after it asks which architecture a model is.

use super::{Architecture, Norm, Pooling, Task};

/// The default of a bias flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BiasRule {
    /// Fixed by the architecture's code.
    Always(bool),
    /// `config.json`'s flag (`attention_bias`, `mlp_bias`), with this default.
    Config(bool),
    /// `config.json`'s `qkv_bias` (Qwen2-MoE's attention), with this default.
    QkvBiasFlag(bool),
}

/// Where an MoE layer's expert width comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExpertWidthRule {
    /// `intermediate_size` (Mixtral: every MLP is an expert).
    Intermediate,
    /// `moe_intermediate_size`, with this default (Qwen-MoE, whose `intermediate_size` is the
    /// dense layers' MLP).
    MoeIntermediate(u64),
}

/// Whether the router renormalises the top-k weights to sum to 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NormTopKRule {
    /// Always (Mixtral's router divides by their sum).
    Always,
    /// `norm_topk_prob`, with this default (Qwen-MoE).
    Config(bool),
}

/// A sparse mixture of experts as the architecture builds it (the config class's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MoeRule {
    /// `num_local_experts` / `num_experts` default.
    pub(super) experts: u64,
    /// `num_experts_per_tok` default.
    pub(super) top_k: u64,
    /// One expert's MLP width.
    pub(super) width: ExpertWidthRule,
    /// Whether the top-k weights are renormalised.
    pub(super) norm_topk_prob: NormTopKRule,
    /// The router casts the routing weights back to the logits' dtype
    /// (`router_top_value.to(router_logits.dtype)`, Qwen-MoE) rather than keeping them in fp32
    /// (Mixtral).
    pub(super) weights_in_logits_dtype: bool,
    /// A gated shared expert, `shared_expert_intermediate_size` wide by default (Qwen2-MoE).
    pub(super) shared_expert: Option<u64>,
    /// Which layers are sparse is read from `decoder_sparse_step` and `mlp_only_layers`
    /// (Qwen-MoE; Mixtral's layers are all sparse).
    pub(super) sparse_layers_configured: bool,
    /// DeepSeek's MoE block, when the architecture has it.
    pub(super) deepseek: Option<DeepseekMoeRule>,
}

/// DeepSeek's MoE block (the config class's defaults): `n_shared_experts` ungated shared
/// experts of the expert width, the first `first_k_dense_replace` layers dense, and the
/// router (`DeepseekV2TopkRouter`: softmax; `DeepseekV3TopkRouter`: sigmoid with the
/// `e_score_correction_bias` buffer and grouped top-k), its weight kept in fp32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DeepseekMoeRule {
    /// `n_shared_experts` default.
    pub(super) shared_experts: u64,
    /// `first_k_dense_replace` default.
    pub(super) first_k_dense: u64,
    /// V3's sigmoid router (else V2's softmax).
    pub(super) sigmoid: bool,
    /// `n_group` default (V2: none; its `topk_method` decides whether groups are used).
    pub(super) n_group: Option<u64>,
}

/// Multi-head latent attention (DeepSeek-V2/V3) and the config class's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MlaRule {
    /// `q_lora_rank` default (`None`: `q_proj`).
    pub(super) q_lora_rank: Option<u64>,
    /// `kv_lora_rank` default.
    pub(super) kv_lora_rank: u64,
    /// `qk_nope_head_dim` default.
    pub(super) qk_nope_head_dim: u64,
    /// `qk_rope_head_dim` default.
    pub(super) qk_rope_head_dim: u64,
    /// `v_head_dim` default.
    pub(super) v_head_dim: u64,
    /// `rope_interleave` default: `Some` when the config reads it (V3), `None` for V2's
    /// complex-number rotary.
    pub(super) rope_interleave: Option<bool>,
}

/// How positions enter the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum PositionRule {
    /// Rotary embeddings over the whole head.
    Rotary,
    /// Rotary embeddings over `rotary_pct` of each head (default given).
    PartialRotary { default_pct: f64 },
    /// A learned table (`max_position_embeddings`, default given); the ids are an `arange`
    /// computed per forward (GPT-2) or a slice of a registered buffer (BERT).
    Learned { default_max: u64, ids_from_buffer: bool },
    /// T5's relative position bias (`relative_attention_num_buckets`, default given).
    Relative { default_buckets: u64 },
}

/// Where `head_dim` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeadDimRule {
    /// `hidden_size / num_attention_heads` (the config's `head_dim` is not read).
    Width,
    /// The config's `head_dim`, else the width rule.
    ConfigOrWidth,
    /// The config's `head_dim`, else this.
    ConfigOr(u64),
}

/// Which dropout the embedding output gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EmbeddingDropoutRule {
    /// None.
    Off,
    /// Its own probability (`embd_pdrop`), defaulting to the architecture's dropout.
    Own,
    /// The hidden dropout.
    Hidden,
}

/// Whether the model builds a KV cache (`DynamicCache`) when it runs in training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CacheRule {
    /// A decoder: `config.use_cache` (the `transformers` config class's default given),
    /// turned off by gradient checkpointing.
    Config(bool),
    /// An encoder (`is_decoder` false): `use_cache` is ignored, no cache is built.
    Never,
}

/// Where a classifier's dropout probability comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ClassifierDropoutRule {
    /// `classifier_dropout`, else the hidden dropout (BERT, RoBERTa).
    ConfigOrHidden,
    /// `classifier_dropout`, else this (`GenericForTokenClassification`'s 0.1 for configs
    /// without a `hidden_dropout`, GPT-2, GPT-NeoX).
    ConfigOr(f64),
}

/// The heads `transformers` puts on an architecture.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct TaskRules {
    /// The task of the default head (the spec's `head` as resolved).
    pub(super) default: Task,
    /// A `*ForCausalLM` class exists.
    pub(super) causal_lm: bool,
    /// A `*ForMaskedLM` class exists.
    pub(super) masked_lm: bool,
    /// How `*ForSequenceClassification` pools a sequence.
    pub(super) seq_cls: Pooling,
    /// A `*ForTokenClassification` class exists (`gemma3_text` has none).
    pub(super) token_cls: bool,
    /// `*ForTokenClassification`'s dropout.
    pub(super) token_cls_dropout: ClassifierDropoutRule,
    /// Its loss casts the logits to fp32 (`ForTokenClassification`'s `logits.float()`), rather
    /// than `CrossEntropyLoss` on them as they are (BERT, RoBERTa, GPT-2).
    pub(super) token_cls_upcasts: bool,
    /// vramfit models its sequence- and token-classification heads.
    pub(super) classifiers: bool,
    /// The classifiers run the masked-LM head's transform first (ModernBERT's
    /// `ModernBertPredictionHead`: dense, activation, LayerNorm), on the pooled row or on every
    /// token.
    pub(super) prediction_head: bool,
    /// A `*ForConditionalGeneration` (`AutoModelForSeq2SeqLM`) class exists.
    pub(super) seq2seq: bool,
}

/// Decoders whose heads are `transformers`' generic classes.
const DECODER_TASKS: TaskRules = TaskRules {
    default: Task::CausalLm,
    causal_lm: true,
    masked_lm: false,
    seq_cls: Pooling::LastToken,
    token_cls: true,
    token_cls_dropout: ClassifierDropoutRule::ConfigOr(0.1),
    token_cls_upcasts: true,
    classifiers: true,
    prediction_head: false,
    seq2seq: false,
};

/// Sliding-window (local) layers beside global ones, as Gemma 3 builds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LocalLayerRule {
    /// `sliding_window_pattern` default: every n-th layer is global, the others local (used
    /// when `config.json` has no `layer_types`).
    pub(super) pattern: u64,
    /// `sliding_window` default.
    pub(super) window: u64,
}

/// An encoder-decoder (T5): an encoder stack and a decoder stack of `num_decoder_layers`
/// (default `num_layers`) with cross-attention, sharing one embedding tied to the LM head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seq2SeqRule {
    /// `feed_forward_proj` default: `relu` (`T5DenseActDense`) or `gated-gelu`
    /// (`T5DenseGatedActDense` with `gelu_new`).
    pub(super) feed_forward: &'static str,
    /// The decoder's output is scaled by `d_model ** -0.5` before the LM head unless
    /// `tie_word_embeddings` is written false (T5's config class); mT5 never scales.
    pub(super) scale_unless_untied: bool,
}

/// One architecture's answers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Traits {
    /// The normalisation layer.
    pub(super) norm: Norm,
    /// `down(act(gate(x)) * up(x))`.
    pub(super) gated_mlp: bool,
    /// One q/k/v projection.
    pub(super) fused_qkv: bool,
    /// One gate/up projection.
    pub(super) fused_gate_up: bool,
    /// RMSNorm on q and k.
    pub(super) qk_norm: bool,
    /// The q/k norms span all heads (OLMo 2) rather than one head (Qwen 3).
    pub(super) qk_norm_full_width: bool,
    /// Norms before attention and the MLP (OLMo 2 has none: only the sublayers' outputs are
    /// normalised).
    pub(super) input_norms: bool,
    /// Norms after the sublayers as well as before.
    pub(super) sandwich_norm: bool,
    /// Norms after each residual addition only (BERT), not before the sublayers.
    pub(super) post_norm: bool,
    /// A norm on the embedding output.
    pub(super) embedding_norm: bool,
    /// A norm after the last layer.
    pub(super) final_norm: bool,
    /// Embeddings multiplied by `sqrt(hidden_size)`.
    pub(super) scaled_embeddings: bool,
    /// The loss casts the logits to fp32 first (`ForCausalLMLoss`: `logits.float()`), rather
    /// than `CrossEntropyLoss` on the logits as they are.
    pub(super) loss_upcasts_logits: bool,
    /// The eager attention calls `softmax(dtype=float32)` (Llama family) rather than plain
    /// `softmax`.
    pub(super) eager_softmax_fp32: bool,
    /// Attention masks the base model builds for eager attention (Gemma 2: full and sliding
    /// window; encoders without padding: none).
    pub(super) eager_masks: u64,
    /// The base model registers int64 `position_ids` and `token_type_ids` buffers.
    pub(super) id_buffers: bool,
    /// Positions.
    pub(super) positions: PositionRule,
    /// `head_dim`.
    pub(super) head_dim: HeadDimRule,
    /// The config key and default of the MLP activation.
    pub(super) activation: (&'static str, &'static str),
    /// The config key for the activation, when it is not `hidden_act`.
    pub(super) activation_key: &'static str,
    /// Biases on q, k, v.
    pub(super) qkv_bias: BiasRule,
    /// Bias on the attention output.
    pub(super) o_bias: BiasRule,
    /// Biases on the MLP projections.
    pub(super) mlp_bias: BiasRule,
    /// `tie_word_embeddings` default.
    pub(super) tied_default: bool,
    /// Default of every dropout probability.
    pub(super) dropout_default: f64,
    /// The embedding dropout.
    pub(super) embedding_dropout: EmbeddingDropoutRule,
    /// `intermediate_size` may be absent: 4 × width.
    pub(super) intermediate_defaults_to_4x: bool,
    /// A sparse mixture of experts.
    pub(super) moe: Option<MoeRule>,
    /// Attention and final logit soft-capping are read from `config.json`, with these
    /// defaults (`None`: off unless configured, Gemma 3); `None` for architectures without.
    pub(super) softcaps: Option<(Option<f64>, Option<f64>)>,
    /// Local (sliding-window) and global layers, each kind with its own rotary table.
    pub(super) local_layers: Option<LocalLayerRule>,
    /// A token-type table (`type_vocab_size`, default 2).
    pub(super) token_types: bool,
    /// Attention and MLP read the same input (`use_parallel_residual`, default true).
    pub(super) parallel_residual: bool,
    /// The KV cache in training.
    pub(super) cache: CacheRule,
    /// The task heads.
    pub(super) tasks: TaskRules,
    /// Whether the LayerNorms have a bias (`norm_bias`, ModernBERT).
    pub(super) norm_bias: BiasRule,
    /// The first layer normalises its attention input too (ModernBERT's layer 0 has
    /// `nn.Identity()` there: the embedding norm precedes it).
    pub(super) first_layer_input_norm: bool,
    /// The masked-LM head's dense has a bias (ModernBERT: `classifier_bias`).
    pub(super) mlm_dense_bias: BiasRule,
    /// The masked-LM decoder has a bias (ModernBERT: `decoder_bias`).
    pub(super) mlm_decoder_bias: BiasRule,
    /// Layers `0, n, 2n, ...` attend globally and the others within a sliding window
    /// (`global_attn_every_n_layers`, default given: ModernBERT).
    pub(super) global_every: Option<u64>,
    /// The rotary embedding upcasts q and k (`q.float()`, twice) and casts the result back to
    /// their dtype (ModernBERT), rather than multiplying in the promoted dtype.
    pub(super) rotary_upcast: bool,
    /// Multi-head latent attention (DeepSeek) instead of q/k/v projections.
    pub(super) mla: Option<MlaRule>,
    /// An encoder-decoder.
    pub(super) encoder_decoder: Option<Seq2SeqRule>,
}

/// The decoder-only Llama family's answers, the base of several arms below.
const LLAMA: Traits = Traits {
    norm: Norm::RmsNorm,
    gated_mlp: true,
    fused_qkv: false,
    fused_gate_up: false,
    qk_norm: false,
    qk_norm_full_width: false,
    input_norms: true,
    sandwich_norm: false,
    post_norm: false,
    embedding_norm: false,
    final_norm: true,
    scaled_embeddings: false,
    loss_upcasts_logits: true,
    eager_softmax_fp32: true,
    eager_masks: 1,
    id_buffers: false,
    positions: PositionRule::Rotary,
    head_dim: HeadDimRule::ConfigOrWidth,
    activation: ("hidden_act", "silu"),
    activation_key: "hidden_act",
    qkv_bias: BiasRule::Config(false),
    o_bias: BiasRule::Config(false),
    mlp_bias: BiasRule::Always(false),
    tied_default: false,
    dropout_default: 0.0,
    embedding_dropout: EmbeddingDropoutRule::Off,
    intermediate_defaults_to_4x: false,
    moe: None,
    softcaps: None,
    local_layers: None,
    token_types: false,
    parallel_residual: false,
    cache: CacheRule::Config(true),
    tasks: DECODER_TASKS,
    norm_bias: BiasRule::Always(true),
    first_layer_input_norm: true,
    mlm_dense_bias: BiasRule::Always(true),
    mlm_decoder_bias: BiasRule::Always(true),
    global_every: None,
    rotary_upcast: false,
    mla: None,
    encoder_decoder: None,
};

/// BERT and RoBERTa.
const ENCODER: Traits = Traits {
    norm: Norm::LayerNorm,
    gated_mlp: false,
    fused_qkv: false,
    fused_gate_up: false,
    qk_norm: false,
    qk_norm_full_width: false,
    input_norms: true,
    sandwich_norm: false,
    post_norm: true,
    embedding_norm: true,
    final_norm: false,
    scaled_embeddings: false,
    loss_upcasts_logits: false,
    eager_softmax_fp32: false,
    eager_masks: 0,
    id_buffers: true,
    positions: PositionRule::Learned { default_max: 512, ids_from_buffer: true },
    head_dim: HeadDimRule::Width,
    activation: ("hidden_act", "gelu"),
    activation_key: "hidden_act",
    qkv_bias: BiasRule::Always(true),
    o_bias: BiasRule::Always(true),
    mlp_bias: BiasRule::Always(true),
    tied_default: true,
    dropout_default: 0.1,
    embedding_dropout: EmbeddingDropoutRule::Hidden,
    intermediate_defaults_to_4x: false,
    moe: None,
    softcaps: None,
    local_layers: None,
    token_types: true,
    parallel_residual: false,
    cache: CacheRule::Never,
    tasks: TaskRules {
        default: Task::MaskedLm,
        causal_lm: false,
        masked_lm: true,
        seq_cls: Pooling::Pooler,
        token_cls: true,
        token_cls_dropout: ClassifierDropoutRule::ConfigOrHidden,
        token_cls_upcasts: false,
        classifiers: true,
        prediction_head: false,
        seq2seq: false,
    },
    norm_bias: BiasRule::Always(true),
    first_layer_input_norm: true,
    mlm_dense_bias: BiasRule::Always(true),
    mlm_decoder_bias: BiasRule::Always(true),
    global_every: None,
    rotary_upcast: false,
    mla: None,
    encoder_decoder: None,
};

/// T5 and mT5 (`T5ForConditionalGeneration`, `MT5ForConditionalGeneration`): T5LayerNorm
/// (RMS, fp32 variance, no bias), q/k/v/o without bias and unscaled scores, plain softmax,
/// `dropout_rate` everywhere (embeddings, attention probabilities, every residual branch,
/// each stack's output), a final norm per stack; transformers 5 ties the LM head to the
/// shared embedding whatever `tie_word_embeddings` says (it only decides T5's output
/// scaling). The decoder builds a causal mask for eager attention; the encoder, without
/// padding, none. Its classification heads are not modelled.
const T5: Traits = Traits {
    norm: Norm::T5RmsNorm,
    gated_mlp: false,
    loss_upcasts_logits: false,
    eager_softmax_fp32: false,
    eager_masks: 1,
    positions: PositionRule::Relative { default_buckets: 32 },
    head_dim: HeadDimRule::ConfigOr(64),
    activation: ("feed_forward_proj", "relu"),
    activation_key: "feed_forward_proj",
    qkv_bias: BiasRule::Always(false),
    o_bias: BiasRule::Always(false),
    mlp_bias: BiasRule::Always(false),
    tied_default: true,
    dropout_default: 0.1,
    embedding_dropout: EmbeddingDropoutRule::Hidden,
    cache: CacheRule::Config(true),
    tasks: TaskRules {
        default: Task::Seq2Seq,
        causal_lm: false,
        masked_lm: false,
        seq_cls: Pooling::ClassificationHead,
        token_cls: true,
        token_cls_dropout: ClassifierDropoutRule::ConfigOr(0.0),
        token_cls_upcasts: false,
        classifiers: false,
        prediction_head: false,
        seq2seq: true,
    },
    encoder_decoder: Some(Seq2SeqRule { feed_forward: "relu", scale_unless_untied: true }),
    ..LLAMA
};

/// Each architecture's answers.
pub(super) fn traits(arch: Architecture) -> Traits {
    use Architecture as A;
    match arch {
        A::Llama => Traits { mlp_bias: BiasRule::Config(false), ..LLAMA },
        A::Mistral => LLAMA,
        A::Mixtral => Traits {
            moe: Some(MoeRule {
                experts: 8,
                top_k: 2,
                width: ExpertWidthRule::Intermediate,
                norm_topk_prob: NormTopKRule::Always,
                weights_in_logits_dtype: false,
                shared_expert: None,
                sparse_layers_configured: false,
                deepseek: None,
            }),
            ..LLAMA
        },
        A::Qwen2Moe => Traits {
            qkv_bias: BiasRule::QkvBiasFlag(true),
            o_bias: BiasRule::Always(false),
            moe: Some(MoeRule {
                experts: 60,
                top_k: 4,
                width: ExpertWidthRule::MoeIntermediate(1408),
                norm_topk_prob: NormTopKRule::Config(false),
                weights_in_logits_dtype: true,
                shared_expert: Some(5632),
                sparse_layers_configured: true,
                deepseek: None,
            }),
            ..LLAMA
        },
        A::Qwen3Moe => Traits {
            qk_norm: true,
            moe: Some(MoeRule {
                experts: 128,
                top_k: 8,
                width: ExpertWidthRule::MoeIntermediate(768),
                norm_topk_prob: NormTopKRule::Config(false),
                weights_in_logits_dtype: true,
                shared_expert: None,
                sparse_layers_configured: true,
                deepseek: None,
            }),
            ..LLAMA
        },
        // DeepseekV2ForCausalLM: MLA, the first `first_k_dense_replace` layers dense (default
        // 0), softmax routing (greedy or group-limited), `n_shared_experts` shared experts.
        A::DeepseekV2 => Traits {
            moe: Some(MoeRule {
                experts: 64,
                top_k: 6,
                width: ExpertWidthRule::MoeIntermediate(1407),
                norm_topk_prob: NormTopKRule::Config(false),
                weights_in_logits_dtype: false,
                shared_expert: None,
                sparse_layers_configured: false,
                deepseek: Some(DeepseekMoeRule {
                    shared_experts: 2,
                    first_k_dense: 0,
                    sigmoid: false,
                    n_group: None,
                }),
            }),
            mlp_bias: BiasRule::Config(false),
            mla: Some(MlaRule {
                q_lora_rank: Some(1536),
                kv_lora_rank: 512,
                qk_nope_head_dim: 128,
                qk_rope_head_dim: 64,
                v_head_dim: 128,
                rope_interleave: None,
            }),
            ..LLAMA
        },
        // DeepseekV3ForCausalLM: V2's MLA with interleaved rotary pairs, sigmoid routing with
        // a score-correction bias and grouped top-k (8 groups, 4 used), the first 3 layers
        // dense; the multi-token-prediction layer is not built.
        A::DeepseekV3 => Traits {
            moe: Some(MoeRule {
                experts: 256,
                top_k: 8,
                width: ExpertWidthRule::MoeIntermediate(2048),
                norm_topk_prob: NormTopKRule::Config(true),
                weights_in_logits_dtype: false,
                shared_expert: None,
                sparse_layers_configured: false,
                deepseek: Some(DeepseekMoeRule {
                    shared_experts: 1,
                    first_k_dense: 3,
                    sigmoid: true,
                    n_group: Some(8),
                }),
            }),
            mla: Some(MlaRule {
                q_lora_rank: Some(1536),
                kv_lora_rank: 512,
                qk_nope_head_dim: 128,
                qk_rope_head_dim: 64,
                v_head_dim: 128,
                rope_interleave: Some(true),
            }),
            ..LLAMA
        },
        A::Qwen2 => {
            Traits { qkv_bias: BiasRule::Always(true), o_bias: BiasRule::Always(false), ..LLAMA }
        }
        A::Qwen3 => Traits { qk_norm: true, head_dim: HeadDimRule::ConfigOr(128), ..LLAMA },
        A::Gemma => Traits {
            norm: Norm::GemmaRmsNorm,
            scaled_embeddings: true,
            head_dim: HeadDimRule::ConfigOr(256),
            activation: ("hidden_act", "gelu_pytorch_tanh"),
            tied_default: true,
            ..LLAMA
        },
        A::Gemma2 => Traits {
            norm: Norm::GemmaRmsNorm,
            sandwich_norm: true,
            scaled_embeddings: true,
            eager_masks: 2,
            head_dim: HeadDimRule::ConfigOr(256),
            activation: ("hidden_activation", "gelu_pytorch_tanh"),
            activation_key: "hidden_activation",
            tied_default: true,
            softcaps: Some((Some(50.0), Some(30.0))),
            ..LLAMA
        },
        // Gemma3ForCausalLM: Gemma 2's sandwich norms and scaled embeddings, per-head q/k
        // norms (Gemma's `1 + weight` RMSNorm), no soft-capping unless configured, 5 local
        // layers for each global one (their own rotary base), no token-classification class.
        A::Gemma3Text => Traits {
            norm: Norm::GemmaRmsNorm,
            qk_norm: true,
            sandwich_norm: true,
            scaled_embeddings: true,
            eager_masks: 2,
            head_dim: HeadDimRule::ConfigOr(256),
            activation: ("hidden_activation", "gelu_pytorch_tanh"),
            activation_key: "hidden_activation",
            tied_default: true,
            softcaps: Some((None, None)),
            local_layers: Some(LocalLayerRule { pattern: 6, window: 4096 }),
            tasks: TaskRules { token_cls: false, ..DECODER_TASKS },
            ..LLAMA
        },
        A::Phi3 => Traits {
            fused_qkv: true,
            fused_gate_up: true,
            head_dim: HeadDimRule::Width,
            embedding_dropout: EmbeddingDropoutRule::Own,
            ..LLAMA
        },
        A::Gpt2 => Traits {
            norm: Norm::LayerNorm,
            gated_mlp: false,
            fused_qkv: true,
            eager_softmax_fp32: false,
            positions: PositionRule::Learned { default_max: 1024, ids_from_buffer: false },
            head_dim: HeadDimRule::Width,
            activation: ("activation_function", "gelu_new"),
            qkv_bias: BiasRule::Always(true),
            o_bias: BiasRule::Always(true),
            mlp_bias: BiasRule::Always(true),
            tied_default: true,
            dropout_default: 0.1,
            embedding_dropout: EmbeddingDropoutRule::Own,
            intermediate_defaults_to_4x: true,
            // GPT2For*Classification: `CrossEntropyLoss` on the logits as they are.
            tasks: TaskRules { token_cls_upcasts: false, ..DECODER_TASKS },
            ..LLAMA
        },
        A::GptNeox => Traits {
            norm: Norm::LayerNorm,
            gated_mlp: false,
            fused_qkv: true,
            positions: PositionRule::PartialRotary { default_pct: 0.25 },
            head_dim: HeadDimRule::Width,
            activation: ("hidden_act", "gelu"),
            qkv_bias: BiasRule::Config(true),
            o_bias: BiasRule::Config(true),
            mlp_bias: BiasRule::Always(true),
            embedding_dropout: EmbeddingDropoutRule::Hidden,
            parallel_residual: true,
            ..LLAMA
        },
        A::Olmo2 => Traits {
            norm: Norm::Olmo2RmsNorm,
            qk_norm: true,
            qk_norm_full_width: true,
            input_norms: false,
            sandwich_norm: true,
            ..LLAMA
        },
        A::Bert => ENCODER,
        A::Roberta => Traits {
            tasks: TaskRules { seq_cls: Pooling::ClassificationHead, ..ENCODER.tasks },
            ..ENCODER
        },
        // Pre-norm LayerNorms without bias, fused Wqkv and GeGLU `Wi` (chunked), no biases,
        // rotary positions (a base per attention type), a final norm, the masked-LM head's
        // dense + act + norm and a decoder tied to the embeddings.
        A::ModernBert => Traits {
            norm: Norm::LayerNorm,
            gated_mlp: true,
            fused_qkv: true,
            fused_gate_up: true,
            post_norm: false,
            embedding_norm: true,
            final_norm: true,
            // `ForMaskedLMLoss`: `logits.float()`.
            loss_upcasts_logits: true,
            eager_softmax_fp32: true,
            // Filled in by `resolve` from the layer types: the sliding-window mask only (the
            // global mask is `None` without padding).
            eager_masks: 0,
            id_buffers: false,
            positions: PositionRule::Rotary,
            head_dim: HeadDimRule::Width,
            activation: ("hidden_activation", "gelu"),
            activation_key: "hidden_activation",
            qkv_bias: BiasRule::Config(false),
            o_bias: BiasRule::Config(false),
            mlp_bias: BiasRule::Config(false),
            tied_default: true,
            dropout_default: 0.0,
            embedding_dropout: EmbeddingDropoutRule::Own,
            token_types: false,
            cache: CacheRule::Never,
            tasks: TaskRules {
                seq_cls: Pooling::FirstTokenHead,
                token_cls_dropout: ClassifierDropoutRule::ConfigOr(0.0),
                prediction_head: true,
                ..ENCODER.tasks
            },
            norm_bias: BiasRule::Config(false),
            first_layer_input_norm: false,
            mlm_dense_bias: BiasRule::Config(false),
            mlm_decoder_bias: BiasRule::Config(true),
            global_every: Some(3),
            rotary_upcast: true,
            ..LLAMA
        },
        A::T5 => T5,
        A::Mt5 => Traits {
            encoder_decoder: Some(Seq2SeqRule {
                feed_forward: "gated-gelu",
                scale_unless_untied: false,
            }),
            ..T5
        },
    }
}
