use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Expr, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds tensors that carry an autograd graph stored in a list or dict that outlives the
    /// loop iteration: `losses.append(loss)`, `outputs[key] = out`,
    /// `preds = torch.cat([preds, out])`.
    ///
    /// ## Why is this bad?
    /// Each stored tensor keeps its whole graph (and the activations it saved) alive, so memory
    /// grows with every batch, as with `total_loss += loss`. Losses kept "for logging" are the
    /// usual case; predictions kept for metrics also stay on the GPU.
    ///
    /// Emptying the list at the top of each epoch does not help: it still holds every batch's
    /// graph until the epoch ends.
    ///
    /// ## Example
    /// ```python
    /// losses = []
    /// for x, y in loader:
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     losses.append(loss)
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// losses = []
    /// for x, y in loader:
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     losses.append(loss.item())  # or loss.detach().cpu() for tensors
    /// ```
    ///
    /// A list that is later backpropagated (`torch.stack(losses).sum().backward()`) is not
    /// flagged: it needs its graph.
    ///
    /// ## References
    /// - <https://github.com/sktime/pytorch-forecasting/issues/1924>
    /// - <https://github.com/pytorch/pytorch/issues/13613>
    pub(crate) struct GraphTensorStoredInContainer;
}

/// `container.append(value)`, `container.extend(values)`, `container.insert(i, value)`.
pub(crate) fn check_call(checker: &mut Checker, call: &ast::ExprCall) {
    let Some((receiver, method)) = pyast::method_call(call) else { return };
    let value = match method {
        "append" | "extend" => call.arguments.args.first(),
        "insert" => call.arguments.args.get(1),
        _ => None,
    };
    let Some(value) = value else { return };
    report(checker, receiver, value);
}

/// `container[key] = value` and `acc = torch.cat([acc, value])`.
pub(crate) fn check_assign(checker: &mut Checker, assign: &ast::StmtAssign) {
    let [target] = assign.targets.as_slice() else { return };
    match target {
        Expr::Subscript(subscript) => report(checker, &subscript.value, &assign.value),
        Expr::Name(_) => {
            let Expr::Call(call) = assign.value.as_ref() else { return };
            if !checker.imports.resolves_to(&call.func, &["torch.cat", "torch.stack"]) {
                return;
            }
            let Some(list) = call.arguments.args.first().and_then(as_sequence) else {
                return;
            };
            let name = pyast::dotted(target);
            let mentions_self = list.iter().any(|e| pyast::dotted(e) == name);
            if let Some(value) = list.iter().find(|e| pyast::dotted(e) != name)
                && mentions_self
            {
                report(checker, target, value);
            }
        }
        _ => {}
    }
}

fn as_sequence(expr: &Expr) -> Option<&[Expr]> {
    match expr {
        Expr::List(list) => Some(&list.elts),
        Expr::Tuple(tuple) => Some(&tuple.elts),
        _ => None,
    }
}

fn report(checker: &mut Checker, container: &Expr, value: &Expr) {
    if !checker.enabled(Rule::GraphTensorStoredInContainer) || !checker.in_training_loop() {
        return;
    }
    let Some(name) = pyast::dotted(container) else { return };
    if !checker.carries_graph(value)
        || checker.scope.feeds_backward.contains(&name)
        || checker.reset_in_loop(&name, value.start())
    {
        return;
    }
    let text = checker.text(value);
    let per_epoch = if checker.reset_around_step(&name, value.start()) {
        " (emptying it once per epoch does not stop it growing through the epoch)"
    } else {
        ""
    };
    checker.report(Diagnostic::new(
        Rule::GraphTensorStoredInContainer,
        value.range(),
        format!("`{name}` keeps `{text}` with its autograd graph across iterations"),
        format!(
            "store `{text}.item()` for a scalar or `{text}.detach().cpu()` for a tensor{per_epoch}"
        ),
    ));
}
