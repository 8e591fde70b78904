use crate::checker::Checker;
use crate::diagnostic::{Diagnostic, Edit, Fix};
use crate::pyast::{self, Expr, Ranged, Stmt, TextRange, TextSize, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds the deprecated device-specific AMP API: `torch.cuda.amp.autocast`,
    /// `torch.cuda.amp.GradScaler`, `torch.cuda.amp.custom_fwd` / `custom_bwd` and
    /// `torch.cpu.amp.autocast`, called or imported.
    ///
    /// ## Why is this bad?
    /// PyTorch 2.4 deprecated them in favour of the device-generic `torch.amp` API; they warn
    /// with `FutureWarning` on every use and will be removed. Mixed precision is the first
    /// memory saving people reach for, and tutorials still teach the old spelling.
    ///
    /// ## Example
    /// ```python
    /// from torch.cuda.amp import GradScaler, autocast
    ///
    /// scaler = GradScaler()
    /// with autocast():
    ///     loss = criterion(model(x), y)
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// from torch.amp import GradScaler, autocast
    ///
    /// scaler = GradScaler("cuda")
    /// with autocast("cuda"):
    ///     loss = criterion(model(x), y)
    /// ```
    ///
    /// ## Fix safety
    /// The fix is safe: it rewrites the name and passes the device (`"cuda"` or `"cpu"`)
    /// explicitly, which is exactly what the old API did. It is offered only when every use of
    /// an imported name is a call or a decorator it can rewrite.
    ///
    /// ## References
    /// - <https://github.com/pytorch/tutorials/issues/3331>
    /// - <https://github.com/karpathy/nanoGPT/issues/635>
    /// - TorchFix TOR101 (autocast only)
    pub(crate) struct DeprecatedCudaAmpApi;
}

const MEMBERS: &[&str] = &["autocast", "GradScaler", "custom_fwd", "custom_bwd"];

/// `torch.cuda.amp.<member>` written as an attribute chain, called or not.
pub(crate) fn check_reference(checker: &mut Checker, expr: &Expr) {
    if !checker.enabled(Rule::DeprecatedCudaAmpApi) {
        return;
    }
    let Some(qualified) = checker.imports.resolve(expr) else { return };
    let Some((device, member)) = deprecated(&qualified) else { return };
    let call = checker.call_with_func(expr);
    let fix = chain_fix(checker, expr, call, device, member);
    let mut diagnostic = Diagnostic::new(
        Rule::DeprecatedCudaAmpApi,
        expr.range(),
        format!("`{qualified}` is deprecated"),
        format!("use {}", replacement(device, member)),
    );
    if let Some(fix) = fix {
        diagnostic = diagnostic.with_fix(fix);
    }
    checker.report(diagnostic);
}

/// `from torch.cuda.amp import autocast, GradScaler`.
pub(crate) fn check_import(checker: &mut Checker, import: &ast::StmtImportFrom) {
    if !checker.enabled(Rule::DeprecatedCudaAmpApi) || import.level != 0 {
        return;
    }
    let Some(module) = &import.module else { return };
    let device = match module.as_str() {
        "torch.cuda.amp" => "cuda",
        "torch.cpu.amp" => "cpu",
        _ => return,
    };
    let names: Vec<(&str, &str)> = import
        .names
        .iter()
        .filter(|alias| MEMBERS.contains(&alias.name.as_str()))
        .map(|alias| {
            let local = alias.asname.as_ref().map_or(alias.name.as_str(), |a| a.as_str());
            (alias.name.as_str(), local)
        })
        .collect();
    if names.is_empty() {
        return;
    }
    let fix = import_fix(checker, module.range(), device, &names);
    let listed: Vec<&str> = names.iter().map(|(name, _)| *name).collect();
    let mut diagnostic = Diagnostic::new(
        Rule::DeprecatedCudaAmpApi,
        import.range(),
        format!("`torch.{device}.amp` is deprecated (imports {})", listed.join(", ")),
        format!(
            "import from `torch.amp` and pass the device: {}",
            names.iter().map(|(name, _)| replacement(device, name)).collect::<Vec<_>>().join(", ")
        ),
    );
    if let Some(fix) = fix {
        diagnostic = diagnostic.with_fix(fix);
    }
    checker.report(diagnostic);
}

