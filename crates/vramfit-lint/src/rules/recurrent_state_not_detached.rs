use crate::checker::{Checker, walk_scope};
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Expr, Ranged, Stmt, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds a recurrent hidden state that is fed back into the model on every iteration of a
    /// training loop (`out, hidden = model(x, hidden)`) and never detached.
    ///
    /// ## Why is this bad?
    /// The new `hidden` carries the graph of the previous batch, which carries the one before:
    /// backpropagation runs through the whole history and memory grows linearly with the
    /// number of batches. Users then add `retain_graph=True` to silence "Trying to backward
    /// through the graph a second time", which makes it worse.
    ///
    /// ## Example
    /// ```python
    /// hidden = model.init_hidden(batch_size)
    /// for x, y in loader:
    ///     output, hidden = model(x, hidden)
    ///     loss = criterion(output, y)
    ///     loss.backward()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// hidden = model.init_hidden(batch_size)
    /// for x, y in loader:
    ///     hidden = hidden.detach()  # for an LSTM: tuple(h.detach() for h in hidden)
    ///     output, hidden = model(x, hidden)
    ///     loss = criterion(output, y)
    ///     loss.backward()
    /// ```
    ///
    /// ## References
    /// - <https://github.com/pytorch/pytorch/issues/2198>
    /// - <https://github.com/pytorch/examples/blob/main/word_language_model/main.py> (`repackage_hidden`)
    pub(crate) struct RecurrentStateNotDetached;
}

pub(crate) fn check(checker: &mut Checker, stmt: &Stmt, assign: &ast::StmtAssign) {
    if !checker.enabled(Rule::RecurrentStateNotDetached) || checker.grad_disabled > 0 {
        return;
    }
    let Some(frame) = checker.innermost_loop() else { return };
    if frame.backward_calls.is_empty() {
        return;
    }
    let Expr::Call(call) = assign.value.as_ref() else { return };
    if !checker.is_model_callee(&call.func) && !is_self_layer(&call.func) {
        return;
    }
    let mut targets = Vec::new();
    for target in &assign.targets {
        match target {
            Expr::Tuple(tuple) => targets.extend(tuple.elts.iter().filter_map(pyast::dotted)),
            other => targets.extend(pyast::dotted(other)),
        }
    }
    let passed: Vec<String> = call.arguments.args.iter().filter_map(pyast::dotted).collect();
    let Some(state) = targets.into_iter().find(|target| passed.contains(target)) else { return };
    if checker.reset_in_loop(&state, stmt.start()) || detached_in_loop(frame.body, &state, stmt) {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::RecurrentStateNotDetached,
        stmt.range(),
        format!(
            "`{state}` is carried into the next iteration with its graph: backward runs through every previous batch"
        ),
        format!("detach it at the top of the loop: `{state} = {state}.detach()`"),
    ));
}

fn is_self_layer(func: &Expr) -> bool {
    matches!(func, Expr::Attribute(attribute)
        if matches!(attribute.value.as_ref(), Expr::Name(name) if name.id.as_str() == "self"))
}

/// Any other assignment to `state` in the loop, `state.detach_()`, or a call of a
/// `repackage`/`detach` helper on it counts as cutting the history.
fn detached_in_loop(body: &[Stmt], state: &str, this: &Stmt) -> bool {
    let found = std::cell::Cell::new(false);
    walk_scope(
        body,
        &mut |stmt| {
            if stmt.range() == this.range() {
                return;
            }
            if let Stmt::Assign(assign) = stmt {
                let assigns = assign.targets.iter().any(|target| match target {
                    Expr::Tuple(tuple) => {
                        tuple.elts.iter().any(|e| pyast::dotted(e).as_deref() == Some(state))
                    }
                    other => pyast::dotted(other).as_deref() == Some(state),
                });
                found.set(found.get() || assigns);
            }
        },
        &mut |expr| {
            let Expr::Call(call) = expr else { return };
            let mentions = |e: &Expr| {
                pyast::any_expr(e, &mut |inner| pyast::dotted(inner).as_deref() == Some(state))
            };
            if let Some((receiver, method)) = pyast::method_call(call)
                && method.starts_with("detach")
                && mentions(receiver)
            {
                found.set(true);
            }
            let helper = pyast::last_segment(&call.func).is_some_and(|name| {
                let lower = name.to_ascii_lowercase();
                lower.contains("repackage") || lower.contains("detach")
            });
            if helper && call.arguments.args.iter().any(mentions) {
                found.set(true);
            }
        },
    );
    found.get()
}
