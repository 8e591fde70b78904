//! The search behind [`plan`]: configurations of the levers × the micro-batches that make the
//! global batch, cheapest first, each decided by the whole-card verdict on a full estimate.

use std::collections::HashMap;

use super::cost::{self, ModelFacts, Rates};
use super::lever::{self, Config, Lever, LeverContext, Setting};
use super::{
    Baseline, Change, Plan, PlanError, PlanOutcome, PlanRequest, Requirement, SearchStats,
};
use crate::card::{self, CardBudget, CardVerdict};
use crate::device::Device;
use crate::estimate::{Estimate, EstimateError, MAX_GRAD_ACCUM, MAX_MICRO_BATCH, estimate_on};
use crate::setup::{Lora, TrainSetup};
use crate::units::Bytes;

/// Costs within this relative distance are equal.
const EPS: f64 = 1e-9;

/// Reserved-but-unallocated memory worth `expandable_segments` as a change: 2 % of the card's
/// usable memory at the user's own setup.
const FRAGMENTATION_WORTH_PERCENT: u64 = 2;

/// How many of the closest misses to report when nothing fits.
const CLOSEST: usize = 3;

/// Searches the setups that keep the global batch and sequence length for those that fit.
pub fn plan(req: &PlanRequest<'_>) -> Result<PlanOutcome, PlanError> {
    let mut search = Search::new(req)?;
    let configs = search.configurations()?;
    search.run(configs)
}

/// One lever configuration that survived the model-states bound.
struct Survivor {
    config: Config,
    optimistic: f64,
    changes: usize,
}

/// A configuration that does not fit, and by how much at least.
struct Miss {
    config: Config,
    device_at_least: u64,
}

/// What one candidate (configuration × micro-batch) turned out to be.
enum Probe {
    /// Its allocated peak alone overflows the card (so its reserved peak does too).
    Refused { device_at_least: u64 },
    /// Fully estimated.
    Estimated(Box<Estimate>, CardVerdict),
}

pub(super) struct Search<'r, 'a> {
    pub(super) req: &'r PlanRequest<'a>,
    pub(super) user: Config,
    facts: ModelFacts,
    rates: Rates,
    /// Sequences per GPU per step.
    per_gpu: u64,
    /// The micro-batches that divide `per_gpu`, ascending.
    micros: Vec<u64>,
    /// Seconds of the user's own step (the reference of relative step times).
    reference_seconds: f64,
    trainable: HashMap<Option<Lora>, f64>,
    pub(super) baseline: Baseline,
    stats: SearchStats,
}

impl<'r, 'a> Search<'r, 'a> {
    pub(super) fn new(req: &'r PlanRequest<'a>) -> Result<Search<'r, 'a>, PlanError> {
        let dp = req.data_parallel;
        if dp == 0 {
            return Err(PlanError::NoGpus);
        }
        let global = req.global_batch;
        if global == 0 || global > MAX_MICRO_BATCH * MAX_GRAD_ACCUM {
            return Err(PlanError::GlobalBatchOutOfRange(global));
        }
        if global % dp != 0 {
            let nearest = super::nearest_divisible(global, dp);
            return Err(PlanError::GlobalBatchNotDivisible { global, gpus: dp, nearest });
        }
        let per_gpu = global / dp;
        let user = Config { setup: req.setup.clone(), alloc: req.alloc };
        let micros: Vec<u64> = if req.constraints.keep.contains(&Lever::MicroBatch) {
            let m = user.setup.micro_batch;
            if m == 0 || per_gpu % m != 0 || per_gpu / m > MAX_GRAD_ACCUM {
                return Err(PlanError::KeptMicroBatch { micro_batch: m, global, gpus: dp });
            }
            vec![m]
        } else {
            divisors(per_gpu)
                .into_iter()
                .filter(|&m| m <= MAX_MICRO_BATCH && per_gpu / m <= MAX_GRAD_ACCUM)
                .collect()
        };
        let device = device(&user);
        let estimate = estimate_on(req.spec, &user.setup, &device)?;
        let verdict = card::judge(&estimate, &req.budget);
        let facts = ModelFacts::of(req.spec);
        let rates = Rates::of(req.gpu.tflops);
        let mut search = Search {
            req,
            facts,
            rates,
            per_gpu,
            micros,
            reference_seconds: 0.0,
            trainable: HashMap::new(),
            baseline: Baseline { estimate, verdict, step_seconds: None },
            user,
            stats: SearchStats::default(),
        };
        // The user's step, at its micro-batch, over the global batch (a fractional number of
        // micro-batches if it does not divide: the step time scales with it).
        let mut reference = search.user.setup.clone();
        reference.grad_accum = 1;
        let per_micro = search.seconds(&Config { setup: reference, alloc: search.user.alloc });
        search.reference_seconds =
            per_micro * per_gpu as f64 / search.user.setup.micro_batch.max(1) as f64;
        search.baseline.step_seconds = rates.known.then_some(search.reference_seconds);
        Ok(search)
    }

