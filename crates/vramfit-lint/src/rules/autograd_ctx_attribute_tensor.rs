use std::collections::HashSet;

use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Expr, Ranged, ast};
use crate::registry::Rule;
use crate::rules::tensor_stored_on_module_in_forward::is_autograd_function;

declare_rule! {
    /// ## What it does
    /// Finds tensors stored as attributes of `ctx` in the `forward` of a custom
    /// `torch.autograd.Function` (`ctx.out = out`) instead of `ctx.save_for_backward(...)`.
    ///
    /// ## Why is this bad?
    /// The output refers to its `grad_fn`, which is the `ctx`; a tensor stored on `ctx` refers
    /// back to the output. Python's garbage collector does not break this cycle through the
    /// C++ autograd objects, so the tensors leak. `save_for_backward` is the supported way and
    /// also checks for in-place modification.
    ///
    /// ## Example
    /// ```python
    /// class Exp(torch.autograd.Function):
    ///     @staticmethod
    ///     def forward(ctx, x):
    ///         result = x.exp()
    ///         ctx.result = result
    ///         return result
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// class Exp(torch.autograd.Function):
    ///     @staticmethod
    ///     def forward(ctx, x):
    ///         result = x.exp()
    ///         ctx.save_for_backward(result)
    ///         return result
    /// ```
    ///
    /// Non-tensors (shapes, flags, scalars) may stay on `ctx`.
    ///
    /// ## References
    /// - <https://github.com/pytorch/pytorch/issues/25340>
    /// - <https://github.com/dmlc/dgl/issues/1060>
    pub(crate) struct AutogradCtxAttributeTensor;
}

pub(crate) fn check(checker: &mut Checker, assign: &ast::StmtAssign) {
    if !checker.enabled(Rule::AutogradCtxAttributeTensor) {
        return;
    }
    let Some(function) = checker.scope.function else { return };
    if function.name.as_str() != "forward" || !is_autograd_function(checker) {
        return;
    }
    let Some(ctx) = function.parameters.args.first() else { return };
    let ctx = ctx.parameter.name.as_str();
    let tensors = tensor_names(function);
    for target in &assign.targets {
        let Expr::Attribute(attribute) = target else { continue };
        if !matches!(attribute.value.as_ref(), Expr::Name(name) if name.id.as_str() == ctx) {
            continue;
        }
        if !is_tensor(&assign.value, &tensors, checker) {
            continue;
        }
        checker.report(Diagnostic::new(
            Rule::AutogradCtxAttributeTensor,
            target.range(),
            format!(
                "tensor stored as `{}` makes a reference cycle through the graph that is never freed",
                checker.text(target)
            ),
            format!("use `{ctx}.save_for_backward(...)` and read it back with `{ctx}.saved_tensors`"),
        ));
    }
}

/// Names in `forward` that hold tensors: parameters used as tensors (receivers of tensor
/// methods, arguments of `torch.*`), and names bound from tensor operations on them.
fn tensor_names(function: &ast::StmtFunctionDef) -> HashSet<String> {
    let params: Vec<&str> = function
        .parameters
        .args
        .iter()
        .skip(1)
        .filter(|p| p.default.is_none())
        .map(|p| p.parameter.name.as_str())
        .collect();
    let mut tensors = HashSet::new();
    pyast::walk_stmts(&function.body, &mut |_| {}, &mut |expr| {
        let Expr::Call(call) = expr else { return };
        if let Some((Expr::Name(receiver), method)) = pyast::method_call(call)
            && params.contains(&receiver.id.as_str())
            && !NON_TENSOR_METHODS.contains(&method)
        {
            tensors.insert(receiver.id.to_string());
        }
        if pyast::dotted(&call.func).is_some_and(|name| name.starts_with("torch.")) {
            for arg in &call.arguments.args {
                if let Expr::Name(name) = arg
                    && params.contains(&name.id.as_str())
                {
                    tensors.insert(name.id.to_string());
                }
            }
        }
    });
    pyast::walk_stmts(
        &function.body,
        &mut |stmt| {
            if let ast::Stmt::Assign(assign) = stmt {
                let from_tensor = pyast::any_expr(
                    &assign.value,
                    &mut |e| matches!(e, Expr::Name(n) if tensors.contains(n.id.as_str())),
                );
                if from_tensor && matches!(assign.value.as_ref(), Expr::Call(_) | Expr::BinOp(_)) {
                    for target in &assign.targets {
                        if let Some(name) = pyast::dotted(target) {
                            tensors.insert(name);
                        }
                    }
                }
            }
        },
        &mut |_| {},
    );
    tensors
}

const NON_TENSOR_METHODS: &[&str] = &["size", "dim", "numel", "get", "items", "keys", "values"];

fn is_tensor(value: &Expr, tensors: &HashSet<String>, checker: &Checker) -> bool {
    match value {
        Expr::Name(name) => tensors.contains(name.id.as_str()),
        Expr::Call(call) => match pyast::method_call(call) {
            Some((receiver, method)) => {
                !NON_TENSOR_METHODS.contains(&method)
                    && !matches!(method, "item" | "tolist")
                    && is_tensor(receiver, tensors, checker)
            }
            None => checker
                .imports
                .resolve(&call.func)
                .is_some_and(|name| name.starts_with("torch.") && !name.contains(".Size")),
        },
        Expr::BinOp(binop) => {
            is_tensor(&binop.left, tensors, checker) || is_tensor(&binop.right, tensors, checker)
        }
        _ => false,
    }
}
