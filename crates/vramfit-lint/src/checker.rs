//! The walk over one file: it keeps the context the rules ask about (loops, regions where
//! gradients are off, autocast regions, the enclosing function and class, which values carry an
//! autograd graph) and calls each rule's check at the node it is about.

use std::collections::{HashMap, HashSet};

use crate::diagnostic::Diagnostic;
use crate::names;
use crate::pyast::{self, Expr, Imports, Ranged, Stmt, TextRange, TextSize, ast};
use crate::registry::Rule;
use crate::rules;
use crate::settings::Settings;
use crate::source::SourceText;

/// Facts about the whole file, gathered before the walk.
#[derive(Debug, Default)]
pub(crate) struct FileFacts<'a> {
    /// A `GradScaler` (or any `*scaler*` name) appears somewhere.
    pub(crate) has_scaler: bool,
    /// A backward pass on a tensor (`loss.backward()`) appears somewhere.
    pub(crate) has_backward: bool,
    /// The first `nn.BatchNorm*` built in the file.
    pub(crate) batchnorm: Option<TextRange>,
    /// Names of functions called inside a `no_grad` / `inference_mode` block.
    pub(crate) called_without_grad: HashSet<String>,
    /// Every autocast call and its precision.
    pub(crate) autocasts: Vec<(&'a ast::ExprCall, names::AutocastDtype)>,
    /// Names the file uses as `nn.Module`s (see [`crate::modules`]).
    pub(crate) modules: HashSet<String>,
}

/// One function body (or the module) being walked.
#[derive(Debug, Default)]
pub(crate) struct Scope<'a> {
    pub(crate) function: Option<&'a ast::StmtFunctionDef>,
    pub(crate) class: Option<&'a ast::StmtClassDef>,
    /// Names (dotted for attributes) holding a graph-carrying value at this point of the walk.
    pub(crate) taint: HashSet<String>,
    /// Names that something `.backward()`s, directly or through an assignment.
    pub(crate) feeds_backward: HashSet<String>,
    /// Names `.backward()` is called on.
    pub(crate) backward_roots: HashSet<String>,
    /// Offsets of every backward call in the scope.
    pub(crate) backward_offsets: Vec<TextSize>,
    /// The enclosing loops of this scope, outermost first.
    pub(crate) loops: Vec<LoopFrame<'a>>,
    /// Ranges where evaluation code runs (after `model.eval()`, or an evaluation function).
    pub(crate) eval_regions: Vec<TextRange>,
    /// Only calls inside a loop count in the eval regions (name-based evaluation functions).
    pub(crate) eval_needs_loop: bool,
    pub(crate) reported_eval: bool,
}

/// A loop on the stack, with what its own body (not nested loops) does.
#[derive(Debug)]
pub(crate) struct LoopFrame<'a> {
    pub(crate) body: &'a [Stmt],
    pub(crate) backward_calls: Vec<&'a ast::ExprCall>,
    /// Optimizer steps and whether they sit under an `if`.
    pub(crate) steps: Vec<(&'a ast::ExprCall, bool)>,
    /// `if (i + 1) % k == 0:` blocks that step the optimizer.
    pub(crate) guards: Vec<&'a ast::StmtIf>,
    /// Every call in the loop, nested loops and functions included.
    pub(crate) all_calls: Vec<&'a ast::ExprCall>,
}