    /// The levers' settings under the constraints: the user's own first.
    pub(super) fn lever_options(&self) -> Result<Vec<(Lever, Vec<Setting>)>, PlanError> {
        let req = self.req;
        let usable = req.budget.usable().get();
        let worth = usable / 100 * FRAGMENTATION_WORTH_PERCENT;
        let cx = LeverContext {
            spec: req.spec,
            setup: &self.user.setup,
            alloc: &self.user.alloc,
            gpu: &req.gpu,
            fragmentation_matters: self.baseline.verdict.fragmentation.get() >= worth,
        };
        let c = &req.constraints;
        for lever in &c.allow {
            if c.keep.contains(lever) {
                return Err(PlanError::AllowedAndRefused { lever: *lever, how: "kept" });
            }
            if c.forbid.iter().any(|f| *f == lever.name()) {
                return Err(PlanError::AllowedAndRefused { lever: *lever, how: "forbidden" });
            }
        }
        let mut options = Vec::new();
        for lever in Lever::ALL.into_iter().filter(|l| *l != Lever::MicroBatch) {
            let all = lever.settings(&cx);
            let own = all[0].clone();
            let settings = if c.may_change(lever) {
                let allowed: Vec<Setting> = all.iter().filter(|s| c.permits(s)).cloned().collect();
                if allowed.is_empty() {
                    let names: Vec<String> = all.iter().map(Setting::name).collect();
                    return Err(PlanError::NothingLeft { lever, settings: names.join(", ") });
                }
                allowed
            } else {
                if !c.permits(&own) {
                    return Err(PlanError::KeptAndForbidden { lever, setting: own.name() });
                }
                vec![own]
            };
            options.push((lever, settings));
        }
        Ok(options)
    }

    /// Every configuration of the levers (incompatible combinations left out).
    fn configurations(&mut self) -> Result<Vec<Config>, PlanError> {
        let options = self.lever_options()?;
        let mut configs = vec![self.user.clone()];
        for (_, settings) in &options {
            let mut next = Vec::with_capacity(configs.len() * settings.len());
            for c in &configs {
                for s in settings {
                    let mut c = c.clone();
                    s.apply(&mut c);
                    next.push(c);
                }
            }
            configs = next;
        }
        configs.retain(lever::compatible);
        self.stats.configurations = configs.len() as u64;
        self.stats.candidates = configs.len() as u64 * self.micros.len() as u64;
        Ok(configs)
    }

