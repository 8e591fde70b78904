use crate::checker::{Checker, children};
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Expr, Ranged, Stmt, TextSize, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds a training loop that keeps the model's whole output object in a variable
    /// (`outputs = model(**batch)`) and then backpropagates its loss: the variable holds the
    /// output through `backward()`, `optimizer.step()` and the next forward, until the next
    /// iteration's assignment replaces it.
    ///
    /// ## Why is this bad?
    /// The output object holds the logits, `batch × sequence × vocabulary` values in the
    /// compute dtype: for Llama 3 (a 128,256-token vocabulary) at batch 4 × 2048 tokens in
    /// bf16, 4 × 2048 × 128,256 × 2 bytes = 2.0 GiB, alive at the start of backward, where the
    /// step usually peaks, and through the next forward. With `use_cache` on (the default of
    /// most configs) it also holds every layer's cached keys and values. The Hugging Face
    /// Trainer and Lightning keep only the loss; `vramfit estimate --loop custom` (the default)
    /// counts what this loop keeps, `--loop trainer` what it would not.
    ///
    /// ## Example
    /// ```python
    /// for batch in loader:
    ///     outputs = model(**batch)
    ///     loss = outputs.loss
    ///     loss.backward()
    ///     optimizer.step()
    ///     optimizer.zero_grad()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// for batch in loader:
    ///     loss = model(**batch).loss
    ///     loss.backward()
    ///     optimizer.step()
    ///     optimizer.zero_grad()
    /// ```
    ///
    /// or `del outputs` right after taking the loss (read `outputs.logits` for metrics before
    /// that). A loop that deletes or rebinds the variable before `backward()` is not flagged.
    ///
    /// ## References
    /// - <https://huggingface.co/learn/llm-course/chapter3/4> (the loop this rule flags)
    /// - <https://github.com/huggingface/transformers/blob/main/src/transformers/trainer.py>
    ///   (`compute_loss` returns the loss and drops the outputs)
    pub(crate) struct ModelOutputHeldAcrossBackward;
}

/// What the loop's own body does, at a source offset.
enum Event<'a> {
    /// `name = model(...)`.
    ModelOutput(&'a str, &'a ast::StmtAssign),
    /// `del name` or `name = <anything else>`.
    Released(&'a str),
    /// A backward call.
    Backward,
}

pub(crate) fn check(checker: &mut Checker) {
    if !checker.enabled(Rule::ModelOutputHeldAcrossBackward)
        || !checker.in_training_loop()
        || checker.grad_disabled > 0
    {
        return;
    }
    let Some(frame) = checker.innermost_loop() else { return };
    if frame.backward_calls.is_empty() {
        return;
    }
    let mut events: Vec<(TextSize, Event<'_>)> = Vec::new();
    collect(checker, frame.body, &mut events);
    events.extend(frame.backward_calls.iter().map(|call| (call.start(), Event::Backward)));
    events.sort_by_key(|(offset, _)| *offset);
    let body = frame.body;
    let mut findings = Vec::new();
    for (i, (_, event)) in events.iter().enumerate() {
        let Event::ModelOutput(name, assign) = event else { continue };
        // Held across a backward: the next backward comes before any release of the name.
        let held = events[i + 1..].iter().find_map(|(_, e)| match e {
            Event::Backward => Some(true),
            Event::Released(n) | Event::ModelOutput(n, _) if n == name => Some(false),
            _ => None,
        });
        if held == Some(true) && takes_the_loss(body, name) {
            findings.push((*name, *assign));
        }
    }
    for (name, assign) in findings {
        let value = checker.text(&*assign.value);
        checker.report(Diagnostic::new(
            Rule::ModelOutputHeldAcrossBackward,
            assign.range(),
            format!(
                "`{name}` keeps the model's output through `backward()`, the optimizer step and the next forward: its logits cost batch × sequence × vocabulary × dtype size (2.0 GiB for Llama 3 at 4 × 2048 tokens in bf16), with the KV cache when `use_cache` is on"
            ),
            format!(
                "take the loss alone, `loss = {value}.loss`, or `del {name}` before `backward()`"
            ),
        ));
    }
}

/// The loop body's model-output assignments and releases of names, in source order (nested
/// loops and functions are their own bodies).
fn collect<'a>(checker: &Checker<'a>, body: &'a [Stmt], events: &mut Vec<(TextSize, Event<'a>)>) {
    for stmt in body {
        match stmt {
            Stmt::For(_) | Stmt::While(_) | Stmt::FunctionDef(_) | Stmt::ClassDef(_) => {}
            Stmt::Assign(assign) => {
                let model_call = matches!(assign.value.as_ref(),
                    Expr::Call(call) if checker.is_model_callee(&call.func));
                for target in &assign.targets {
                    if let Expr::Name(name) = target {
                        events.push((
                            assign.start(),
                            if model_call {
                                Event::ModelOutput(name.id.as_str(), assign)
                            } else {
                                Event::Released(name.id.as_str())
                            },
                        ));
                    }
                }
            }
            Stmt::Delete(delete) => {
                for target in &delete.targets {
                    if let Expr::Name(name) = target {
                        events.push((delete.start(), Event::Released(name.id.as_str())));
                    }
                }
            }
            _ => {
                for child in children(stmt).1 {
                    collect(checker, child, events);
                }
            }
        }
    }
}

/// Whether the loop reads the loss out of `name` (`name.loss`, `name["loss"]`, `name[0]`):
/// an output object of which only the loss is needed.
fn takes_the_loss(body: &[Stmt], name: &str) -> bool {
    let mut found = false;
    pyast::walk_stmts(body, &mut |_| {}, &mut |expr| {
        let base = match expr {
            Expr::Attribute(a) if a.attr.as_str() == "loss" => Some(&*a.value),
            Expr::Subscript(s)
                if pyast::string_literal(&s.slice) == Some("loss")
                    || pyast::int_literal(&s.slice) == Some(0) =>
            {
                Some(&*s.value)
            }
            _ => None,
        };
        found = found || base.is_some_and(|b| matches!(b, Expr::Name(n) if n.id.as_str() == name));
    });
    found
}
