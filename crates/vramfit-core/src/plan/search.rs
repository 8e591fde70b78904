//! The search behind [`plan`]: configurations of the levers × the micro-batches that make the
//! global batch, cheapest first, each decided by the whole-card verdict on a full estimate.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;

use super::cost::{self, ModelFacts, Rates};
use super::lever::{self, Config, Lever, LeverContext, Setting};
use super::{
    Baseline, Change, Plan, PlanError, PlanOutcome, PlanRequest, Requirement, SearchStats,
};
use crate::allocator::{AllocConf, Recording, Reserved};
use crate::card::{self, CardBudget, CardVerdict};
use crate::device::Device;
use crate::estimate::{Estimate, MAX_GRAD_ACCUM, MAX_MICRO_BATCH, estimate_on};
use crate::setup::{Lora, TrainSetup};
use crate::units::Bytes;

/// Costs within this relative distance are equal.
const EPS: f64 = 1e-9;

/// Reserved-but-unallocated memory worth `expandable_segments` as a change: 2 % of the card's
/// usable memory at the user's own setup.
const FRAGMENTATION_WORTH_PERCENT: u64 = 2;

/// How many of the closest misses to report when nothing fits.
const CLOSEST: usize = 3;

/// The most bytes of recorded allocation streams a search keeps for later full estimates (a
/// 70B model's stream is 0.6 to 1.6 MB); beyond it, a full estimate simulates again.
const KEPT_STREAM_BYTES: usize = 128 << 20;

/// A stream replayed, and what the replay gave.
type Replayed = (Rc<Stepped>, Reserved);

/// A candidate's simulated step and its allocation stream, kept from the simulation of its
/// allocated peak for its full estimate (only the caching-allocator replay is left then).
struct Stepped {
    step: crate::step::StepResult,
    recording: Recording,
    fingerprint: u64,
    /// Whether the search keeps it (within [`KEPT_STREAM_BYTES`]).
    kept: bool,
}

/// Searches the setups that keep the global batch and sequence length for those that fit.
pub fn plan(req: &PlanRequest<'_>) -> Result<PlanOutcome, PlanError> {
    plan_with(req, true)
}

/// [`plan`] without the activation bound: the search as it was before it, which decided every
/// configuration it visited by simulating it. The same plans, slower: for comparison (a test
/// holds the two to the same plans; `cargo bench -p vramfit-core --bench plan -- --once
/// --before` counts its work).
pub fn plan_without_activation_bound(req: &PlanRequest<'_>) -> Result<PlanOutcome, PlanError> {
    plan_with(req, false)
}

/// [`plan`], with the activation bound (`fast`) or without it.
fn plan_with(req: &PlanRequest<'_>, fast: bool) -> Result<PlanOutcome, PlanError> {
    let mut search = Search::new(req)?;
    search.fast = fast;
    let configs = search.configurations()?;
    search.run(configs)
}

/// One lever configuration that survived the model-states bound.
struct Survivor {
    config: Config,
    states: crate::estimate::ModelStates,
    optimistic: f64,
    changes: usize,
    /// How many of the micro-batches (the smallest ones) the lower bound lets through.
    limit: usize,
}

/// A configuration in the best-first queue, by its cost bound.
#[derive(Debug, Clone, Copy)]
struct Queued {
    bound: f64,
    changes: usize,
    id: usize,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bound
            .total_cmp(&other.bound)
            .then(self.changes.cmp(&other.changes))
            .then(self.id.cmp(&other.id))
    }
}

/// A configuration's progress: the micro-batches it simulated, and once its allocated peak
/// was searched, the largest micro-batch that passed.
struct Entry {
    config: Config,
    states: crate::estimate::ModelStates,
    touched: Vec<bool>,
    /// The largest micro-batch the activation bound lets through, once computed.
    bounded: Option<usize>,
    top: Option<usize>,
}