/// The walker.
pub(crate) struct Checker<'a> {
    pub(crate) source: &'a SourceText,
    pub(crate) settings: &'a Settings,
    pub(crate) imports: Imports,
    pub(crate) facts: FileFacts<'a>,
    pub(crate) scope: Scope<'a>,
    pub(crate) grad_disabled: u32,
    pub(crate) autocast: u32,
    pub(crate) class: Option<&'a ast::StmtClassDef>,
    pub(crate) reported_batchnorm: bool,
    pub(crate) diagnostics: Vec<Diagnostic>,
    /// The module's statements.
    pub(crate) module: &'a [Stmt],
    /// Every call of the file, by the range of its callee.
    calls_by_func: HashMap<(u32, u32), &'a ast::ExprCall>,
    /// Which rules run on this file, by `Rule as usize` (settings and per-file ignores,
    /// resolved once).
    enabled: u64,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(
        source: &'a SourceText,
        settings: &'a Settings,
        path: Option<&'a std::path::Path>,
        body: &'a [Stmt],
    ) -> Self {
        let imports = Imports::collect(body);
        let facts = gather_facts(body, &imports);
        let calls_by_func = pyast::calls_in(body)
            .into_iter()
            .map(|call| ((call.func.start().into(), call.func.end().into()), call))
            .collect();
        let mut checker = Checker {
            source,
            settings,
            imports,
            facts,
            scope: Scope::default(),
            grad_disabled: 0,
            autocast: 0,
            class: None,
            reported_batchnorm: false,
            diagnostics: Vec::new(),
            module: body,
            calls_by_func,
            enabled: crate::registry::RULES
                .iter()
                .filter(|info| settings.enabled(info.rule, path))
                .fold(0, |mask, info| mask | 1 << (info.rule as usize)),
        };
        checker.scope = checker.new_scope(None, body);
        checker
    }

    /// Whether `rule` runs on this file.
    pub(crate) fn enabled(&self, rule: Rule) -> bool {
        self.enabled & (1 << (rule as usize)) != 0
    }

    pub(crate) fn report(&mut self, diagnostic: Diagnostic) {
        if self.enabled(diagnostic.rule) {
            self.diagnostics.push(diagnostic);
        }
    }

    /// The source text of a node.
    pub(crate) fn text(&self, node: &impl Ranged) -> &'a str {
        self.source.slice(node.range())
    }

    /// The call whose callee is exactly `func`, if any.
    pub(crate) fn call_with_func(&self, func: &Expr) -> Option<&'a ast::ExprCall> {
        self.calls_by_func.get(&(func.start().into(), func.end().into())).copied()
    }

    /// In a loop of a scope that runs backward passes (a training loop, not a `forward`).
    pub(crate) fn in_training_loop(&self) -> bool {
        self.in_loop()
            && !self.scope.backward_offsets.is_empty()
            && !self
                .scope
                .function
                .is_some_and(|f| f.name.as_str().trim_start_matches('_').starts_with("forward"))
    }

    pub(crate) fn in_loop(&self) -> bool {
        !self.scope.loops.is_empty()
    }

    pub(crate) fn innermost_loop(&self) -> Option<&LoopFrame<'a>> {
        self.scope.loops.last()
    }

    /// Whether calling `func` runs a model: a name the file uses as a module, or, failing
    /// that, a model's usual name.
    pub(crate) fn is_model_callee(&self, func: &Expr) -> bool {
        pyast::dotted(func).is_some_and(|name| self.facts.modules.contains(&name))
            || names::is_model_callee(func, &self.imports, &self.settings.model_names)
    }

    fn new_scope(&self, function: Option<&'a ast::StmtFunctionDef>, body: &'a [Stmt]) -> Scope<'a> {
        let mut scope = Scope { function, class: self.class, ..Scope::default() };
        let mut backward_values = Vec::new();
        let mut assignments: Vec<(&'a Expr, &'a Expr)> = Vec::new();
        let imports = &self.imports;
        walk_scope(
            body,
            &mut |stmt| match stmt {
                Stmt::Assign(assign) => {
                    for target in &assign.targets {
                        assignments.push((target, &assign.value));
                    }
                }
                Stmt::AugAssign(aug) => assignments.push((&aug.target, &aug.value)),
                Stmt::AnnAssign(ann) => {
                    if let Some(value) = &ann.value {
                        assignments.push((&ann.target, value));
                    }
                }
                _ => {}
            },
            &mut |expr| {
                if let Expr::Call(call) = expr
                    && names::is_backward_call(call, imports)
                {
                    scope.backward_offsets.push(call.start());
                    if let Some(value) = names::backwarded_value(call, imports) {
                        backward_values.push(value);
                    }
                }
            },
        );
        for value in &backward_values {
            if let Some(name) = pyast::dotted(value) {
                scope.backward_roots.insert(name);
            }
            collect_names(value, &mut scope.feeds_backward);
        }
        for _ in 0..3 {
            for (target, value) in &assignments {
                let mut targets = HashSet::new();
                collect_names(target, &mut targets);
                if targets.iter().any(|t| scope.feeds_backward.contains(t)) {
                    collect_names(value, &mut scope.feeds_backward);
                }
            }
        }
        scope
    }

    /// Walks the module.
    pub(crate) fn check_module(&mut self, body: &'a [Stmt]) {
        self.visit_body(body);
        rules::fp16_autocast_without_grad_scaler::check_file(self);
    }

    fn visit_body(&mut self, body: &'a [Stmt]) {
        for (index, stmt) in body.iter().enumerate() {
            if let Some(rest) = body.get(index + 1..) {
                self.note_eval_call(stmt, rest);
            }
            self.visit_stmt(stmt);
        }
    }

    /// `model.eval()` opens an evaluation region that lasts until `model.train()` in the same
    /// body, if no backward pass happens in between.
    fn note_eval_call(&mut self, stmt: &'a Stmt, rest: &'a [Stmt]) {
        let Some(receiver) = mode_call(stmt, "eval") else { return };
        if !self.is_model_callee(receiver) {
            return;
        }
        let receiver = pyast::dotted(receiver);
        let end = rest
            .iter()
            .find(|later| mode_call(later, "train").is_some_and(|r| pyast::dotted(r) == receiver))
            .map_or_else(|| rest.last().map_or(stmt.end(), Ranged::end), Ranged::start);
        let region = TextRange::new(stmt.end(), end.max(stmt.end()));
        if !self.scope.backward_offsets.iter().any(|offset| region.contains(*offset)) {
            self.scope.eval_regions.push(region);
        }
    }

    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(function) => self.visit_function(function),
            Stmt::ClassDef(class) => {
                for decorator in &class.decorator_list {
                    self.visit_expr(&decorator.expression);
                }
                if let Some(arguments) = &class.arguments {
                    for base in &arguments.args {
                        self.visit_expr(base);
                    }
                }
                let outer = self.class.replace(class);
                self.visit_body(&class.body);
                self.class = outer;
            }
            Stmt::For(for_stmt) => {
                self.visit_expr(&for_stmt.iter);
                self.untaint_target(&for_stmt.target);
                self.visit_loop(&for_stmt.body);
                self.visit_body(&for_stmt.orelse);
            }
            Stmt::While(while_stmt) => {
                self.visit_expr(&while_stmt.test);
                self.visit_loop(&while_stmt.body);
                self.visit_body(&while_stmt.orelse);
            }
            Stmt::With(with) => {
                let mut disables = 0;
                let mut autocasts = 0;
                for item in &with.items {
                    self.visit_expr(&item.context_expr);
                    if names::disables_grad(&item.context_expr, &self.imports) {
                        disables += 1;
                    }
                    if let Expr::Call(call) = &item.context_expr
                        && names::autocast_dtype(call, &self.imports).is_some()
                    {
                        autocasts += 1;
                    }
                    if let Some(vars) = &item.optional_vars {
                        self.untaint_target(vars);
                    }
                }
                self.grad_disabled += disables;
                self.autocast += autocasts;
                self.visit_body(&with.body);
                self.grad_disabled -= disables;
                self.autocast -= autocasts;
            }
            Stmt::If(if_stmt) => {
                self.visit_expr(&if_stmt.test);
                self.visit_body(&if_stmt.body);
                for clause in &if_stmt.elif_else_clauses {
                    if let Some(test) = &clause.test {
                        self.visit_expr(test);
                    }
                    self.visit_body(&clause.body);
                }
            }
            Stmt::Try(try_stmt) => {
                rules::oom_retry_inside_except::check(self, try_stmt);
                self.visit_body(&try_stmt.body);
                for handler in &try_stmt.handlers {
                    let ast::ExceptHandler::ExceptHandler(handler) = handler;
                    if let Some(type_) = &handler.type_ {
                        self.visit_expr(type_);
                    }
                    self.visit_body(&handler.body);
                }
                self.visit_body(&try_stmt.orelse);
                self.visit_body(&try_stmt.finalbody);
            }
            Stmt::Match(match_stmt) => {
                self.visit_expr(&match_stmt.subject);
                for case in &match_stmt.cases {
                    self.visit_body(&case.body);
                }
            }
            Stmt::Assign(assign) => {
                self.visit_expr(&assign.value);
                for target in &assign.targets {
                    self.visit_target(target);
                }
                rules::loss_accumulated_with_graph::check_assign(self, assign);
                rules::graph_tensor_stored_in_container::check_assign(self, assign);
                rules::recurrent_state_not_detached::check(self, stmt, assign);
                rules::tensor_stored_on_module_in_forward::check(self, assign);
                rules::autograd_ctx_attribute_tensor::check(self, assign);
                for target in &assign.targets {
                    rules::requires_grad_typo::check(self, target);
                }
                let carries = self.carries_graph_assigned(&assign.targets, &assign.value);
                for target in &assign.targets {
                    self.set_taint(target, carries);
                }
            }
            Stmt::AnnAssign(ann) => {
                if let Some(value) = &ann.value {
                    self.visit_expr(value);
                    rules::requires_grad_typo::check(self, &ann.target);
                    let carries =
                        self.carries_graph_assigned(std::slice::from_ref(&ann.target), value);
                    self.set_taint(&ann.target, carries);
                }
            }
            Stmt::AugAssign(aug) => {
                self.visit_expr(&aug.value);
                self.visit_target(&aug.target);
                rules::loss_accumulated_with_graph::check_aug_assign(self, aug);
                rules::requires_grad_typo::check(self, &aug.target);
                if self.carries_graph(&aug.value) {
                    self.set_taint(&aug.target, true);
                }
            }
            Stmt::Import(_) => {}
            Stmt::ImportFrom(import) => {
                rules::deprecated_cuda_amp_api::check_import(self, import);
            }
            _ => {
                let mut exprs = Vec::new();
                pyast::walk_stmts(std::slice::from_ref(stmt), &mut |_| {}, &mut |expr| {
                    exprs.push(expr);
                });
                for expr in exprs {
                    self.visit_single_expr(expr);
                }
            }
        }
    }

    fn visit_function(&mut self, function: &'a ast::StmtFunctionDef) {
        for decorator in &function.decorator_list {
            self.visit_expr(&decorator.expression);
        }
        let decorated_no_grad = function
            .decorator_list
            .iter()
            .any(|decorator| names::disables_grad(&decorator.expression, &self.imports));
        let mut scope = self.new_scope(Some(function), &function.body);
        let is_method = self.class.is_some();
        if !decorated_no_grad
            && scope.backward_offsets.is_empty()
            && names::is_eval_function_name(function.name.as_str(), is_method)
            && !self.facts.called_without_grad.contains(function.name.as_str())
        {
            scope.eval_regions.push(function.range());
            scope.eval_needs_loop = true;
        }
        let outer_scope = std::mem::replace(&mut self.scope, scope);
        let outer_grad = std::mem::replace(&mut self.grad_disabled, u32::from(decorated_no_grad));
        let outer_autocast = std::mem::replace(&mut self.autocast, 0);
        let outer_class = self.class.take();
        self.visit_body(&function.body);
        self.class = outer_class;
        self.autocast = outer_autocast;
        self.grad_disabled = outer_grad;
        self.scope = outer_scope;
    }

    fn visit_loop(&mut self, body: &'a [Stmt]) {
        let frame = loop_frame(body, &self.imports);
        self.scope.loops.push(frame);
        rules::grad_accumulation_loss_not_scaled::check(self);
        rules::batchnorm_with_grad_accumulation::check(self);
        rules::zero_grad_missing::check(self);
        rules::model_output_held_across_backward::check(self);
        self.visit_body(body);
        self.scope.loops.pop();
    }

    /// Visits an assignment target's inner expressions (`d[key]`, `self.x`).
    fn visit_target(&mut self, target: &'a Expr) {
        match target {
            Expr::Subscript(subscript) => {
                self.visit_expr(&subscript.value);
                self.visit_expr(&subscript.slice);
            }
            Expr::Attribute(attribute) => self.visit_expr(&attribute.value),
            Expr::Tuple(tuple) => {
                for element in &tuple.elts {
                    self.visit_target(element);
                }
            }
            _ => {}
        }
    }

    /// Visits every expression inside `expr` and runs the expression-level rules.
    pub(crate) fn visit_expr(&mut self, expr: &'a Expr) {
        let mut exprs = Vec::new();
        pyast::walk_expr(expr, &mut |inner| exprs.push(inner));
        for inner in exprs {
            self.visit_single_expr(inner);
        }
    }

    fn visit_single_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Call(call) => self.visit_call(call),
            Expr::Attribute(_) => rules::deprecated_cuda_amp_api::check_reference(self, expr),
            _ => {}
        }
    }

    fn visit_call(&mut self, call: &'a ast::ExprCall) {
        rules::graph_tensor_stored_in_container::check_call(self, call);
        rules::retain_graph_in_loop::check(self, call);
        rules::backward_create_graph::check(self, call);
        rules::eval_without_no_grad::check(self, call);
        rules::grad_scaler_with_bf16::check(self, call);
        rules::backward_inside_autocast::check(self, call);
        rules::zero_grad_keeps_buffers::check(self, call);
        rules::tensor_created_then_moved::check(self, call);
        rules::torch_load_without_map_location::check(self, call);
        rules::empty_cache_in_loop::check(self, call);
        rules::data_parallel_imbalance::check(self, call);
        rules::checkpoint_use_reentrant_implicit::check(self, call);
    }

    fn untaint_target(&mut self, target: &Expr) {
        self.set_taint(target, false);
    }

    fn set_taint(&mut self, target: &Expr, carries: bool) {
        match target {
            Expr::Tuple(tuple) => {
                for element in &tuple.elts {
                    self.set_taint(element, carries);
                }
            }
            Expr::List(list) => {
                for element in &list.elts {
                    self.set_taint(element, carries);
                }
            }
            Expr::Starred(starred) => self.set_taint(&starred.value, carries),
            _ => {
                if let Some(name) = pyast::dotted(target) {
                    if carries {
                        self.scope.taint.insert(name);
                    } else {
                        self.scope.taint.remove(&name);
                    }
                }
            }
        }
    }

    /// Whether assigning `value` to `targets` makes them graph-carrying: the value carries a
    /// graph, or a target is later backpropagated and the value is not plainly a number.
    fn carries_graph_assigned(&self, targets: &[Expr], value: &Expr) -> bool {
        if self.carries_graph(value) {
            return true;
        }
        if self.grad_disabled > 0 || is_plain_value(value) {
            return false;
        }
        targets.iter().any(|target| {
            pyast::dotted(target).is_some_and(|name| self.scope.backward_roots.contains(&name))
        })
    }

    /// Whether `expr` evaluates to a tensor that carries an autograd graph.
    pub(crate) fn carries_graph(&self, expr: &Expr) -> bool {
        self.grad_disabled == 0 && self.carries_graph_at(expr, 0)
    }

    fn carries_graph_at(&self, expr: &Expr, depth: u32) -> bool {
        if depth > 48 {
            return false;
        }
        let recurse = |inner: &Expr| self.carries_graph_at(inner, depth + 1);
        match expr {
            Expr::Name(name) => self.scope.taint.contains(name.id.as_str()),
            Expr::Attribute(attribute) => {
                let attr = attribute.attr.id.as_str();
                if CLEAN_ATTRIBUTES.contains(&attr) {
                    return false;
                }
                if pyast::dotted(expr).is_some_and(|name| self.scope.taint.contains(&name)) {
                    return true;
                }
                if attr == "loss" || attr == "logits" {
                    return match attribute.value.as_ref() {
                        Expr::Call(_) => true,
                        Expr::Name(name) => !NON_TENSOR_HOLDERS.contains(&name.id.as_str()),
                        other => recurse(other),
                    };
                }
                recurse(&attribute.value)
            }
            Expr::Subscript(subscript) => recurse(&subscript.value),
            Expr::BinOp(binop) => recurse(&binop.left) || recurse(&binop.right),
            Expr::UnaryOp(unary) => unary.op != ast::UnaryOp::Not && recurse(&unary.operand),
            Expr::If(if_expr) => recurse(&if_expr.body) || recurse(&if_expr.orelse),
            Expr::Tuple(tuple) => tuple.elts.iter().any(recurse),
            Expr::List(list) => list.elts.iter().any(recurse),
            Expr::Starred(starred) => recurse(&starred.value),
            Expr::Named(named) => recurse(&named.value),
            Expr::Await(await_expr) => recurse(&await_expr.value),
            Expr::Call(call) => self.call_carries_graph(call, depth),
            _ => false,
        }
    }

    fn call_carries_graph(&self, call: &ast::ExprCall, depth: u32) -> bool {
        let recurse = |inner: &Expr| self.carries_graph_at(inner, depth + 1);
        let any_argument = || {
            call.arguments.args.iter().any(recurse)
                || call.arguments.keywords.iter().any(|keyword| recurse(&keyword.value))
        };
        if let Some((receiver, method)) = pyast::method_call(call) {
            if CLEARING_METHODS.contains(&method) || NO_GRAD_METHODS.contains(&method) {
                return false;
            }
            if recurse(receiver) {
                return true;
            }
        }
        let func = call.func.as_ref();
        if let Some(qualified) = self.imports.resolve(func) {
            if names::is_loss_callee(func, &self.imports, &self.settings.loss_names) {
                return true;
            }
            return qualified.starts_with("torch.") && any_argument();
        }
        if let Expr::Name(name) = func {
            match name.id.as_str() {
                "float" | "int" | "bool" | "len" | "str" | "round" | "repr" | "print" => {
                    return false;
                }
                "sum" | "max" | "min" | "abs" | "tuple" | "list" => return any_argument(),
                _ => {}
            }
        }
        if self.is_model_callee(func)
            || names::is_loss_callee(func, &self.imports, &self.settings.loss_names)
        {
            return true;
        }
        // Inside `forward`, `self.<layer>(x)` runs a submodule.
        if self.scope.function.is_some_and(|f| f.name.as_str() == "forward")
            && let Expr::Attribute(attribute) = func
            && matches!(attribute.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
        {
            return true;
        }
        false
    }

    /// Whether `target` was reset (plainly assigned) before `before` in every iteration of the
    /// training step: at the top level of the innermost enclosing loop that runs a backward
    /// pass, or of a loop inside it, or anywhere in the innermost loop. Then it does not keep
    /// one step's graph into the next.
    ///
    /// A reset in a loop around the step loop (`total_loss = 0` at the top of each epoch) does
    /// not count: the value still grows with every batch of the epoch. Where no enclosing loop
    /// runs a backward pass itself, a reset at the top level of any enclosing loop counts.
    pub(crate) fn reset_in_loop(&self, target: &str, before: TextSize) -> bool {
        let resetting = self.scope.loops.get(self.step_loop().unwrap_or(0)..).unwrap_or_default();
        let top_level = resetting.iter().any(|frame| {
            frame.body.iter().any(|stmt| stmt.end() <= before && assign_of(stmt, target))
        });
        if top_level {
            return true;
        }
        let Some(innermost) = self.innermost_loop() else { return false };
        let mut found = false;
        walk_scope(
            innermost.body,
            &mut |stmt| found = found || (stmt.end() <= before && assign_of(stmt, target)),
            &mut |_| {},
        );
        found
    }

    /// Whether `target` is reset at the top level of a loop around the training step (once per
    /// epoch) before `before`: what a finding's help then explains.
    pub(crate) fn reset_around_step(&self, target: &str, before: TextSize) -> bool {
        let Some(step) = self.step_loop() else { return false };
        self.scope.loops.get(..step).unwrap_or_default().iter().any(|frame| {
            frame.body.iter().any(|stmt| stmt.end() <= before && assign_of(stmt, target))
        })
    }

    /// The innermost enclosing loop whose body runs a backward pass (the training step).
    fn step_loop(&self) -> Option<usize> {
        self.scope.loops.iter().rposition(|frame| {
            let (Some(first), Some(last)) = (frame.body.first(), frame.body.last()) else {
                return false;
            };
            let body = TextRange::new(first.start(), last.end());
            self.scope.backward_offsets.iter().any(|offset| body.contains(*offset))
        })
    }

    /// Whether `offset` lies in an evaluation region of the current scope.
    pub(crate) fn in_eval_region(&self, offset: TextSize) -> bool {
        self.scope.eval_regions.iter().any(|region| region.contains(offset))
            && (!self.scope.eval_needs_loop || self.in_loop())
    }
}