fn deprecated(qualified: &str) -> Option<(&'static str, &'static str)> {
    let (device, member) = if let Some(member) = qualified.strip_prefix("torch.cuda.amp.") {
        ("cuda", member)
    } else if let Some(member) = qualified.strip_prefix("torch.cpu.amp.") {
        ("cpu", member)
    } else {
        return None;
    };
    let member = MEMBERS.iter().find(|m| **m == member)?;
    if device == "cpu" && *member != "autocast" {
        return None;
    }
    Some((device, member))
}

fn replacement(device: &str, member: &str) -> String {
    match member {
        "custom_fwd" | "custom_bwd" => format!("`torch.amp.{member}(device_type=\"{device}\")`"),
        _ => format!("`torch.amp.{member}(\"{device}\", ...)`"),
    }
}

/// Rewrites `<base>.cuda.amp.<member>` to `<base>.amp.<member>` and passes the device.
fn chain_fix(
    checker: &Checker,
    expr: &Expr,
    call: Option<&ast::ExprCall>,
    device: &str,
    member: &str,
) -> Option<Fix> {
    let Expr::Attribute(outer) = expr else { return None };
    let Expr::Attribute(amp) = outer.value.as_ref() else { return None };
    let Expr::Attribute(dev) = amp.value.as_ref() else { return None };
    if amp.attr.as_str() != "amp" || dev.attr.as_str() != device {
        return None;
    }
    let base = checker.text(&*dev.value);
    let mut edits = vec![Edit::replace(expr.range(), format!("{base}.amp.{member}"))];
    edits.extend(device_edit(call, expr, device, member)?);
    Some(Fix::safe(format!("use `{base}.amp.{member}` with the device"), edits))
}

/// The edit that passes the device to a call of `member` (or decorates a bare `custom_fwd`).
fn device_edit(
    call: Option<&ast::ExprCall>,
    name: &Expr,
    device: &str,
    member: &str,
) -> Option<Vec<Edit>> {
    let decorator = matches!(member, "custom_fwd" | "custom_bwd");
    let argument =
        if decorator { format!("device_type=\"{device}\"") } else { format!("\"{device}\"") };
    let Some(call) = call else {
        // Only a bare decorator can be completed without a call.
        return decorator.then(|| vec![Edit::insert(name.end(), format!("({argument})"))]);
    };
    if decorator && !call.arguments.args.is_empty() {
        return None;
    }
    let first = call
        .arguments
        .args
        .iter()
        .map(Ranged::start)
        .chain(call.arguments.keywords.iter().map(Ranged::start))
        .min();
    Some(vec![match first {
        Some(start) => Edit::insert(start, format!("{argument}, ")),
        None => Edit::insert(call.arguments.start() + TextSize::new(1), argument),
    }])
}

/// Rewrites the import's module and every use of the imported names; `None` if a use cannot
/// be rewritten.
fn import_fix(
    checker: &Checker,
    module: TextRange,
    device: &str,
    names: &[(&str, &str)],
) -> Option<Fix> {
    let mut edits = vec![Edit::replace(module, "torch.amp")];
    let mut uses = Vec::new();
    let mut decorators = Vec::new();
    pyast::walk_stmts(
        checker.module,
        &mut |stmt| {
            if let Stmt::FunctionDef(function) = stmt {
                decorators.extend(function.decorator_list.iter().map(|d| d.expression.range()));
            }
        },
        &mut |expr| {
            if let Expr::Name(name) = expr
                && let Some((member, _)) =
                    names.iter().find(|(_, local)| name.id.as_str() == *local)
            {
                uses.push((expr, *member));
            }
        },
    );
    for (expr, member) in uses {
        let call = checker.call_with_func(expr);
        let is_decorator = decorators.contains(&expr.range());
        if call.is_none() && !is_decorator {
            return None;
        }
        edits.extend(device_edit(call, expr, device, member)?);
    }
    edits.sort_by_key(|edit| edit.range.start());
    Some(Fix::safe("import from `torch.amp` and pass the device", edits))
}