/// What the model states depend on: the levers that decide parameters, gradients and
/// optimizer state (not the micro-batch, attention, checkpointing, loss or allocator).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StatesKey {
    precision: crate::setup::Precision,
    optimizer: crate::setup::Optimizer,
    state_dtype: Option<crate::units::DType>,
    lora: Option<Lora>,
    quantization: Option<crate::setup::Quantization>,
    freeze: crate::setup::Freeze,
    parallel: crate::parallel::Parallel,
}

impl StatesKey {
    fn of(s: &TrainSetup) -> StatesKey {
        StatesKey {
            precision: s.precision,
            optimizer: s.optimizer,
            state_dtype: s.optimizer_state_dtype,
            lora: s.lora.clone(),
            quantization: s.quantization.clone(),
            freeze: s.freeze,
            parallel: s.parallel,
        }
    }
}

/// A configuration that does not fit, and by how much at least.
struct Miss {
    config: Config,
    device_at_least: u64,
    /// `device_at_least` is the activation bound at the smallest micro-batch, where a search
    /// without it has the allocated peak: refined to it when the misses are ranked.
    refine: bool,
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
    /// Allocated peaks (plus context) by setup: the allocator settings do not change them, so
    /// configurations that differ only there share the simulation.
    allocated: HashMap<TrainSetup, u64>,
    /// The peaks of the step's own tensors ([`crate::estimate::activation_peak`]) by the
    /// setup that represents all those with the same activations ([`representative`]).
    own: HashMap<TrainSetup, Option<u64>>,
    /// Simulated steps with their allocation streams, by setup (the allocator settings do not
    /// change the stream).
    stepped: HashMap<TrainSetup, Rc<Stepped>>,
    /// Replays by stream fingerprint and allocator settings, with the stream replayed:
    /// a candidate whose stream equals one replayed under the same settings takes its result.
    replays: HashMap<(u64, AllocConf), Vec<Replayed>>,
    /// Bytes of the streams kept ([`KEPT_STREAM_BYTES`]).
    kept: usize,
    /// Whether to decide configurations by the activation bound before simulating them.
    fast: bool,
    pub(super) baseline: Baseline,
    stats: SearchStats,
}