/// Attributes of a tensor that are not tensors with a graph.
const CLEAN_ATTRIBUTES: &[&str] =
    &["shape", "dtype", "device", "data", "grad", "requires_grad", "ndim", "is_cuda", "grad_fn"];

/// Names whose `.loss` is a setting, not a tensor.
const NON_TENSOR_HOLDERS: &[&str] =
    &["self", "args", "config", "cfg", "opt", "opts", "hparams", "params", "settings", "conf"];

/// Methods that return a value without a graph.
pub(crate) const CLEARING_METHODS: &[&str] =
    &["item", "detach", "detach_", "tolist", "numpy", "backward", "zero_grad", "step"];

/// Methods whose result never requires grad (indices, comparisons, sizes).
const NO_GRAD_METHODS: &[&str] = &[
    "size",
    "dim",
    "numel",
    "argmax",
    "argmin",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "isnan",
    "isinf",
    "nonzero",
    "long",
    "int",
    "bool",
    "sign",
    "count_nonzero",
    "element_size",
    "data_ptr",
    "get_device",
    "isfinite",
    "all",
    "any",
];

/// A value that is plainly not a tensor with a graph: a literal or `float(...)`.
fn is_plain_value(expr: &Expr) -> bool {
    match expr {
        Expr::NumberLiteral(_) | Expr::NoneLiteral(_) | Expr::StringLiteral(_) => true,
        Expr::BooleanLiteral(_) => true,
        Expr::Call(call) => match call.func.as_ref() {
            Expr::Name(name) => matches!(name.id.as_str(), "float" | "int" | "len"),
            Expr::Attribute(attribute) => CLEARING_METHODS.contains(&attribute.attr.id.as_str()),
            _ => false,
        },
        _ => false,
    }
}