    fn run(mut self, configs: Vec<Config>) -> Result<PlanOutcome, PlanError> {
        let req = self.req;
        let m = self.micros.len() as u64;
        let usable = req.budget.usable().get();
        let context = req.budget.cuda_context.get();
        let mut misses: Vec<Miss> = Vec::new();
        let mut survivors: Vec<Survivor> = Vec::new();
        for config in configs {
            let smallest = self.at(&config, self.micros[0]);
            let bound = match crate::estimate::peak_lower_bound(
                req.spec,
                &smallest.setup,
                &device(&config),
            ) {
                Ok(b) => b.get().saturating_add(context),
                Err(EstimateError::Overflow) => u64::MAX,
                Err(_) => {
                    // A combination the model cannot take (LoRA targets it lacks).
                    self.stats.pruned += m;
                    continue;
                }
            };
            if bound > usable {
                self.stats.pruned += m;
                misses.push(Miss { config, device_at_least: bound });
                continue;
            }
            let largest = self.at(&config, *self.micros.last().expect("a divisor"));
            // A lower bound of any plan of this config: the largest micro-batch is the fastest
            // and changes the fewest levers.
            let changes = self.changes(&largest).len();
            let optimistic =
                cost::ranking_cost(self.seconds(&largest) / self.reference_seconds, changes);
            survivors.push(Survivor { config, optimistic, changes });
        }
        survivors
            .sort_by(|a, b| a.optimistic.total_cmp(&b.optimistic).then(a.changes.cmp(&b.changes)));
        let mut frontier: Vec<Plan> = Vec::new();
        let mut rest = survivors.into_iter();
        while let Some(s) = rest.next() {
            if self.cannot_improve(&frontier, s.optimistic) {
                self.stats.pruned += m * (1 + rest.len() as u64);
                break;
            }
            self.search_micro_batch(s.config, &mut frontier, &mut misses);
        }
        frontier.sort_by(|a, b| {
            a.cost.cost.total_cmp(&b.cost.cost).then(b.verdict.headroom.cmp(&a.verdict.headroom))
        });
        frontier.truncate(req.top.max(1));
        let (closest, requirement) =
            if frontier.is_empty() { self.closest(misses) } else { (Vec::new(), None) };
        debug_assert_eq!(self.stats.candidates, self.stats.simulated + self.stats.pruned);
        Ok(PlanOutcome {
            baseline: self.baseline,
            plans: frontier,
            closest,
            requirement,
            stats: self.stats,
        })
    }

    /// Whether the `top` cheapest plans found are all cheaper than anything a configuration
    /// costing at least `optimistic` can give (so it can neither enter nor dominate them).
    fn cannot_improve(&self, frontier: &[Plan], optimistic: f64) -> bool {
        let top = self.req.top.max(1);
        if frontier.len() < top {
            return false;
        }
        let mut costs: Vec<f64> = frontier.iter().map(|p| p.cost.cost).collect();
        costs.sort_by(f64::total_cmp);
        optimistic > costs[top - 1] * (1.0 + EPS)
    }

