//! Which names hold a `torch.nn.Module`, known by what the file does with them rather than by
//! what they are called: a name is a module if it is
//!
//! - put in evaluation or training mode: `x.eval()` (no arguments), `x.train()` /
//!   `x.train(False)` (not a `trainer`);
//! - asked for its parameters: `x.parameters()` / `x.named_parameters()` anywhere (handed to an
//!   optimizer, to `clip_grad_norm_`, counted);
//! - moved in place, its result unused: `x.to(device)` / `x.cuda()` as a statement (a tensor's
//!   `.to()` returns a new tensor, so only a module is moved this way);
//! - assigned an instance of an `nn.Module` subclass defined in the file (directly or through
//!   another such class), or of `torch.nn.*`, possibly moved on the way
//!   (`model = Net().to(device)`);
//! - assigned the result of `from_pretrained(...)` of a class that builds a model (not a
//!   tokenizer, config, processor, feature extractor, scheduler or pipeline).
//!
//! Names (`model`, `net`, `self.encoder`, ...) stay a fallback in [`crate::names`].

use std::collections::HashSet;

use crate::pyast::{self, Expr, Imports, Stmt, ast};

/// Base classes that make a class a module.
const MODULE_BASES: &[&str] = &[
    "torch.nn.Module",
    "torch.nn.modules.module.Module",
    "lightning.LightningModule",
    "lightning.pytorch.LightningModule",
    "pytorch_lightning.LightningModule",
    "transformers.PreTrainedModel",
];

/// Parts of a class name whose `from_pretrained` does not build a model.
const NOT_MODELS: &[&str] =
    &["Tokenizer", "Config", "Processor", "Extractor", "Scheduler", "Pipeline", "Dataset"];

/// The dotted names (`model`, `self.backbone`) the file uses as modules.
pub(crate) fn module_names(body: &[Stmt], imports: &Imports) -> HashSet<String> {
    let classes = module_classes(body, imports);
    let mut modules = HashSet::new();
    let mut used = Vec::new();
    pyast::walk_stmts(
        body,
        &mut |stmt| match stmt {
            Stmt::Expr(expr_stmt) => {
                if let Expr::Call(call) = expr_stmt.value.as_ref()
                    && let Some((receiver, method)) = pyast::method_call(call)
                    && moves_in_place(call, method)
                {
                    insert(&mut modules, receiver);
                }
            }
            Stmt::Assign(assign) if builds_module(&assign.value, &classes, imports) => {
                for target in &assign.targets {
                    insert(&mut modules, target);
                }
            }
            Stmt::AnnAssign(ann)
                if ann.value.as_deref().is_some_and(|v| builds_module(v, &classes, imports)) =>
            {
                insert(&mut modules, &ann.target);
            }
            _ => {}
        },
        &mut |expr| {
            if let Expr::Call(call) = expr
                && let Some((receiver, method)) = pyast::method_call(call)
                && sets_mode_or_lists_parameters(call, receiver, method)
            {
                used.push(receiver);
            }
        },
    );
    for receiver in used {
        insert(&mut modules, receiver);
    }
    modules
}

fn insert(modules: &mut HashSet<String>, expr: &Expr) {
    if let Some(name) = pyast::dotted(expr) {
        modules.insert(name);
    }
}

/// `x.to(...)`, `x.cuda()`, `x.cpu()` whose result is dropped.
fn moves_in_place(call: &ast::ExprCall, method: &str) -> bool {
    match method {
        "to" => !call.arguments.args.is_empty() || !call.arguments.keywords.is_empty(),
        "cuda" | "cpu" => true,
        _ => false,
    }
}

/// `x.eval()`, `x.train()`, `x.train(True/False)`, `x.parameters()`, `x.named_parameters()`.
fn sets_mode_or_lists_parameters(call: &ast::ExprCall, receiver: &Expr, method: &str) -> bool {
    let arguments = &call.arguments;
    match method {
        "eval" => arguments.args.is_empty() && arguments.keywords.is_empty(),
        "train" => {
            let is_trainer = pyast::last_segment(receiver)
                .is_some_and(|name| name.to_ascii_lowercase().ends_with("trainer"));
            let plain = arguments.keywords.is_empty()
                && match &*arguments.args {
                    [] => true,
                    [flag] => matches!(flag, Expr::BooleanLiteral(_)),
                    _ => false,
                };
            plain && !is_trainer
        }
        "parameters" | "named_parameters" => true,
        _ => false,
    }
}