/// Whether `stmt` plainly assigns `target` (`target = ...`, `target: T = ...`).
fn assign_of(stmt: &Stmt, target: &str) -> bool {
    match stmt {
        Stmt::Assign(assign) => {
            assign.targets.iter().any(|t| pyast::dotted(t).as_deref() == Some(target))
        }
        Stmt::AnnAssign(ann) => pyast::dotted(&ann.target).as_deref() == Some(target),
        _ => false,
    }
}

/// `x.eval()` / `x.train()` as a statement: returns `x`.
fn mode_call<'a>(stmt: &'a Stmt, mode: &str) -> Option<&'a Expr> {
    let Stmt::Expr(expr_stmt) = stmt else { return None };
    let Expr::Call(call) = expr_stmt.value.as_ref() else { return None };
    let (receiver, method) = pyast::method_call(call)?;
    if method != mode {
        return None;
    }
    // `model.train(False)` is `eval()`.
    if mode == "train" && call.arguments.args.first().is_some_and(pyast::is_false) {
        return None;
    }
    Some(receiver)
}

/// Dotted names mentioned in `expr`.
fn collect_names(expr: &Expr, names: &mut HashSet<String>) {
    pyast::walk_expr(expr, &mut |inner| {
        if matches!(inner, Expr::Name(_) | Expr::Attribute(_))
            && let Some(name) = pyast::dotted(inner)
        {
            names.insert(name);
        }
    });
}

