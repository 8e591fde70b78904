//! Every single change to the user's run, with the device memory it saves and what it costs:
//! the seed article's "list of remedies in the order of what they cost", made concrete for
//! one run.

use serde::Serialize;

use super::cost::Cost;
use super::lever::{Lever, MathNote};
use super::search::{Search, device};
use super::{Change, PlanError, PlanRequest};
use crate::estimate::estimate_on;
use crate::units::Bytes;

/// One change to the user's run, alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Remedy {
    /// The change.
    pub change: Change,
    /// Device memory with it (what nvidia-smi would show).
    pub device_used: Bytes,
    /// Device memory it saves against the user's run (negative: it costs memory).
    pub saves: i128,
    /// Whether the run fits with this change alone.
    pub fits: bool,
    /// Usable memory minus device use with it.
    pub headroom: i128,
    /// Its cost.
    pub cost: Cost,
    /// What it does to the maths.
    pub notes: Vec<MathNote>,
}

/// Every single change the levers offer for this run (under the constraints), applied alone
/// to the user's setup at its micro-batch, cheapest first (then the most memory saved). The
/// micro-batch lever gives two: half the micro-batch with twice the accumulation, and the
/// largest micro-batch that fits with accumulation alone.
pub fn remedies(req: &PlanRequest<'_>) -> Result<Vec<Remedy>, PlanError> {
    let mut search = Search::new(req)?;
    let options = search.lever_options()?;
    let user = search.user.clone();
    let base_used = search.baseline.verdict.device_used.get();
    let per_gpu = req.global_batch / req.data_parallel;
    let micro = user.setup.micro_batch;
    let at_user =
        if per_gpu.is_multiple_of(micro) { search.at(&user, micro) } else { user.clone() };
    let mut configs = Vec::new();
    for (_, settings) in &options {
        for s in settings.iter().skip(1) {
            let mut c = at_user.clone();
            s.apply(&mut c);
            if super::lever::compatible(&c) {
                configs.push(c);
            }
        }
    }
    if req.constraints.may_change(Lever::MicroBatch) {
        let smaller: Vec<u64> = super::search::divisors(per_gpu)
            .into_iter()
            .filter(|&m| m < micro && per_gpu / m <= crate::estimate::MAX_GRAD_ACCUM)
            .collect();
        if let Some(&half) = smaller.iter().rev().find(|&&m| m <= micro / 2) {
            configs.push(search.at(&user, half));
        }
        // The largest smaller micro-batch that fits by accumulation alone.
        for &m in smaller.iter().rev() {
            let c = search.at(&user, m);
            let Ok(e) = estimate_on(req.spec, &c.setup, &device(req, &c)) else { continue };
            if super::search::judge(req, &e).fits {
                if !configs.contains(&c) {
                    configs.push(c);
                }
                break;
            }
        }
    }
    let mut out = Vec::new();
    for c in configs {
        let Ok(estimate) = estimate_on(req.spec, &c.setup, &device(req, &c)) else { continue };
        let verdict = super::search::judge(req, &estimate);
        let cost = search.cost_of(&c, verdict.device_used);
        let changes = search.changes(&c);
        // The one change (accumulation that merely restates the global batch is not one).
        let Some(change) = changes
            .into_iter()
            .rev()
            .find(|ch| ch.lever != Lever::MicroBatch || c.setup.micro_batch != micro)
        else {
            continue;
        };
        out.push(Remedy {
            change,
            device_used: verdict.device_used,
            saves: i128::from(base_used) - i128::from(verdict.device_used.get()),
            fits: verdict.fits,
            headroom: verdict.headroom,
            cost,
            notes: super::lever::math_notes(&user, &c),
        });
    }
    out.sort_by(|a, b| a.cost.cost.total_cmp(&b.cost.cost).then(b.saves.cmp(&a.saves)));
    Ok(out)
}
