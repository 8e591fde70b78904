//! The recorded-trace backend: a [`Trace`] played back sample by sample, at no speed at all,
//! through the same [`Sampler`](crate::sampler::Sampler) as a live run.

use crate::sampler::Backend;
use crate::source::SourceError;
use crate::trace::{End, Header, Trace, TraceSample};

/// Plays a trace.
pub struct ReplaySource {
    header: Header,
    samples: std::vec::IntoIter<TraceSample>,
    end: End,
}

impl ReplaySource {
    /// Plays `trace` from its first sample.
    pub fn new(trace: Trace) -> Self {
        ReplaySource { header: trace.header, samples: trace.samples.into_iter(), end: trace.end }
    }
}

impl Backend for ReplaySource {
    fn header(&self) -> &Header {
        &self.header
    }

    fn next_sample(&mut self) -> Result<Option<TraceSample>, SourceError> {
        Ok(self.samples.next())
    }

    fn end(&mut self) -> End {
        self.end
    }
}
