use crate::checker::Checker;
use crate::diagnostic::{Diagnostic, Edit, Fix};
use crate::pyast::{self, Expr, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds a loss (or any tensor that carries an autograd graph) added to an accumulator that
    /// lives across loop iterations, without `.item()` or `.detach()`.
    ///
    /// ## Why is this bad?
    /// `total_loss += loss` makes `total_loss` a tensor whose history includes every
    /// iteration's graph, activations included. Nothing can be freed, so memory grows with each
    /// batch until the run dies with an out-of-memory error. The PyTorch FAQ calls this
    /// "accumulating history across your training loop".
    ///
    /// Resetting the accumulator at the top of each epoch (`total_loss = 0` before the batch
    /// loop) does not help: it still holds every batch's graph until the epoch ends. Only a
    /// reset inside the training step, or a value that is itself backpropagated, is clean.
    ///
    /// ## Example
    /// ```python
    /// total_loss = 0
    /// for x, y in loader:
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     total_loss += loss
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// total_loss = 0
    /// for x, y in loader:
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     total_loss += loss.item()
    /// ```
    ///
    /// ## Fix safety
    /// The fix appends `.item()` (or `.detach()` for values that are not losses). It is unsafe:
    /// the accumulator becomes a Python float instead of a tensor.
    ///
    /// ## References
    /// - <https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory>
    /// - <https://github.com/pai4451/ML2021/issues/2>
    pub(crate) struct LossAccumulatedWithGraph;
}

/// `acc += value`. Only loops of a function that trains (calls `backward()`) are checked: a
/// model's own `forward` builds its graph on purpose.
pub(crate) fn check_aug_assign(checker: &mut Checker, aug: &ast::StmtAugAssign) {
    if !matches!(aug.op, ast::Operator::Add | ast::Operator::Sub) {
        return;
    }
    if matches!(aug.value.as_ref(), Expr::List(_) | Expr::Tuple(_)) {
        return; // `lst += [x]` is a container: MEM102.
    }
    report_if_accumulating(checker, &aug.target, &aug.value, aug.range());
}

/// `acc = acc + value`.
pub(crate) fn check_assign(checker: &mut Checker, assign: &ast::StmtAssign) {
    let [target] = assign.targets.as_slice() else { return };
    let Expr::BinOp(binop) = assign.value.as_ref() else { return };
    if binop.op != ast::Operator::Add {
        return;
    }
    let Some(name) = pyast::dotted(target) else { return };
    let value = if pyast::dotted(&binop.left).as_deref() == Some(name.as_str()) {
        &binop.right
    } else if pyast::dotted(&binop.right).as_deref() == Some(name.as_str()) {
        &binop.left
    } else {
        return;
    };
    report_if_accumulating(checker, target, value, assign.range());
}

fn report_if_accumulating(
    checker: &mut Checker,
    target: &Expr,
    value: &Expr,
    stmt: crate::pyast::TextRange,
) {
    if !checker.enabled(Rule::LossAccumulatedWithGraph) || !checker.in_training_loop() {
        return;
    }
    let accumulator = match target {
        Expr::Subscript(subscript) => pyast::dotted(&subscript.value),
        other => pyast::dotted(other),
    };
    let Some(accumulator) = accumulator else { return };
    if !checker.carries_graph(value)
        || checker.scope.feeds_backward.contains(&accumulator)
        || checker.reset_in_loop(&accumulator, stmt.start())
    {
        return;
    }
    let text = checker.text(value);
    let method = if text.to_ascii_lowercase().contains("loss") { "item" } else { "detach" };
    let atomic =
        matches!(value, Expr::Name(_) | Expr::Attribute(_) | Expr::Call(_) | Expr::Subscript(_));
    let edits = if atomic {
        vec![Edit::insert(value.end(), format!(".{method}()"))]
    } else {
        vec![Edit::insert(value.start(), "("), Edit::insert(value.end(), format!(").{method}()"))]
    };
    let fixed = if atomic { format!("{text}.{method}()") } else { format!("({text}).{method}()") };
    let per_epoch = if checker.reset_around_step(&accumulator, stmt.start()) {
        " (resetting it once per epoch does not stop it growing through the epoch)"
    } else {
        ""
    };
    let diagnostic = Diagnostic::new(
        Rule::LossAccumulatedWithGraph,
        value.range(),
        format!(
            "`{accumulator}` accumulates `{text}` across iterations with its autograd graph: memory grows every step"
        ),
        format!("accumulate a number instead: `{fixed}`{per_epoch}"),
    )
    .with_fix(Fix::unsafe_(format!("use `{fixed}`"), edits));
    checker.report(diagnostic);
}