    /// The largest micro-batch of `config` that fits, by binary search over the divisors
    /// (memory grows with the micro-batch); its plan (and, near the limit, the next smaller
    /// one's) joins the frontier.
    fn search_micro_batch(
        &mut self,
        config: Config,
        frontier: &mut Vec<Plan>,
        misses: &mut Vec<Miss>,
    ) {
        let n = self.micros.len();
        let mut probes: HashMap<usize, Probe> = HashMap::new();
        let (mut lo, mut hi) = (None::<usize>, n);
        let mut lo_bound = 0usize;
        while hi > lo_bound {
            let mid = lo_bound + (hi - lo_bound) / 2;
            let probe = self.probe(&config, self.micros[mid]);
            let fits = matches!(&probe, Probe::Estimated(_, v) if v.fits);
            probes.insert(mid, probe);
            if fits {
                lo = Some(mid);
                lo_bound = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.stats.simulated += probes.len() as u64;
        self.stats.pruned += (n - probes.len()) as u64;
        let Some(best) = lo else {
            let device_at_least = match probes.remove(&0) {
                Some(Probe::Refused { device_at_least }) => device_at_least,
                Some(Probe::Estimated(_, v)) => v.device_used.get(),
                None => u64::MAX,
            };
            misses.push(Miss { config, device_at_least });
            return;
        };
        let Some(Probe::Estimated(estimate, verdict)) = probes.remove(&best) else {
            unreachable!("a fitting probe was estimated");
        };
        let plan = self.plan_of(&config, self.micros[best], *estimate, verdict);
        let penalised = plan.cost.near_limit_penalty > 0.0;
        insert(frontier, plan);
        if penalised && best > 0 {
            // Near the limit a smaller micro-batch may be faster: one more candidate.
            let micro = self.micros[best - 1];
            let probe = match probes.remove(&(best - 1)) {
                Some(p) => p,
                None => {
                    self.stats.simulated += 1;
                    self.stats.pruned -= 1;
                    self.probe(&config, micro)
                }
            };
            if let Probe::Estimated(estimate, verdict) = probe
                && verdict.fits
            {
                let plan = self.plan_of(&config, micro, *estimate, verdict);
                insert(frontier, plan);
            }
        }
    }

    /// One candidate: refused on its allocated peak, or fully estimated and judged.
    fn probe(&mut self, config: &Config, micro: u64) -> Probe {
        let req = self.req;
        let c = self.at(config, micro);
        let context = req.budget.cuda_context.get();
        let allocated_only = Device { allocator: None, ..Device::CUDA };
        match estimate_on(req.spec, &c.setup, &allocated_only) {
            Ok(e) => {
                let at_least = e.peak_allocated.get().saturating_add(context);
                if at_least > req.budget.usable().get() {
                    return Probe::Refused { device_at_least: at_least };
                }
            }
            Err(_) => return Probe::Refused { device_at_least: u64::MAX },
        }
        self.stats.replayed += 1;
        match estimate_on(req.spec, &c.setup, &device(&c)) {
            Ok(e) => {
                let v = card::judge(&e, &req.budget);
                Probe::Estimated(Box::new(e), v)
            }
            Err(_) => Probe::Refused { device_at_least: u64::MAX },
        }
    }

    /// The config at a micro-batch, with the accumulation that keeps the global batch.
    pub(super) fn at(&self, config: &Config, micro: u64) -> Config {
        let mut c = config.clone();
        c.setup.micro_batch = micro;
        c.setup.grad_accum = self.per_gpu / micro;
        c
    }

    /// Seconds per step of a config, without the near-limit penalty.
    pub(super) fn seconds(&mut self, c: &Config) -> f64 {
        let trainable = self.trainable_of(&c.setup);
        cost::step_seconds(&self.facts, &c.setup, trainable, &self.rates)
    }

    fn trainable_of(&mut self, setup: &TrainSetup) -> f64 {
        if setup.lora.is_none() && !setup.freeze.any() {
            return self.facts.parameters;
        }
        let spec = self.req.spec;
        *self.trainable.entry(setup.lora.clone()).or_insert_with(|| {
            crate::peft::parameter_counts(&spec.parameter_layout(), setup).0 as f64
        })
    }

    /// The cost of a config whose device use is known. A paged optimizer's state sits on
    /// the card as long as it fits there, and pages over PCIe every step for what does not.
    pub(super) fn cost_of(&mut self, c: &Config, device_used: Bytes) -> cost::Cost {
        let mut seconds = self.seconds(c);
        let visible = self.req.budget.cuda_visible.get().max(1);
        let mut used = device_used.get();
        if c.setup.optimizer == crate::setup::Optimizer::PagedAdamw8bit {
            let paged =
                crate::estimate::paged_state_bytes(self.req.spec, &c.setup).map_or(0, |b| b.get());
            let room = self.req.budget.usable().get().saturating_sub(used);
            seconds += cost::paging_seconds(paged.saturating_sub(room));
            used = used.saturating_add(paged.min(room));
        }
        let penalty = cost::near_limit_penalty(used as f64 / visible as f64);
        let seconds = seconds * (1.0 + penalty);
        let tokens = (self.req.global_batch * c.setup.seq_len) as f64;
        let relative = seconds / self.reference_seconds;
        cost::Cost {
            cost: cost::ranking_cost(relative, self.changes(c).len()),
            relative_step_time: relative,
            step_seconds: self.rates.known.then_some(seconds),
            tokens_per_second: self.rates.known.then_some(tokens / seconds),
            near_limit_penalty: penalty,
        }
    }

    pub(super) fn plan_of(
        &mut self,
        config: &Config,
        micro: u64,
        estimate: Estimate,
        verdict: CardVerdict,
    ) -> Plan {
        let c = self.at(config, micro);
        let cost = self.cost_of(&c, verdict.device_used);
        Plan {
            changes: self.changes(&c),
            notes: lever::math_notes(&self.user, &c),
            data_parallel: self.req.data_parallel,
            config: c,
            estimate,
            verdict,
            cost,
        }
    }

    /// What differs from the user's setup, in lever order.
    pub(super) fn changes(&self, c: &Config) -> Vec<Change> {
        let mut changes = Vec::new();
        let (u, p) = (&self.user.setup, &c.setup);
        if (u.micro_batch, u.grad_accum) != (p.micro_batch, p.grad_accum) {
            let dp = self.req.data_parallel;
            let show = |s: &TrainSetup| {
                if dp > 1 {
                    format!("{} × {} × {dp} GPUs", s.micro_batch, s.grad_accum)
                } else {
                    format!("{} × {}", s.micro_batch, s.grad_accum)
                }
            };
            changes.push(Change { lever: Lever::MicroBatch, from: show(u), to: show(p) });
        }
        for lever in Lever::ALL {
            let (Some(a), Some(b)) = (Setting::of(lever, &self.user), Setting::of(lever, c)) else {
                continue;
            };
            if a != b {
                changes.push(Change { lever, from: a.describe(), to: b.describe() });
            }
        }
        changes
    }

    /// When nothing fits: the closest misses, fully estimated at the smallest micro-batch, and
    /// what it would take.
    fn closest(&mut self, mut misses: Vec<Miss>) -> (Vec<Plan>, Option<Requirement>) {
        misses.sort_by_key(|m| m.device_at_least);
        let mut closest = Vec::new();
        for miss in misses.into_iter().take(CLOSEST) {
            let c = self.at(&miss.config, self.micros[0]);
            let Ok(estimate) = estimate_on(self.req.spec, &c.setup, &device(&c)) else {
                continue;
            };
            let verdict = card::judge(&estimate, &self.req.budget);
            closest.push(self.plan_of(&miss.config, self.micros[0], estimate, verdict));
        }
        closest.sort_by_key(|p| p.verdict.device_used);
        let requirement = closest.first().map(|p| self.requirement(p));
        (closest, requirement)
    }

    fn requirement(&self, p: &Plan) -> Requirement {
        let budget = &self.req.budget;
        let usable = budget.usable();
        let states = p.estimate.model_states;
        let needed = p.verdict.device_used;
        let per_gpu = budget.for_allocator().get().max(1);
        let needs_bf16 = p.config.setup.precision.needs_bf16();
        let mut gpus = crate::gpu::catalog();
        gpus.sort_by_key(crate::gpu::Gpu::cuda_visible);
        let larger_gpu = gpus
            .into_iter()
            .filter(|g| g.bf16 || !needs_bf16)
            .find(|g| {
                let visible = g.cuda_visible();
                CardBudget::new(visible, budget.cuda_context, card::default_margin(visible))
                    .is_ok_and(|b| needed <= b.usable())
            })
            .map(|g| g.name);
        Requirement {
            device_needed: needed,
            usable,
            model_states: states,
            gpus_of_this_kind: states.get().div_ceil(per_gpu).max(2),
            larger_gpu,
        }
    }
}

/// The device a config runs on: CUDA with its allocator settings.
pub(super) fn device(c: &Config) -> Device {
    Device { allocator: Some(c.alloc), ..Device::CUDA }
}

/// Adds a plan to the frontier unless another dominates it (as cheap or cheaper, as much
/// headroom or more, and better in one of them or as good with fewer changes), removing those
/// it dominates.
fn insert(frontier: &mut Vec<Plan>, plan: Plan) {
    if frontier.iter().any(|q| dominates(q, &plan)) {
        return;
    }
    frontier.retain(|q| !dominates(&plan, q));
    frontier.push(plan);
}

/// Whether `a` makes `b` not worth showing: as cheap or cheaper (by the ranking cost, which
/// charges every change), with as much headroom or more, and better in one of them (or as
/// good in both with no more changes).
pub(super) fn dominates(a: &Plan, b: &Plan) -> bool {
    let (ca, cb) = (a.cost.cost, b.cost.cost);
    let (ha, hb) = (a.verdict.headroom, b.verdict.headroom);
    if ca > cb * (1.0 + EPS) || ha < hb {
        return false;
    }
    ca < cb * (1.0 - EPS) || ha > hb || a.changes.len() <= b.changes.len()
}

/// The divisors of `n`, ascending.
pub(super) fn divisors(n: u64) -> Vec<u64> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut d = 1u64;
    while d.saturating_mul(d) <= n {
        if n % d == 0 {
            small.push(d);
            if d != n / d {
                large.push(n / d);
            }
        }
        d += 1;
    }
    small.extend(large.into_iter().rev());
    small
}
