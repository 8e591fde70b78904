//! The allocation stream: tensors appear and disappear in program order, and the peak, its
//! phase and the breakdown at the peak are read from that one stream.
//!
//! A [`Timeline`] holds live storages with reference counts (a Python variable, a tensor
//! autograd saved, a gradient buffer each hold one), so a storage referenced twice costs once
//! and is freed when its last reference goes. Every byte count is checked.

use serde::Serialize;

use crate::units::Overflow;

/// Where in the training step memory is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The forward pass through the layers.
    Forward,
    /// The output head, the logits and the loss.
    Loss,
    /// The backward pass.
    Backward,
    /// `optimizer.step()` and `zero_grad()`.
    OptimizerStep,
}

impl Phase {
    /// All phases in step order.
    pub const ALL: [Phase; 4] =
        [Phase::Forward, Phase::Loss, Phase::Backward, Phase::OptimizerStep];

    /// The name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Loss => "loss",
            Phase::Backward => "backward",
            Phase::OptimizerStep => "optimizer_step",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What a piece of memory is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Model weights and buffers.
    Parameters,
    /// Parameter gradients (`.grad`).
    Gradients,
    /// Persistent optimizer state.
    OptimizerState,
    /// Tensors autograd saved for backward (and the inputs checkpointing keeps).
    Activations,
    /// Everything transient: forward outputs not saved, logits and loss buffers, gradients
    /// flowing through backward, the optimizer step's buffers.
    Temporaries,
    /// Autocast's low-precision copies of the weights.
    AutocastCache,
    /// Library workspaces (cuBLAS).
    Workspace,
}

impl Component {
    /// All components in display order.
    pub const ALL: [Component; 7] = [
        Component::Parameters,
        Component::Gradients,
        Component::OptimizerState,
        Component::Activations,
        Component::Temporaries,
        Component::AutocastCache,
        Component::Workspace,
    ];

    /// The name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Component::Parameters => "parameters",
            Component::Gradients => "gradients",
            Component::OptimizerState => "optimizer_state",
            Component::Activations => "activations",
            Component::Temporaries => "temporaries",
            Component::AutocastCache => "autocast_cache",
            Component::Workspace => "workspace",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A handle to a live (or freed) storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Tid(u32);

impl Tid {
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    bytes: u64,
    component: Component,
    refs: u32,
}

/// Bytes by component.
pub(crate) type ByComponent = [u64; 7];

/// One point of a recorded timeline: the most memory held within a stretch of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// The allocation or free (counted from the start of the step) where it was held.
    pub event: u64,
    /// The phase at that moment.
    pub phase: Phase,
    /// Bytes allocated then.
    pub allocated: crate::units::Bytes,
    /// The same bytes by component.
    pub components: crate::estimate::Components,
}

/// The allocated memory of one simulated step, in at most the points asked for. Each point is
/// the highest moment of its stretch of events, so the step's peak is always one of them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepTimeline {
    /// Allocations and frees in the step.
    pub events: u64,
    /// The points, in event order.
    pub points: Vec<TimelinePoint>,
    /// Where each phase starts (event index), in order; phases repeat per micro-batch.
    pub phases: Vec<(u64, Phase)>,
    /// Micro-batches simulated (gradient accumulation repeats the second one exactly).
    pub micro_batches: u64,
}

/// What an observer of the allocation stream is told, after the stream's state has changed.
/// (The storage fields are read by the caching-allocator model and the test-only observers.)
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum StreamEvent {
    /// A storage was allocated.
    Alloc {
        /// It.
        tid: Tid,
        /// Its (rounded) size.
        bytes: u64,
        /// What it is for.
        component: Component,
    },
    /// A storage's last reference went: it is freed.
    Free {
        /// It.
        tid: Tid,
        /// Its size.
        bytes: u64,
        /// What it was for.
        component: Component,
    },
    /// A live storage changed component (a forward output that autograd saved).
    Recategorize {
        /// It.
        tid: Tid,
        /// What it is for now.
        component: Component,
    },
    /// A new phase began.
    Phase(Phase),
}

