//! What names mean: which callees are models or losses, which calls turn gradients off, which
//! statements are training steps. Shared by the data-flow and the rules.

use crate::pyast::{self, Expr, Imports, ast};

/// Callee names that are models (their calls return graph-carrying tensors).
const MODEL_NAMES: &[&str] = &[
    "model",
    "net",
    "network",
    "generator",
    "discriminator",
    "encoder",
    "decoder",
    "backbone",
    "classifier",
    "critic",
    "actor",
    "policy",
    "rnn",
    "lstm",
    "gru",
    "transformer",
    "teacher",
    "student",
    "unet",
    "cell",
    "forward",
];

/// Suffixes of callee names that are models (`resnet`, `text_encoder`, `base_model`).
const MODEL_SUFFIXES: &[&str] = &[
    "model",
    "net",
    "_encoder",
    "_decoder",
    "_generator",
    "_discriminator",
    "_rnn",
    "_lstm",
    "_gru",
];

/// Prefixes of functions that build or fetch a model rather than run one.
const BUILDER_PREFIXES: &[&str] = &[
    "create_", "build_", "get_", "load_", "make_", "init_", "setup_", "from_", "wrap_", "prepare",
];

/// Callee names that are loss functions.
const LOSS_NAMES: &[&str] = &[
    "criterion",
    "loss_fn",
    "loss_func",
    "loss_function",
    "lossfn",
    "loss_fct",
    "compute_loss",
    "loss",
    "loss_module",
];

/// Prefixes of functions whose names end in `loss` but only report one.
const NON_LOSS_PREFIXES: &[&str] =
    &["log_", "print_", "plot_", "save_", "show_", "get_", "record_"];

/// Whether calling `func` runs a model.
pub(crate) fn is_model_callee(func: &Expr, imports: &Imports, extra: &[String]) -> bool {
    let Some(name) = pyast::last_segment(func) else { return false };
    if extra.iter().any(|extra| extra == name) {
        return true;
    }
    // A class (`Model(...)`) builds a model; an imported function (`timm.create_model`) too.
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) || imports.resolve(func).is_some() {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    if BUILDER_PREFIXES.iter().any(|prefix| lower.starts_with(prefix)) {
        return false;
    }
    if MODEL_NAMES.contains(&lower.as_str()) {
        return true;
    }
    // A suffix match on a method (`quantizer.postprocess_model`) is a verb, not a layer: only
    // plain names and attributes of `self` count.
    let plain = match func {
        Expr::Name(_) => true,
        Expr::Attribute(attribute) => {
            matches!(attribute.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
        }
        _ => false,
    };
    plain && MODEL_SUFFIXES.iter().any(|s| lower.ends_with(s))
}

/// Whether calling `func` computes a loss.
pub(crate) fn is_loss_callee(func: &Expr, imports: &Imports, extra: &[String]) -> bool {
    if let Some(qualified) = imports.resolve(func) {
        return qualified
            .strip_prefix("torch.nn.functional.")
            .is_some_and(|name| name.ends_with("loss") || TORCH_LOSSES.contains(&name));
    }
    let Some(name) = pyast::last_segment(func) else { return false };
    if extra.iter().any(|extra| extra == name) {
        return true;
    }
    let lower = name.to_ascii_lowercase();
    if NON_LOSS_PREFIXES.iter().any(|prefix| lower.starts_with(prefix)) {
        return false;
    }
    LOSS_NAMES.contains(&lower.as_str())
        || lower.ends_with("_loss")
        || lower.starts_with("criterion")
        || lower.ends_with("_criterion")
}

/// `torch.nn.functional` losses whose names do not end in `loss`.
const TORCH_LOSSES: &[&str] =
    &["cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"];

/// Whether a `with` item or decorator turns gradients off.
pub(crate) fn disables_grad(expr: &Expr, imports: &Imports) -> bool {
    let (func, call) = match expr {
        Expr::Call(call) => (call.func.as_ref(), Some(call)),
        other => (other, None),
    };
    let Some(qualified) = imports.resolve(func) else { return false };
    match qualified.as_str() {
        "torch.no_grad" | "torch.autograd.no_grad" | "torch.autograd.grad_mode.no_grad" => true,
        "torch.inference_mode" | "torch.autograd.grad_mode.inference_mode" => {
            let mode = call.and_then(|call| {
                call.arguments.args.first().or_else(|| pyast::keyword(call, "mode"))
            });
            !mode.is_some_and(pyast::is_false)
        }
        "torch.set_grad_enabled" | "torch.autograd.set_grad_enabled" => call
            .and_then(|call| call.arguments.args.first().or_else(|| pyast::keyword(call, "mode")))
            .is_some_and(pyast::is_false),
        _ => false,
    }
}

/// The autocast callees.
pub(crate) const AUTOCAST: &[&str] = &[
    "torch.autocast",
    "torch.amp.autocast",
    "torch.amp.autocast_mode.autocast",
    "torch.cuda.amp.autocast",
    "torch.cpu.amp.autocast",
];

/// The precision an autocast call runs in, as far as the code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AutocastDtype {
    Float16,
    BFloat16,
    Unknown,
    Disabled,
}

