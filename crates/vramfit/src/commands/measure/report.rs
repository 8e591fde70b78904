//! What `measure` reports, for the renderers: the measurement, the probe's records aligned
//! to its clock, and the comparison with the estimate.

use std::path::PathBuf;

use vramfit_measure::Measurement;
use vramfit_measure::probe::{ProbeRun, Record};

use super::compare::Comparison;

pub struct Report {
    pub measurement: Measurement,
    pub probe: Option<(PathBuf, ProbeRun)>,
    pub comparison: Option<Comparison>,
}

impl Report {
    pub fn new(
        measurement: Measurement,
        probe: Option<(PathBuf, ProbeRun)>,
        comparison: Option<Comparison>,
    ) -> Self {
        Report { measurement, probe, comparison }
    }

    /// Seconds since the measurement's start at which a probe record was written.
    pub fn probe_t_s(&self, record: &Record) -> f64 {
        record.time_unix_s - self.measurement.start_unix_s
    }

    /// The probe's records with their time on the measurement's clock.
    pub fn probe_points(&self) -> Vec<(f64, &Record)> {
        match &self.probe {
            Some((_, run)) => run.records.iter().map(|r| (self.probe_t_s(r), r)).collect(),
            None => Vec::new(),
        }
    }

    /// The probe's latest record at or before `t_s` (for the timeline's side-by-side columns).
    pub fn probe_at(points: &[(f64, &Record)], t_s: f64) -> Option<usize> {
        let after = points.partition_point(|(t, _)| *t <= t_s);
        after.checked_sub(1)
    }
}