/// Walks a scope's statements without entering nested functions or classes.
pub(crate) fn walk_scope<'a>(
    body: &'a [Stmt],
    on_stmt: &mut dyn FnMut(&'a Stmt),
    on_expr: &mut dyn FnMut(&'a Expr),
) {
    for stmt in body {
        if matches!(stmt, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
            continue;
        }
        on_stmt(stmt);
        let (exprs, bodies) = children(stmt);
        match exprs {
            Some(exprs) => {
                for expr in exprs {
                    pyast::walk_expr(expr, on_expr);
                }
            }
            None => pyast::walk_stmts(std::slice::from_ref(stmt), &mut |_| {}, on_expr),
        }
        for child in bodies {
            walk_scope(child, on_stmt, on_expr);
        }
    }
}

/// A compound statement's own expressions and nested bodies. `None` for the expressions of a
/// simple statement (walk the statement itself); nested functions and classes give nothing.
pub(crate) fn children(stmt: &Stmt) -> (Option<Vec<&Expr>>, Vec<&[Stmt]>) {
    match stmt {
        Stmt::For(for_stmt) => {
            (Some(vec![&*for_stmt.target, &*for_stmt.iter]), vec![&for_stmt.body, &for_stmt.orelse])
        }
        Stmt::While(while_stmt) => {
            (Some(vec![&*while_stmt.test]), vec![&while_stmt.body, &while_stmt.orelse])
        }
        Stmt::If(if_stmt) => {
            let mut exprs = vec![&*if_stmt.test];
            let mut bodies: Vec<&[Stmt]> = vec![&if_stmt.body];
            for clause in &if_stmt.elif_else_clauses {
                exprs.extend(clause.test.as_ref());
                bodies.push(&clause.body);
            }
            (Some(exprs), bodies)
        }
        Stmt::With(with) => {
            (Some(with.items.iter().map(|item| &item.context_expr).collect()), vec![&with.body])
        }
        Stmt::Try(try_stmt) => {
            let mut bodies: Vec<&[Stmt]> = vec![&try_stmt.body];
            for handler in &try_stmt.handlers {
                let ast::ExceptHandler::ExceptHandler(handler) = handler;
                bodies.push(&handler.body);
            }
            bodies.push(&try_stmt.orelse);
            bodies.push(&try_stmt.finalbody);
            (Some(Vec::new()), bodies)
        }
        Stmt::Match(match_stmt) => (
            Some(vec![&*match_stmt.subject]),
            match_stmt.cases.iter().map(|case| case.body.as_slice()).collect(),
        ),
        Stmt::FunctionDef(_) | Stmt::ClassDef(_) => (Some(Vec::new()), Vec::new()),
        _ => (None, Vec::new()),
    }
}

/// What a loop's own body does (nested loops and functions excluded), for the loop rules.
fn loop_frame<'a>(body: &'a [Stmt], imports: &Imports) -> LoopFrame<'a> {
    let mut frame = LoopFrame {
        body,
        backward_calls: Vec::new(),
        steps: Vec::new(),
        guards: Vec::new(),
        all_calls: pyast::calls_in(body),
    };
    direct(body, false, imports, &mut frame);
    frame
}