/// The stream's state as an observer sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamState<'a> {
    /// Bytes allocated.
    pub(crate) total: u64,
    /// The same by component.
    pub(crate) live: &'a ByComponent,
    /// The phase.
    pub(crate) phase: Phase,
}

/// A consumer of the allocation stream: the peak tracker, the chart recorder, the test-only
/// live-set dump, and the model of the caching allocator (`allocator.rs`). Observers see every event in
/// order; they cannot change the stream.
pub(crate) trait StreamObserver {
    /// One event.
    fn observe(&mut self, event: StreamEvent, state: StreamState<'_>);
}

/// The high-water marks: the step's peak, its phase, the breakdown then, and each phase's peak.
#[derive(Debug, Clone)]
pub(crate) struct PeakTracker {
    peak: u64,
    peak_phase: Phase,
    peak_live: ByComponent,
    phase_peaks: [u64; 4],
}

impl PeakTracker {
    fn new() -> PeakTracker {
        PeakTracker { peak: 0, peak_phase: Phase::Forward, peak_live: [0; 7], phase_peaks: [0; 4] }
    }
}

impl StreamObserver for PeakTracker {
    #[inline]
    fn observe(&mut self, event: StreamEvent, state: StreamState<'_>) {
        if matches!(event, StreamEvent::Alloc { .. } | StreamEvent::Phase(_)) {
            let p = &mut self.phase_peaks[state.phase.index()];
            *p = (*p).max(state.total);
            if state.total > self.peak {
                self.peak = state.total;
                self.peak_phase = state.phase;
                self.peak_live = *state.live;
            }
        }
    }
}

/// Builds a [`StepTimeline`] while the step runs: every point but the last holds `width`
/// events, the last `in_last`; above `2 * max_points` points, neighbours are paired.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    timeline: StepTimeline,
    max_points: usize,
    width: u64,
    in_last: u64,
}

impl Recorder {
    pub(crate) fn new(max_points: usize, micro_batches: u64) -> Recorder {
        Recorder {
            timeline: StepTimeline { micro_batches, ..StepTimeline::default() },
            max_points: max_points.max(2),
            width: 1,
            in_last: 0,
        }
    }

    fn note(&mut self, total: u64, phase: Phase, live: &ByComponent) {
        let t = &mut self.timeline;
        let point = TimelinePoint {
            event: t.events,
            phase,
            allocated: crate::units::Bytes(total),
            components: crate::estimate::Components::from_array(*live),
        };
        t.events += 1;
        match t.points.last_mut() {
            Some(last) if self.in_last < self.width => {
                if point.allocated > last.allocated {
                    *last = point;
                }
                self.in_last += 1;
            }
            _ => {
                t.points.push(point);
                self.in_last = 1;
            }
        }
        if t.points.len() > 2 * self.max_points {
            // All points but the last hold `width` events and their count is odd: pair them.
            halve(&mut t.points);
            self.width *= 2;
        }
    }

    fn phase(&mut self, phase: Phase) {
        let t = &mut self.timeline;
        if t.phases.last().is_none_or(|(_, p)| *p != phase) {
            t.phases.push((t.events, phase));
        }
    }

    /// Ends recording: at most `max_points` points.
    pub(crate) fn finish(mut self) -> StepTimeline {
        while self.timeline.points.len() > self.max_points {
            halve(&mut self.timeline.points);
        }
        self.timeline
    }
}

impl StreamObserver for Recorder {
    fn observe(&mut self, event: StreamEvent, state: StreamState<'_>) {
        match event {
            StreamEvent::Alloc { .. } | StreamEvent::Free { .. } => {
                self.note(state.total, state.phase, state.live);
            }
            StreamEvent::Phase(phase) => self.phase(phase),
            StreamEvent::Recategorize { .. } => {}
        }
    }
}

/// Pairs neighbouring points, keeping the higher (the earlier on a tie).
fn halve(points: &mut Vec<TimelinePoint>) {
    *points = points
        .chunks(2)
        .filter_map(|pair| pair.iter().copied().max_by_key(|p| (p.allocated, u64::MAX - p.event)))
        .collect();
}

