use crate::checker::{Checker, walk_scope};
use crate::diagnostic::Diagnostic;
use crate::names;
use crate::pyast::{self, Expr, Ranged, Stmt, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds gradient accumulation (`optimizer.step()` only when `(i + 1) % k == 0`) where the
    /// loss that is backpropagated every micro-batch is never divided by the number of
    /// accumulation steps.
    ///
    /// ## Why is this bad?
    /// Accumulation is *the* way to train a large batch in little memory, but gradients add
    /// up: without `loss / k` the update is `k` times too large, as if the learning rate were
    /// multiplied by `k`. Training still runs, so the bug goes unnoticed.
    ///
    /// ## Example
    /// ```python
    /// for i, (x, y) in enumerate(loader):
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     if (i + 1) % accumulation_steps == 0:
    ///         optimizer.step()
    ///         optimizer.zero_grad()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// for i, (x, y) in enumerate(loader):
    ///     loss = criterion(model(x), y) / accumulation_steps
    ///     loss.backward()
    ///     if (i + 1) % accumulation_steps == 0:
    ///         optimizer.step()
    ///         optimizer.zero_grad()
    /// ```
    ///
    /// Only losses computed in the loop from a model or loss call are checked; a loss returned
    /// by a helper that takes the accumulation steps is assumed to be scaled.
    ///
    /// ## References
    /// - <https://github.com/karpathy/nanoGPT/issues/206>
    /// - <https://github.com/fastai/fastai/issues/3023>
    /// - <https://github.com/huggingface/transformers/issues/35207>
    pub(crate) struct GradAccumulationLossNotScaled;
}

pub(crate) fn check(checker: &mut Checker) {
    if !checker.enabled(Rule::GradAccumulationLossNotScaled) {
        return;
    }
    let Some(frame) = checker.innermost_loop() else { return };
    if frame.guards.is_empty() {
        return;
    }
    let mut reports = Vec::new();
    for call in &frame.backward_calls {
        let Some(value) = names::backwarded_value(call, &checker.imports) else { continue };
        if is_scaled_expr(value) {
            continue;
        }
        let Some(name) = pyast::dotted(value) else { continue };
        if unscaled_source(checker, frame.body, &name) {
            reports.push((call.range(), name));
        }
    }
    for (range, name) in reports {
        checker.report(Diagnostic::new(
            Rule::GradAccumulationLossNotScaled,
            range,
            format!(
                "`{name}` is backpropagated every micro-batch of a gradient accumulation without being divided by the number of steps"
            ),
            format!("divide before `backward()`: `{name} = {name} / accumulation_steps`"),
        ));
    }
}

fn is_scaled_expr(expr: &Expr) -> bool {
    matches!(expr, Expr::BinOp(binop) if matches!(binop.op, ast::Operator::Div | ast::Operator::Mult))
}

/// Whether every binding of `name` in the loop is an unscaled model or loss result, and the
/// loop never scales it afterwards.
fn unscaled_source(checker: &Checker, body: &[Stmt], name: &str) -> bool {
    let mut sources = 0;
    let mut scaled_or_unknown = false;
    walk_scope(
        body,
        &mut |stmt| match stmt {
            Stmt::Assign(assign) if assign.targets.iter().any(|t| binds(t, name)) => {
                if is_scaled_expr(&assign.value) || !is_graph_source(checker, &assign.value) {
                    scaled_or_unknown = true;
                } else {
                    sources += 1;
                }
            }
            Stmt::AugAssign(aug)
                if pyast::dotted(&aug.target).as_deref() == Some(name)
                    && matches!(aug.op, ast::Operator::Div | ast::Operator::Mult) =>
            {
                scaled_or_unknown = true;
            }
            _ => {}
        },
        &mut |_| {},
    );
    sources > 0 && !scaled_or_unknown
}

fn binds(target: &Expr, name: &str) -> bool {
    match target {
        Expr::Tuple(tuple) => tuple.elts.iter().any(|e| pyast::dotted(e).as_deref() == Some(name)),
        other => pyast::dotted(other).as_deref() == Some(name),
    }
}

/// A model call, a loss call, or `.loss` of one, with no argument that looks like the
/// accumulation count.
fn is_graph_source(checker: &Checker, value: &Expr) -> bool {
    let mut source = false;
    let mut mentions_steps = false;
    pyast::walk_expr(value, &mut |expr| match expr {
        Expr::Call(call)
            if (checker.is_model_callee(&call.func)
                || names::is_loss_callee(
                    &call.func,
                    &checker.imports,
                    &checker.settings.loss_names,
                )) =>
        {
            source = true;
        }
        Expr::Attribute(attribute) if attribute.attr.as_str() == "loss" => source = true,
        Expr::Name(_) | Expr::Attribute(_) => {
            if let Some(name) = pyast::last_segment(expr) {
                let lower = name.to_ascii_lowercase();
                mentions_steps =
                    mentions_steps || lower.contains("accum") || lower.contains("grad_acc");
            }
        }
        _ => {}
    });
    source && !mentions_steps
}