fn direct<'a>(body: &'a [Stmt], in_if: bool, imports: &Imports, frame: &mut LoopFrame<'a>) {
    for stmt in body {
        match stmt {
            Stmt::For(_) | Stmt::While(_) | Stmt::FunctionDef(_) | Stmt::ClassDef(_) => {}
            Stmt::If(if_stmt) => {
                if names::is_accumulation_test(&if_stmt.test)
                    && pyast::calls_in(&if_stmt.body).iter().any(|c| names::is_optimizer_step(c))
                {
                    frame.guards.push(if_stmt);
                }
                direct_exprs(stmt, in_if, imports, frame);
                direct(&if_stmt.body, true, imports, frame);
                for clause in &if_stmt.elif_else_clauses {
                    direct(&clause.body, true, imports, frame);
                }
            }
            _ => {
                direct_exprs(stmt, in_if, imports, frame);
                for child in children(stmt).1 {
                    direct(child, in_if, imports, frame);
                }
            }
        }
    }
}

fn direct_exprs<'a>(stmt: &'a Stmt, in_if: bool, imports: &Imports, frame: &mut LoopFrame<'a>) {
    let mut on_expr = |expr: &'a Expr| {
        if let Expr::Call(call) = expr {
            if names::is_backward_call(call, imports) {
                frame.backward_calls.push(call);
            }
            if names::is_optimizer_step(call) {
                frame.steps.push((call, in_if));
            }
        }
    };
    match children(stmt).0 {
        Some(exprs) => {
            for expr in exprs {
                pyast::walk_expr(expr, &mut on_expr);
            }
        }
        None => pyast::walk_stmts(std::slice::from_ref(stmt), &mut |_| {}, &mut on_expr),
    }
}