/// The stream's state: live storages with reference counts, the total, the phase, the peak
/// tracker and any further observers.
pub(crate) struct Timeline<'o> {
    slots: Vec<Slot>,
    live: ByComponent,
    total: u64,
    phase: Phase,
    peaks: PeakTracker,
    observers: Vec<&'o mut dyn StreamObserver>,
    granularity: u64,
    /// While storages of a size not yet known are alive or about to be told: the events held
    /// back (with the state then, less those storages), told once the sizes are known.
    deferred: Option<Deferred>,
}

/// Events held back by [`Timeline::alloc_pending`] and [`Timeline::place_pending`] until
/// [`Timeline::resolve`].
struct Deferred {
    /// The storages whose size is not known yet.
    pending: Vec<Tid>,
    /// Where allocations not made yet go: the index of the event they precede.
    places: Vec<usize>,
    /// The bytes by component when events began to be held back.
    start_live: ByComponent,
    /// The total when events began to be held back.
    start_total: u64,
    /// The phase then.
    start_phase: Phase,
    /// Each event as counted without the pending storages (a recategorized storage's
    /// former component and bytes in `moved`).
    events: Vec<(StreamEvent, Option<(Component, u64)>)>,
}

/// A place in the held-back stream for allocations whose number and sizes are known later
/// ([`Timeline::place_pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place(usize);