/// Reads the precision of an autocast call (`None` if `call` is not autocast).
pub(crate) fn autocast_dtype(call: &ast::ExprCall, imports: &Imports) -> Option<AutocastDtype> {
    let qualified = imports.resolve(&call.func)?;
    if !AUTOCAST.contains(&qualified.as_str()) {
        return None;
    }
    if pyast::keyword(call, "enabled").is_some_and(pyast::is_false) {
        return Some(AutocastDtype::Disabled);
    }
    if let Some(dtype) = pyast::keyword(call, "dtype") {
        return Some(match imports.resolve(dtype).as_deref() {
            Some("torch.float16" | "torch.half") => AutocastDtype::Float16,
            Some("torch.bfloat16") => AutocastDtype::BFloat16,
            _ => AutocastDtype::Unknown,
        });
    }
    if qualified == "torch.cuda.amp.autocast" {
        return Some(AutocastDtype::Float16);
    }
    if qualified == "torch.cpu.amp.autocast" {
        return Some(AutocastDtype::BFloat16);
    }
    let device = call.arguments.args.first().or_else(|| pyast::keyword(call, "device_type"));
    Some(match device.and_then(pyast::string_literal) {
        Some("cuda") => AutocastDtype::Float16,
        Some("cpu") => AutocastDtype::BFloat16,
        _ => AutocastDtype::Unknown,
    })
}

/// Whether the call is a backward pass: `x.backward()`, `accelerator.backward(x)`,
/// `self.manual_backward(x)` or `torch.autograd.backward(x)`.
pub(crate) fn is_backward_call(call: &ast::ExprCall, imports: &Imports) -> bool {
    match pyast::method_call(call) {
        Some((_, "backward" | "manual_backward")) => {
            !imports.resolves_to(&call.func, &["torch.autograd.grad"])
        }
        _ => false,
    }
}

/// The value a backward call differentiates: `loss` in `loss.backward()`,
/// `scaler.scale(loss).backward()`, `accelerator.backward(loss)` and `torch.autograd.backward(loss)`.
pub(crate) fn backwarded_value<'a>(call: &'a ast::ExprCall, imports: &Imports) -> Option<&'a Expr> {
    if imports.resolves_to(&call.func, &["torch.autograd.backward"]) {
        return call.arguments.args.first();
    }
    let (receiver, method) = pyast::method_call(call)?;
    if method == "manual_backward" {
        return call.arguments.args.first();
    }
    if method != "backward" {
        return None;
    }
    if let Some(first) = call.arguments.args.first() {
        // `accelerator.backward(loss)`, `fabric.backward(loss)`, `engine.backward(loss)`.
        if matches!(receiver, Expr::Name(_) | Expr::Attribute(_)) && !is_tensorish_name(receiver) {
            return Some(first);
        }
    }
    if let Expr::Call(inner) = receiver
        && let Some((_, "scale")) = pyast::method_call(inner)
    {
        return inner.arguments.args.first();
    }
    Some(receiver)
}

fn is_tensorish_name(expr: &Expr) -> bool {
    pyast::last_segment(expr).is_some_and(|name| {
        let lower = name.to_ascii_lowercase();
        lower.contains("loss") || lower.contains("out") || lower == "y" || lower == "z"
    })
}

/// Whether the call is an optimizer step: `optimizer.step()`, `opt.step()`, `scaler.step(opt)`.
pub(crate) fn is_optimizer_step(call: &ast::ExprCall) -> bool {
    let Some((receiver, "step")) = pyast::method_call(call) else { return false };
    pyast::last_segment(receiver).is_some_and(|name| {
        let lower = name.to_ascii_lowercase();
        lower.contains("opt") || lower.ends_with("scaler")
    })
}

/// Whether the call clears gradients: `zero_grad()` or `p.grad.zero_()` / `.grad = None` forms.
pub(crate) fn is_zero_grad(call: &ast::ExprCall) -> bool {
    match pyast::method_call(call) {
        Some((_, "zero_grad" | "clear_grad" | "clear_gradients")) => true,
        Some((receiver, "zero_" | "detach_")) => {
            pyast::last_segment(receiver).is_some_and(|name| name == "grad")
        }
        _ => false,
    }
}

/// Whether `test` is an accumulation guard: `(i + 1) % k == 0`, `step % k == 0`,
/// `not (i + 1) % k`, possibly inside `and`/`or`.
pub(crate) fn is_accumulation_test(test: &Expr) -> bool {
    pyast::any_expr(test, &mut |expr| match expr {
        Expr::Compare(compare) => {
            matches!(compare.ops.first(), Some(ast::CmpOp::Eq))
                && compare.comparators.first().and_then(pyast::int_literal) == Some(0)
                && is_modulo(&compare.left)
        }
        Expr::UnaryOp(unary) => unary.op == ast::UnaryOp::Not && is_modulo(&unary.operand),
        _ => false,
    })
}

fn is_modulo(expr: &Expr) -> bool {
    match expr {
        Expr::BinOp(binop) if binop.op == ast::Operator::Mod => {
            pyast::int_literal(&binop.right) != Some(1)
                && pyast::string_literal(&binop.left).is_none()
        }
        _ => false,
    }
}

/// Whether the function named `name` is evaluation code by its name.
pub(crate) fn is_eval_function_name(name: &str, is_method: bool) -> bool {
    let lower = name.to_ascii_lowercase();
    // Lightning runs these hooks with gradients off already.
    if is_method
        && matches!(lower.as_str(), "validation_step" | "test_step" | "predict_step" | "val_step")
    {
        return false;
    }
    lower.starts_with("eval")
        || lower.starts_with("valid")
        || lower.starts_with("val_")
        || lower == "val"
        || lower.starts_with("predict")
        || lower.starts_with("infer")
        || matches!(lower.as_str(), "test" | "test_epoch" | "test_loop" | "run_test")
}