/// Whether a name contains `scaler` in any case, without allocating (called for every name).
fn mentions_scaler(name: &str) -> bool {
    name.len() >= 6 && name.as_bytes().windows(6).any(|w| w.eq_ignore_ascii_case(b"scaler"))
}

fn gather_facts<'a>(body: &'a [Stmt], imports: &Imports) -> FileFacts<'a> {
    let mut facts =
        FileFacts { modules: crate::modules::module_names(body, imports), ..FileFacts::default() };
    let mut no_grad_bodies: Vec<&'a [Stmt]> = Vec::new();
    pyast::walk_stmts(
        body,
        &mut |stmt| {
            if let Stmt::With(with) = stmt
                && with.items.iter().any(|item| names::disables_grad(&item.context_expr, imports))
            {
                no_grad_bodies.push(&with.body);
            }
        },
        &mut |expr| match expr {
            Expr::Name(name) if mentions_scaler(name.id.as_str()) => {
                facts.has_scaler = true;
            }
            Expr::Attribute(attribute) if mentions_scaler(attribute.attr.id.as_str()) => {
                facts.has_scaler = true;
            }
            Expr::Call(call) => {
                if let Some((_, "backward")) = pyast::method_call(call)
                    && call.arguments.args.is_empty()
                {
                    facts.has_backward = true;
                }
                if let Some(dtype) = names::autocast_dtype(call, imports) {
                    facts.autocasts.push((call, dtype));
                }
                if facts.batchnorm.is_none() {
                    let name = imports.resolve(&call.func).or_else(|| pyast::dotted(&call.func));
                    if name.is_some_and(|name| {
                        let last = name.rsplit('.').next().unwrap_or(&name);
                        matches!(
                            last,
                            "BatchNorm1d" | "BatchNorm2d" | "BatchNorm3d" | "SyncBatchNorm"
                        )
                    }) {
                        facts.batchnorm = Some(call.range());
                    }
                }
            }
            _ => {}
        },
    );
    for body in no_grad_bodies {
        for call in pyast::calls_in(body) {
            if let Some(name) = pyast::last_segment(&call.func) {
                facts.called_without_grad.insert(name.to_string());
            }
        }
    }
    facts
}