impl<'o> Timeline<'o> {
    /// A timeline whose allocations are rounded up to `granularity` bytes (512 for CUDA's
    /// caching allocator, whose `max_memory_allocated` counts rounded blocks; 1 to count
    /// requested bytes as the CPU oracle does), told to `observers` as well as to its own
    /// peak tracker.
    pub(crate) fn new(
        granularity: u64,
        observers: Vec<&'o mut dyn StreamObserver>,
    ) -> Timeline<'o> {
        assert!(granularity > 0, "an allocation granularity of zero bytes");
        let mut timeline = Timeline {
            granularity,
            slots: Vec::with_capacity(4096),
            live: [0; 7],
            total: 0,
            phase: Phase::Forward,
            peaks: PeakTracker::new(),
            observers,
            deferred: None,
        };
        timeline.tell(StreamEvent::Phase(Phase::Forward));
        timeline
    }

    #[inline]
    fn tell(&mut self, event: StreamEvent) {
        if let Some(d) = &mut self.deferred {
            d.events.push((event, None));
            return;
        }
        let state = StreamState { total: self.total, live: &self.live, phase: self.phase };
        self.peaks.observe(event, state);
        if !self.observers.is_empty() {
            for o in &mut self.observers {
                o.observe(event, state);
            }
        }
    }

    pub(crate) fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        self.tell(StreamEvent::Phase(phase));
    }

    /// Allocates a storage with one reference.
    pub(crate) fn alloc(&mut self, component: Component, bytes: u64) -> Result<Tid, Overflow> {
        let bytes =
            bytes.div_ceil(self.granularity).checked_mul(self.granularity).ok_or(Overflow)?;
        self.total = self.total.checked_add(bytes).ok_or(Overflow)?;
        self.live[component.index()] += bytes;
        let tid = Tid(u32::try_from(self.slots.len()).map_err(|_| Overflow)?);
        self.slots.push(Slot { bytes, component, refs: 1 });
        self.tell(StreamEvent::Alloc { tid, bytes, component });
        Ok(tid)
    }

    fn deferred(&mut self) -> &mut Deferred {
        let (start_live, start_total, start_phase) = (self.live, self.total, self.phase);
        self.deferred.get_or_insert_with(|| Deferred {
            pending: Vec::new(),
            places: Vec::new(),
            start_live,
            start_total,
            start_phase,
            events: Vec::with_capacity(4096),
        })
    }

    /// Allocates a storage of a size known only later (the batch a training loop holds from
    /// the previous step): zero bytes until [`Timeline::resolve`] gives its size. From the
    /// first such call every event is held back, and told when the sizes are known with the
    /// state it would have had.
    pub(crate) fn alloc_pending(&mut self, component: Component) -> Result<Tid, Overflow> {
        let tid = Tid(u32::try_from(self.slots.len()).map_err(|_| Overflow)?);
        self.deferred().pending.push(tid);
        self.alloc(component, 0)
    }

    /// Whether events are held back for sizes not known yet.
    pub(crate) fn has_pending(&self) -> bool {
        self.deferred.is_some()
    }

    /// Marks the place of allocations whose number and sizes are known only later (what the
    /// previous step's forward left, which this step's forward will tell): [`Timeline::resolve`]
    /// makes them there. Events are held back from here as for [`Timeline::alloc_pending`].
    pub(crate) fn place_pending(&mut self) -> Place {
        let d = self.deferred();
        d.places.push(d.events.len());
        Place(d.places.len() - 1)
    }

    /// Gives the pending storages their sizes (in the order they were allocated, each rounded
    /// to the granularity), makes the allocations of each place (`(place, [(bytes,
    /// component)])`, alive now, one reference each; their handles are returned per place),
    /// and tells the events held back with the state they would have had.
    pub(crate) fn resolve(
        &mut self,
        sizes: &[u64],
        at: &[(Place, Vec<(u64, Component)>)],
    ) -> Result<Vec<Vec<Tid>>, Overflow> {
        let Deferred { pending, places, start_live, start_total, start_phase, events } =
            self.deferred.take().expect("nothing pending");
        assert_eq!(pending.len(), sizes.len(), "a size for each pending storage");
        assert_eq!(places.len(), at.len(), "allocations for each place");
        for (&t, &bytes) in pending.iter().zip(sizes) {
            let bytes =
                bytes.div_ceil(self.granularity).checked_mul(self.granularity).ok_or(Overflow)?;
            let s = &mut self.slots[t.index()];
            assert_eq!(s.bytes, 0, "storage {} resolved twice", t.0);
            s.bytes = bytes;
            if s.refs > 0 {
                self.total = self.total.checked_add(bytes).ok_or(Overflow)?;
                self.live[s.component.index()] += bytes;
            }
        }
        // The places' storages: made now, told at their place.
        let mut made: Vec<Vec<(Tid, u64, Component)>> = Vec::with_capacity(at.len());
        for (i, (place, allocs)) in at.iter().enumerate() {
            assert_eq!(place.0, i, "places resolved in order");
            let mut these = Vec::with_capacity(allocs.len());
            for &(bytes, component) in allocs {
                let bytes = bytes
                    .div_ceil(self.granularity)
                    .checked_mul(self.granularity)
                    .ok_or(Overflow)?;
                self.total = self.total.checked_add(bytes).ok_or(Overflow)?;
                self.live[component.index()] += bytes;
                let tid = Tid(u32::try_from(self.slots.len()).map_err(|_| Overflow)?);
                self.slots.push(Slot { bytes, component, refs: 1 });
                these.push((tid, bytes, component));
            }
            made.push(these);
        }
        // The events again, the state rebuilt as they go, with the pending storages' bytes.
        let (mut total, mut live, mut phase) = (start_total, start_live, start_phase);
        let mut next_place = 0;
        let is_pending = |t: Tid| pending.contains(&t);
        for k in 0..=events.len() {
            while places.get(next_place) == Some(&k) {
                for &(tid, bytes, component) in &made[next_place] {
                    total = total.checked_add(bytes).ok_or(Overflow)?;
                    live[component.index()] += bytes;
                    self.tell_held(
                        StreamEvent::Alloc { tid, bytes, component },
                        total,
                        &live,
                        phase,
                    );
                }
                next_place += 1;
            }
            let Some(&(mut event, moved)) = events.get(k) else { break };
            match &mut event {
                StreamEvent::Alloc { tid, bytes, component } => {
                    if is_pending(*tid) {
                        *bytes = self.slots[tid.index()].bytes;
                    }
                    total = total.checked_add(*bytes).ok_or(Overflow)?;
                    live[component.index()] += *bytes;
                }
                StreamEvent::Free { tid, bytes, component } => {
                    if is_pending(*tid) {
                        *bytes = self.slots[tid.index()].bytes;
                    }
                    total -= *bytes;
                    live[component.index()] -= *bytes;
                }
                StreamEvent::Recategorize { tid, component } => {
                    assert!(!is_pending(*tid), "a pending storage recategorized");
                    let (from, bytes) = moved.expect("a recategorization's former component");
                    live[from.index()] -= bytes;
                    live[component.index()] += bytes;
                }
                StreamEvent::Phase(p) => phase = *p,
            }
            self.tell_held(event, total, &live, phase);
        }
        debug_assert_eq!((total, live), (self.total, self.live));
        Ok(made.into_iter().map(|m| m.into_iter().map(|(t, _, _)| t).collect()).collect())
    }

    /// Tells a held-back event with the state after it.
    fn tell_held(&mut self, event: StreamEvent, total: u64, live: &ByComponent, phase: Phase) {
        let state = StreamState { total, live, phase };
        self.peaks.observe(event, state);
        for o in &mut self.observers {
            o.observe(event, state);
        }
    }

    /// Allocates a freed storage again under its own handle: the next iteration's tensor in
    /// the role this one had (what a training loop keeps across steps), so that an observer
    /// replaying the step iteration after iteration sees the same storage freed and made.
    pub(crate) fn revive(
        &mut self,
        t: Tid,
        component: Component,
        bytes: u64,
    ) -> Result<(), Overflow> {
        let bytes =
            bytes.div_ceil(self.granularity).checked_mul(self.granularity).ok_or(Overflow)?;
        let s = &mut self.slots[t.index()];
        assert_eq!(s.refs, 0, "storage {} revived while alive", t.0);
        *s = Slot { bytes, component, refs: 1 };
        self.total = self.total.checked_add(bytes).ok_or(Overflow)?;
        self.live[component.index()] += bytes;
        self.tell(StreamEvent::Alloc { tid: t, bytes, component });
        Ok(())
    }

    /// A storage's size as allocated (rounded to the granularity).
    pub(crate) fn bytes_of(&self, t: Tid) -> u64 {
        self.slots[t.index()].bytes
    }

    fn slot(&mut self, t: Tid) -> &mut Slot {
        let s = &mut self.slots[t.index()];
        assert!(s.refs > 0, "storage {} used after it was freed", t.0);
        s
    }

    /// Adds a reference.
    pub(crate) fn retain(&mut self, t: Tid) {
        self.slot(t).refs += 1;
    }

    /// Drops a reference; frees the storage when it was the last.
    pub(crate) fn release(&mut self, t: Tid) {
        let s = self.slot(t);
        s.refs -= 1;
        if s.refs == 0 {
            let (bytes, component) = (s.bytes, s.component);
            self.total -= bytes;
            self.live[component.index()] -= bytes;
            self.tell(StreamEvent::Free { tid: t, bytes, component });
        }
    }

    /// Moves a live storage to another component (a forward output autograd decided to save).
    pub(crate) fn recategorize(&mut self, t: Tid, component: Component) {
        let s = self.slot(t);
        let (bytes, from) = (s.bytes, s.component);
        s.component = component;
        self.live[from.index()] -= bytes;
        self.live[component.index()] += bytes;
        let event = StreamEvent::Recategorize { tid: t, component };
        match &mut self.deferred {
            Some(d) => d.events.push((event, Some((from, bytes)))),
            None => self.tell(event),
        }
    }

    pub(crate) fn component_of(&self, t: Tid) -> Component {
        self.slots[t.index()].component
    }

    /// Bytes by component now.
    pub(crate) fn live(&self) -> ByComponent {
        self.live
    }

    pub(crate) fn peak(&self) -> (u64, Phase, ByComponent) {
        (self.peaks.peak, self.peaks.peak_phase, self.peaks.peak_live)
    }

    pub(crate) fn phase_peaks(&self) -> [u64; 4] {
        self.peaks.phase_peaks
    }
}