impl<'r, 'a> Search<'r, 'a> {
    pub(super) fn new(req: &'r PlanRequest<'a>) -> Result<Search<'r, 'a>, PlanError> {
        if req.spec.is_encoder_decoder() {
            return Err(PlanError::EncoderDecoder(req.spec.architecture));
        }
        let dp = req.data_parallel;
        if dp == 0 {
            return Err(PlanError::NoGpus);
        }
        let global = req.global_batch;
        if global == 0 || global > MAX_MICRO_BATCH * MAX_GRAD_ACCUM {
            return Err(PlanError::GlobalBatchOutOfRange(global));
        }
        if !global.is_multiple_of(dp) {
            let nearest = super::nearest_divisible(global, dp);
            return Err(PlanError::GlobalBatchNotDivisible { global, gpus: dp, nearest });
        }
        let per_gpu = global / dp;
        let user = Config { setup: req.setup.clone(), alloc: req.alloc };
        let micros: Vec<u64> = if req.constraints.keep.contains(&Lever::MicroBatch) {
            let m = user.setup.micro_batch;
            if m == 0 || !per_gpu.is_multiple_of(m) || per_gpu / m > MAX_GRAD_ACCUM {
                return Err(PlanError::KeptMicroBatch { micro_batch: m, global, gpus: dp });
            }
            vec![m]
        } else {
            divisors(per_gpu)
                .into_iter()
                .filter(|&m| m <= MAX_MICRO_BATCH && per_gpu / m <= MAX_GRAD_ACCUM)
                .collect()
        };
        let device = device(req, &user);
        let estimate = estimate_on(req.spec, &user.setup, &device)?;
        let verdict = judge(req, &estimate);
        let facts = ModelFacts::of(req.spec);
        let rates = Rates::with_links(req.gpu.tflops, req.gpu.nvlink_gbps);
        let mut search = Search {
            req,
            facts,
            rates,
            per_gpu,
            micros,
            reference_seconds: 0.0,
            trainable: HashMap::new(),
            allocated: HashMap::new(),
            own: HashMap::new(),
            stepped: HashMap::new(),
            replays: HashMap::new(),
            kept: 0,
            fast: true,
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
                let allowed: Vec<Setting> =
                    all.iter().filter(|s| c.permits(s) && s.runs_on(&req.gpu)).cloned().collect();
                if allowed.is_empty() {
                    let names: Vec<String> = all.iter().map(Setting::name).collect();
                    return Err(PlanError::NothingLeft { lever, settings: names.join(", ") });
                }
                allowed
            } else {
                if !c.permits(&own) {
                    return Err(PlanError::KeptAndForbidden { lever, setting: own.name() });
                }
                if !own.runs_on(&req.gpu) {
                    let gpu = req.gpu.label.clone();
                    return Err(PlanError::KeptUnsupported { lever, setting: own.name(), gpu });
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
        // The model states depend on a few levers only: computed once per combination of them.
        let mut states: HashMap<StatesKey, Option<crate::estimate::ModelStates>> = HashMap::new();
        for config in configs {
            let smallest = self.at(&config, self.micros[0]);
            let key = StatesKey::of(&smallest.setup);
            let known = states.entry(key).or_insert_with(|| {
                // None: a combination the model cannot take (LoRA targets it lacks), one
                // that overflows, or one whose offload needs more host memory than a node has.
                crate::estimate::model_states_on(req.spec, &smallest.setup, &device(req, &config))
                    .ok()
                    .filter(|(_, host)| host_fits(req, host.as_ref()))
                    .map(|(states, _)| states)
            });
            let Some(known) = *known else {
                self.stats.pruned += m;
                misses.push(Miss { config, device_at_least: u64::MAX, refine: false });
                continue;
            };
            // The micro-batches whose lower bound fits (the bound grows with the micro-batch).
            let bound = |search: &Self, i: usize| {
                let c = search.at(&config, search.micros[i]);
                crate::estimate::peak_lower_bound(req.spec, &c.setup, &device(req, &c), &known)
                    .saturating_add(context)
            };
            let limit = (0..self.micros.len()).take_while(|&i| bound(&self, i) <= usable).count();
            self.stats.pruned += m - limit as u64;
            if limit == 0 {
                let device_at_least = bound(&self, 0);
                misses.push(Miss { config, device_at_least, refine: false });
                continue;
            }
            let largest = self.at(&config, self.micros[limit - 1]);
            // A lower bound of any plan of this config: its largest micro-batch is the fastest
            // and changes the fewest levers.
            let changes = self.changes(&largest).len();
            let optimistic =
                cost::ranking_cost(self.seconds(&largest) / self.reference_seconds, changes);
            survivors.push(Survivor { config, states: known, optimistic, changes, limit });
        }
        // Best first: the configuration with the lowest bound on its cost is taken next. Its
        // first bound assumes the largest micro-batch the model-states bound lets through; a
        // search on the allocated peak refines it (a configuration whose real micro-batch is
        // small falls back in the queue), and only a refined configuration is fully estimated.
        let mut queue: BinaryHeap<Reverse<Queued>> = BinaryHeap::new();
        let mut entries: Vec<Entry> = Vec::with_capacity(survivors.len());
        for (id, s) in survivors.into_iter().enumerate() {
            queue.push(Reverse(Queued { bound: s.optimistic, changes: s.changes, id }));
            let touched = vec![false; s.limit];
            entries.push(Entry {
                config: s.config,
                states: s.states,
                touched,
                bounded: None,
                top: None,
            });
        }
        let mut frontier: Vec<Plan> = Vec::new();
        while let Some(Reverse(q)) = queue.pop() {
            if self.cannot_improve(&frontier, q.bound) {
                self.count(&entries[q.id].touched);
                while let Some(Reverse(rest)) = queue.pop() {
                    self.count(&entries[rest.id].touched);
                }
                break;
            }
            let entry = &mut entries[q.id];
            let config = entry.config.clone();
            let states = entry.states;
            let mut touched = std::mem::take(&mut entry.touched);
            match entry.top {
                None if self.fast && entry.bounded.is_none() => {
                    match self.largest_by_bound(&config, &states, touched.len()) {
                        Err(device_at_least) => {
                            self.count(&touched);
                            misses.push(Miss { config, device_at_least, refine: true });
                        }
                        Ok(bounded) => {
                            // No micro-batch above `bounded` can fit; the cheapest of those up
                            // to it bounds the cost of whichever is the largest that fits.
                            let (bound, changes) = self.cheapest_up_to(&config, bounded);
                            let entry = &mut entries[q.id];
                            entry.bounded = Some(bounded);
                            entry.touched = touched;
                            queue.push(Reverse(Queued { bound, changes, id: q.id }));
                        }
                    }
                }
                None => {
                    match self.largest_by_allocated_from(&config, entry.bounded, &mut touched) {
                        Err(device_at_least) => {
                            self.count(&touched);
                            misses.push(Miss { config, device_at_least, refine: false });
                        }
                        Ok(top) => {
                            let c = self.at(&config, self.micros[top]);
                            let changes = self.changes(&c).len();
                            let bound = cost::ranking_cost(
                                self.seconds(&c) / self.reference_seconds,
                                changes,
                            );
                            let entry = &mut entries[q.id];
                            entry.top = Some(top);
                            entry.touched = touched;
                            queue.push(Reverse(Queued { bound, changes, id: q.id }));
                        }
                    }
                }
                Some(top) => {
                    self.fit_from(config, top, &mut touched, &mut frontier, &mut misses);
                    self.count(&touched);
                }
            }
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

    /// The largest micro-batch of `config` below `limit` (an index into the micro-batches)
    /// whose activation bound fits, by binary search (the bound grows with the micro-batch):
    /// none above it can fit. `Err`: none fits, with the bound at the smallest.
    fn largest_by_bound(
        &mut self,
        config: &Config,
        states: &crate::estimate::ModelStates,
        limit: usize,
    ) -> Result<usize, u64> {
        let usable = self.req.budget.usable().get();
        let (mut fitting, mut lo, mut hi) = (None::<usize>, 0usize, limit);
        let mut smallest = u64::MAX;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let at_least = self.activation_bound(config, states, self.micros[mid]);
            if mid == 0 {
                smallest = at_least;
            }
            if at_least <= usable {
                fitting = Some(mid);
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        fitting.ok_or(smallest)
    }

    /// The device use `config` at `micro` needs at least: its model states (`states`) and
    /// the peak of its own tensors, from one simulation shared by every configuration with the
    /// same activations ([`representative`]), with the context.
    fn activation_bound(
        &mut self,
        config: &Config,
        states: &crate::estimate::ModelStates,
        micro: u64,
    ) -> u64 {
        let req = self.req;
        let c = self.at(config, micro);
        let device = device(req, &c);
        let own = match representative(&c.setup) {
            Some(r) => match self.own.get(&r) {
                Some(&known) => known,
                None => {
                    let alone = Device { allocator: None, workspaces: &[], ..Device::CUDA };
                    let peak = crate::estimate::activation_peak(req.spec, &r, &alone).ok();
                    self.stats.activation_simulations += 1;
                    self.own.insert(r, peak);
                    peak
                }
            },
            None => None,
        };
        let bound = match own {
            Some(own) => {
                crate::estimate::peak_lower_bound_with(req.spec, &c.setup, &device, states, own)
            }
            None => crate::estimate::peak_lower_bound(req.spec, &c.setup, &device, states),
        };
        bound.saturating_add(req.budget.cuda_context.get())
    }

    /// The lowest cost bound of `config` at the micro-batches up to index `last`, and its
    /// changes.
    fn cheapest_up_to(&mut self, config: &Config, last: usize) -> (f64, usize) {
        let mut best = (f64::INFINITY, usize::MAX);
        for i in 0..=last {
            let c = self.at(config, self.micros[i]);
            let changes = self.changes(&c).len();
            let bound = cost::ranking_cost(self.seconds(&c) / self.reference_seconds, changes);
            if bound < best.0 || (bound == best.0 && changes < best.1) {
                best = (bound, changes);
            }
        }
        best
    }

    /// The largest micro-batch of `config` whose allocated peak fits: with the activation
    /// bound's largest (`bounded`), that one first (usually the answer), then a binary search
    /// below it; without, a binary search over all those `touched` covers.
    fn largest_by_allocated_from(
        &mut self,
        config: &Config,
        bounded: Option<usize>,
        touched: &mut [bool],
    ) -> Result<usize, u64> {
        let Some(top) = bounded else { return self.largest_by_allocated(config, touched) };
        let at_least = self.allocated_device_use(config, self.micros[top]);
        touched[top] = true;
        if at_least <= self.req.budget.usable().get() {
            return Ok(top);
        }
        if top == 0 {
            return Err(at_least);
        }
        self.largest_by_allocated(config, &mut touched[..top])
    }

    /// The largest micro-batch of `config` whose allocated peak fits (an index into the
    /// micro-batches), by binary search over those `touched` covers (memory grows with the
    /// micro-batch), on simulations without the caching allocator: they can only refuse, as
    /// the reserved peak is never below the allocated one. `Err`: none fits, with the device
    /// use the smallest needs at least.
    fn largest_by_allocated(
        &mut self,
        config: &Config,
        touched: &mut [bool],
    ) -> Result<usize, u64> {
        let (mut fitting, mut lo, mut hi) = (None::<usize>, 0usize, touched.len());
        let mut smallest = u64::MAX;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let at_least = self.allocated_device_use(config, self.micros[mid]);
            touched[mid] = true;
            if mid == 0 {
                smallest = at_least;
            }
            if at_least <= self.req.budget.usable().get() {
                fitting = Some(mid);
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        fitting.ok_or(smallest)
    }

    /// Full estimates of `config` from micro-batch index `top` downwards until one fits on the
    /// reserved peak (usually the first), stopping once a smaller one could no longer be among
    /// the cheapest; the plan that fits (and, near the limit, the next smaller one's) joins
    /// the frontier.
    fn fit_from(
        &mut self,
        config: Config,
        top: usize,
        touched: &mut [bool],
        frontier: &mut Vec<Plan>,
        misses: &mut Vec<Miss>,
    ) {
        let mut closest_miss = None;
        for i in (0..=top).rev() {
            let c = self.at(&config, self.micros[i]);
            let bound = cost::ranking_cost(
                self.seconds(&c) / self.reference_seconds,
                self.changes(&c).len(),
            );
            if self.cannot_improve(frontier, bound) {
                return;
            }
            touched[i] = true;
            let Some((estimate, verdict)) = self.full_estimate(&c) else { return };
            if !verdict.fits {
                closest_miss.get_or_insert(verdict.device_used.get());
                continue;
            }
            let plan = self.plan_of(&config, self.micros[i], estimate, verdict);
            let penalised = plan.cost.near_limit_penalty > 0.0;
            insert(frontier, plan);
            if penalised && i > 0 {
                // Near the limit a smaller micro-batch may be faster: one more candidate.
                let smaller = self.at(&config, self.micros[i - 1]);
                touched[i - 1] = true;
                if let Some((estimate, verdict)) = self.full_estimate(&smaller)
                    && verdict.fits
                {
                    let plan = self.plan_of(&config, self.micros[i - 1], estimate, verdict);
                    insert(frontier, plan);
                }
            }
            return;
        }
        if let Some(device_at_least) = closest_miss {
            misses.push(Miss { config, device_at_least, refine: false });
        }
    }

    /// Counts a configuration's candidates: simulated (touched) or pruned.
    fn count(&mut self, touched: &[bool]) {
        let simulated = touched.iter().filter(|t| **t).count() as u64;
        self.stats.simulated += simulated;
        self.stats.pruned += touched.len() as u64 - simulated;
    }

    /// The device use a candidate needs at least: its allocated peak (a simulation without
    /// the allocator replay) and the context.
    fn allocated_device_use(&mut self, config: &Config, micro: u64) -> u64 {
        let c = self.at(config, micro);
        if let Some(&known) = self.allocated.get(&c.setup) {
            return known;
        }
        // The step without the allocator's replay (the allocated peak is the step's), its
        // stream recorded for the full estimate that follows where it fits.
        let allocated_only =
            Device { allocator: None, workspaces: self.req.workspaces, ..Device::CUDA };
        let used =
            match crate::estimate::simulate_recorded(self.req.spec, &c.setup, &allocated_only) {
                Ok((step, recording)) => {
                    let used = step.peak.saturating_add(self.req.budget.cuda_context.get());
                    // Only a candidate that fits on its allocated peak is estimated in full.
                    if used <= self.req.budget.usable().get() {
                        self.keep(&c.setup, step, recording);
                    }
                    used
                }
                Err(_) => u64::MAX,
            };
        self.allocated.insert(c.setup, used);
        used
    }

    /// Keeps a simulated step and its stream for the setup's full estimate, within
    /// [`KEPT_STREAM_BYTES`].
    fn keep(
        &mut self,
        setup: &TrainSetup,
        step: crate::step::StepResult,
        recording: Recording,
    ) -> Rc<Stepped> {
        let fingerprint = recording.fingerprint();
        let bytes = recording.heap_bytes();
        let kept = self.kept + bytes <= KEPT_STREAM_BYTES;
        let stepped = Rc::new(Stepped { step, recording, fingerprint, kept });
        if kept {
            self.kept += bytes;
            self.stepped.insert(setup.clone(), Rc::clone(&stepped));
        }
        stepped
    }

    /// A candidate's full estimate (with the allocator replay) and verdict: what
    /// [`estimate_on`] gives for its setup and device. The step simulated for its allocated
    /// peak is not simulated again, and a stream replayed under the same settings is not
    /// replayed again (equal streams replay alike).
    fn full_estimate(&mut self, c: &Config) -> Option<(Estimate, CardVerdict)> {
        self.stats.replayed += 1;
        let stepped = match self.stepped.get(&c.setup) {
            Some(s) => Rc::clone(s),
            None => {
                let device = device(self.req, c);
                let (step, recording) =
                    crate::estimate::simulate_recorded(self.req.spec, &c.setup, &device).ok()?;
                self.keep(&c.setup, step, recording)
            }
        };
        let reserved = self.replay(&stepped, c.alloc);
        let e = crate::estimate::summarize(
            self.req.spec,
            &c.setup,
            stepped.step.clone(),
            Some(reserved),
        );
        let v = judge(self.req, &e);
        Some((e, v))
    }

    /// The caching allocator's replay of a stream under `conf`, or an equal stream's.
    fn replay(&mut self, stepped: &Rc<Stepped>, conf: AllocConf) -> Reserved {
        let key = (stepped.fingerprint, conf);
        if let Some(done) = self.replays.get(&key) {
            for (other, reserved) in done {
                if Rc::ptr_eq(other, stepped) || other.recording == stepped.recording {
                    self.stats.replays_shared += 1;
                    return *reserved;
                }
            }
        }
        let reserved = crate::allocator::replay(&stepped.recording, conf);
        if stepped.kept {
            self.replays.entry(key).or_default().push((Rc::clone(stepped), reserved));
        }
        reserved
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
    /// the card as long as it fits there, and pages over PCIe every step for what does not;
    /// near the card's limit the step slows down ([`cost::near_limit_penalty`]).
    pub(super) fn cost_of(&mut self, c: &Config, device_used: Bytes) -> cost::Cost {
        let mut seconds = self.seconds(c);
        let visible = self.req.budget.cuda_visible.get().max(1);
        let mut used = device_used.get();
        let fits = used <= self.req.budget.usable().get();
        if fits && c.setup.optimizer.paged() {
            let paged = crate::estimate::paged_state_bytes(self.req.spec, &c.setup)
                .map_or(0, crate::units::Bytes::get);
            let room = self.req.budget.usable().get().saturating_sub(used);
            seconds += cost::paging_seconds(paged.saturating_sub(room));
            used = used.saturating_add(paged.min(room));
        }
        // A setup that does not fit is costed as if it did: without paging or the penalty.
        let penalty =
            if fits { cost::near_limit_penalty(used as f64 / visible as f64) } else { 0.0 };
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
    ///
    /// The misses are grouped by what decides their model states (precision, optimizer,
    /// adapters): each group's representative is its most frugal configuration (the most
    /// layers checkpointed, then a fused attention kernel, the chunked loss, expandable
    /// segments), and the groups that come closest are estimated.
    fn closest(&mut self, mut misses: Vec<Miss>) -> (Vec<Plan>, Option<Requirement>) {
        let layers = self.req.spec.n_layers;
        let frugality = |c: &Config| {
            let s = &c.setup;
            (
                s.checkpointing.checkpointed_layers(layers),
                s.attention != crate::setup::Attention::Eager,
                s.loss == crate::setup::LossKernel::Chunked,
                c.alloc.expandable_segments,
            )
        };
        // In order of the device use they need at least, the most frugal first; a figure that
        // is the activation bound is replaced by the allocated peak when it comes first (the
        // peak is never below it), so only the misses that can come first are simulated.
        let mut order: BinaryHeap<Reverse<Ranked>> = misses
            .iter()
            .enumerate()
            .map(|(i, m)| Reverse((m.device_at_least, Reverse(frugality(&m.config)), i)))
            .collect();
        let mut seen: Vec<StatesKey> = Vec::new();
        let mut ranked: Vec<usize> = Vec::new();
        while let Some(Reverse((_, frugal, i))) = order.pop() {
            if ranked.len() == CLOSEST {
                break;
            }
            if misses[i].refine {
                misses[i].refine = false;
                let config = misses[i].config.clone();
                misses[i].device_at_least = self.allocated_device_use(&config, self.micros[0]);
                self.stats.pruned -= 1;
                self.stats.simulated += 1;
                order.push(Reverse((misses[i].device_at_least, frugal, i)));
                continue;
            }
            let key = StatesKey::of(&misses[i].config.setup);
            if !seen.contains(&key) {
                seen.push(key);
                ranked.push(i);
            }
        }
        let mut taken: Vec<Option<Miss>> = misses.into_iter().map(Some).collect();
        let misses: Vec<Miss> = ranked.into_iter().filter_map(|i| taken[i].take()).collect();
        // The full estimates (each a caching-allocator replay, the search's largest cost when
        // nothing fits) are independent: one thread each; the order of the results is the
        // misses' order, as one after the other.
        let misses: Vec<(Config, Config)> = misses
            .into_iter()
            .take(CLOSEST)
            .map(|m| {
                let at = self.at(&m.config, self.micros[0]);
                (m.config, at)
            })
            .collect();
        let req = self.req;
        let estimates: Vec<Option<Estimate>> = std::thread::scope(|scope| {
            let handles: Vec<_> = misses
                .iter()
                .map(|(_, c)| scope.spawn(move || estimate_on(req.spec, &c.setup, &device(req, c))))
                .collect();
            handles.into_iter().map(|h| h.join().expect("an estimate panicked").ok()).collect()
        });
        let mut closest = Vec::new();
        for ((config, _), estimate) in misses.iter().zip(estimates) {
            let Some(estimate) = estimate else { continue };
            let verdict = judge(self.req, &estimate);
            closest.push(self.plan_of(config, self.micros[0], estimate, verdict));
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
            gpus_of_this_kind: if states.get() > per_gpu { self.sharded_gpus(p) } else { None },
            larger_gpu,
        }
    }

    /// The fewest GPUs of this kind (a power of two, in nodes of 8 beyond 8) over which
    /// ZeRO-3 fits the plan's setup at micro-batch 1, by full estimates: per-rank memory never
    /// grows with more GPUs under ZeRO-3, so the first that fits is the answer. `None` when
    /// even 4096 do not (one sequence's activations overflow the card).
    fn sharded_gpus(&self, p: &Plan) -> Option<u64> {
        let mut c = p.config.clone();
        c.setup.micro_batch = 1;
        c.setup.grad_accum = 1;
        c.setup.parallel.strategy = crate::parallel::Strategy::Zero3;
        c.setup.parallel.offload = crate::parallel::Offload::None;
        c.setup.parallel.reshard_after_forward = true;
        let mut n = p.config.setup.parallel.ranks().max(1);
        while n < MAX_SHARDED_GPUS {
            n *= 2;
            c.setup.parallel.gpus_per_node = n.min(8);
            c.setup.parallel.nodes = n / n.min(8);
            let Ok(e) = estimate_on(self.req.spec, &c.setup, &device(self.req, &c)) else {
                return None;
            };
            if judge(self.req, &e).fits {
                return Some(n);
            }
        }
        None
    }
}

/// The setup whose simulation gives the peak of `setup`'s own tensors
/// ([`crate::estimate::activation_peak`]) for every setup with the same activations: one
/// micro-batch, AdamW, and one GPU where that computes in the same dtypes, else ZeRO-1 over the
/// same GPUs without offload (the framework's mixed precision; ZeRO allocates no temporaries
/// in the forward or backward). `None` where neither computes as `setup` does or ZeRO-1 does
/// not run it (pure bf16): the search then simulates.
pub(super) fn representative(setup: &TrainSetup) -> Option<TrainSetup> {
    use crate::parallel::{Dtypes, Offload, Parallel, Strategy};
    let defaults = TrainSetup::default();
    let mut r = TrainSetup {
        grad_accum: 1,
        optimizer: crate::setup::Optimizer::Adamw,
        optimizer_state_dtype: None,
        optimizer_impl: defaults.optimizer_impl,
        parallel: Parallel::default(),
        ..setup.clone()
    };
    let (own, single) = (Dtypes::of(setup), Dtypes::of(&r));
    if (own.compute, own.autocast) == (single.compute, single.autocast) {
        return Some(r);
    }
    r.parallel = Parallel { strategy: Strategy::Zero1, offload: Offload::None, ..setup.parallel };
    let zero = Dtypes::of(&r);
    ((own.compute, own.autocast) == (zero.compute, zero.autocast)
        && crate::parallel::check(&r).is_ok())
    .then_some(r)
}

/// A miss in the order of the closest: the device use it needs at least, its frugality
/// (reversed: the most frugal first), its index.
type Ranked = (u64, Reverse<(u64, bool, bool, bool)>, usize);

/// The most GPUs [`Search::sharded_gpus`] tries.
const MAX_SHARDED_GPUS: u64 = 4096;

/// Whether what an offload puts in host memory fits in a node's (`host_ram`).
pub(super) fn host_fits(req: &PlanRequest<'_>, host: Option<&crate::parallel::HostMemory>) -> bool {
    host.is_none_or(|h| h.per_node <= req.host_ram)
}

/// The card's verdict on an estimate, which does not fit where its offload needs more host
/// memory than a node has.
pub(super) fn judge(req: &PlanRequest<'_>, e: &Estimate) -> CardVerdict {
    let mut v = card::judge(e, &req.budget);
    if !host_fits(req, e.ranks.host_memory.as_ref()) {
        v.fits = false;
    }
    v
}

/// The device a config runs on: CUDA with the card's workspaces and the config's allocator
/// settings.
pub(super) fn device(req: &PlanRequest<'_>, c: &Config) -> Device {
    Device { allocator: Some(c.alloc), workspaces: req.workspaces, ..Device::CUDA }
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
        if n.is_multiple_of(d) {
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
