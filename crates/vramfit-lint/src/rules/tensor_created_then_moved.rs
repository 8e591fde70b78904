use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Expr, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds a tensor built on the CPU and moved at once: `torch.zeros(n).to(device)`,
    /// `torch.randn(n).cuda()`, `torch.tensor(data).to("cuda")`.
    ///
    /// ## Why is this bad?
    /// The tensor is allocated in host memory, filled, copied to the GPU and thrown away: a
    /// temporary host buffer, a transfer and a synchronisation for nothing. Factories take a
    /// `device=` argument and build the tensor where it belongs.
    ///
    /// ## Example
    /// ```python
    /// mask = torch.ones(batch, seq_len).to(device)
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// mask = torch.ones(batch, seq_len, device=device)
    /// ```
    ///
    /// ## References
    /// - PyTorch profiler `ExtraCUDACopyPattern`
    /// - <https://github.com/astral-sh/ruff/issues/12349>
    pub(crate) struct TensorCreatedThenMoved;
}

const FACTORIES: &[&str] = &[
    "torch.zeros",
    "torch.ones",
    "torch.empty",
    "torch.full",
    "torch.rand",
    "torch.randn",
    "torch.randint",
    "torch.arange",
    "torch.eye",
    "torch.tensor",
    "torch.linspace",
    "torch.zeros_like",
    "torch.ones_like",
    "torch.randn_like",
    "torch.rand_like",
    "torch.full_like",
];

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::TensorCreatedThenMoved) {
        return;
    }
    let Some((receiver, method)) = pyast::method_call(call) else { return };
    let Expr::Call(inner) = receiver else { return };
    if !checker.imports.resolves_to(&inner.func, FACTORIES)
        || pyast::keyword(inner, "device").is_some()
    {
        return;
    }
    let moves_to_device = match method {
        "cuda" => true,
        "to" => {
            call.arguments.args.first().is_some_and(is_device)
                || pyast::keyword(call, "device").is_some()
        }
        _ => false,
    };
    if !moves_to_device {
        return;
    }
    let factory = checker.text(&*inner.func);
    checker.report(Diagnostic::new(
        Rule::TensorCreatedThenMoved,
        call.range(),
        format!("`{factory}(...)` is built in host memory and then copied to the device"),
        format!("pass the device to the factory: `{factory}(..., device=...)`"),
    ));
}

fn is_device(expr: &Expr) -> bool {
    if let Some(text) = pyast::string_literal(expr) {
        return text.starts_with("cuda") || text == "mps" || text.starts_with("xpu");
    }
    if let Expr::Call(call) = expr {
        return pyast::last_segment(&call.func) == Some("device");
    }
    pyast::last_segment(expr).is_some_and(|name| {
        let lower = name.to_ascii_lowercase();
        lower.contains("device") || lower == "dev" || lower == "rank" || lower == "local_rank"
    })
}