/// Whether `value` builds (or fetches) a module: an instance of a module class, a
/// `from_pretrained` model, or such a value moved with `.to(...)` / `.cuda()`.
fn builds_module(value: &Expr, classes: &HashSet<String>, imports: &Imports) -> bool {
    let Expr::Call(call) = value else { return false };
    if let Some((receiver, method)) = pyast::method_call(call) {
        if matches!(method, "to" | "cuda" | "cpu" | "half" | "float" | "bfloat16" | "eval") {
            return builds_module(receiver, classes, imports);
        }
        if method == "from_pretrained" {
            return pyast::last_segment(receiver)
                .is_some_and(|class| !NOT_MODELS.iter().any(|part| class.contains(part)));
        }
    }
    if let Some(name) = pyast::dotted(&call.func)
        && classes.contains(&name)
    {
        return true;
    }
    imports.resolve(&call.func).is_some_and(|qualified| {
        qualified.strip_prefix("torch.nn.").is_some_and(|class| {
            !class.contains('.') && class.starts_with(|c: char| c.is_ascii_uppercase())
        })
    })
}

/// Names of the classes defined in the file that subclass a module, directly or through
/// another class of the file.
fn module_classes(body: &[Stmt], imports: &Imports) -> HashSet<String> {
    let mut defined: Vec<&ast::StmtClassDef> = Vec::new();
    pyast::walk_stmts(
        body,
        &mut |stmt| {
            if let Stmt::ClassDef(class) = stmt {
                defined.push(class);
            }
        },
        &mut |_| {},
    );
    let mut classes = HashSet::new();
    loop {
        let before = classes.len();
        for class in &defined {
            let Some(arguments) = &class.arguments else { continue };
            let is_module = arguments.args.iter().any(|base| {
                imports.resolve(base).is_some_and(|name| MODULE_BASES.contains(&name.as_str()))
                    || pyast::dotted(base).is_some_and(|name| {
                        classes.contains(&name) || name == "nn.Module" || name == "Module"
                    })
            });
            if is_module {
                classes.insert(class.name.to_string());
            }
        }
        if classes.len() == before {
            return classes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::module_names;
    use crate::pyast::{Imports, parse};

    fn names(code: &str) -> Vec<String> {
        let parsed = parse(code, None);
        let imports = Imports::collect(&parsed.module.body);
        let mut names: Vec<String> =
            module_names(&parsed.module.body, &imports).into_iter().collect();
        names.sort();
        names
    }

    #[test]
    fn modules_are_known_by_what_the_code_does_with_them() {
        let code = r#"
import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

class Block(nn.Module):
    pass

class Tower(Block):
    pass

modell.eval()
a.train()
b.train(False)
opt = torch.optim.AdamW(c.parameters(), lr=1e-4)
d.to(device)
e = Tower().to(device)
f = AutoModelForCausalLM.from_pretrained("gpt2")
g = nn.Linear(4, 4)
class Wrapper:
    def __init__(self):
        self.backbone = Block()
"#;
        assert_eq!(
            names(code),
            ["a", "b", "c", "d", "e", "f", "g", "modell", "self.backbone"].map(String::from)
        );
    }

    #[test]
    fn tensors_tokenizers_and_trainers_are_not_modules() {
        let code = r#"
import torch
from transformers import AutoTokenizer, AutoConfig
x = x.to(device)
y = torch.zeros(3).to(device)
tok = AutoTokenizer.from_pretrained("gpt2")
cfg = AutoConfig.from_pretrained("gpt2")
trainer.train()
trainer.train(resume_from_checkpoint=True)
expr.eval("a + b")
df.train(data)
nn_out = torch.nn.functional.relu(x)
"#;
        assert_eq!(names(code), Vec::<String>::new());
    }
}
