//! A progress line on stderr for long work (linting a large tree, reading a multi-GB
//! snapshot): shown only on a terminal, never with `--quiet`, and only once the work has run
//! for [`DELAY`], so short runs and pipes print nothing. The line is cleared when the work
//! ends.

use std::io::{IsTerminal, Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Nothing is shown for work shorter than this.
const DELAY: Duration = Duration::from_millis(500);
/// How often the line is redrawn.
const TICK: Duration = Duration::from_millis(100);

/// Counters the work updates and the display reads.
#[derive(Debug, Default)]
pub struct Counters {
    /// Items done (files).
    pub items: AtomicU64,
    /// Amount done (lines, bytes).
    pub amount: AtomicU64,
    stop: AtomicBool,
}

/// A running progress display.
pub struct Progress {
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Whether progress may be shown: stderr is a terminal and `--quiet` was not given.
    pub fn wanted(quiet: bool) -> bool {
        !quiet
            && std::io::stderr().is_terminal()
            && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
    }

    /// Starts the display when `enabled`; `line(items, amount, elapsed)` writes its text.
    pub fn start(
        enabled: bool,
        line: impl Fn(u64, u64, Duration) -> String + Send + 'static,
    ) -> Progress {
        let counters = Arc::new(Counters::default());
        let thread = enabled.then(|| {
            let counters = Arc::clone(&counters);
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut shown = false;
                while !counters.stop.load(Ordering::Relaxed) {
                    std::thread::park_timeout(TICK);
                    let elapsed = start.elapsed();
                    if elapsed < DELAY || counters.stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    let items = counters.items.load(Ordering::Relaxed);
                    let amount = counters.amount.load(Ordering::Relaxed);
                    let mut stderr = std::io::stderr().lock();
                    let _ = write!(stderr, "\r\x1b[2K{}", line(items, amount, elapsed));
                    let _ = stderr.flush();
                    shown = true;
                }
                if shown {
                    let mut stderr = std::io::stderr().lock();
                    let _ = write!(stderr, "\r\x1b[2K");
                    let _ = stderr.flush();
                }
            })
        });
        Progress { counters, thread }
    }

    /// The counters to update.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Stops the display and clears its line.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.counters.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A reader that adds every byte it reads to `counters.amount`.
pub struct CountingReader<R> {
    inner: R,
    counters: Arc<Counters>,
}

impl<R> CountingReader<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, counters: Arc<Counters>) -> Self {
        CountingReader { inner, counters }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counters.amount.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<R: Seek> Seek for CountingReader<R> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let at = self.inner.seek(to)?;
        if to == SeekFrom::Start(0) {
            // Rewound for the next pass.
            self.counters.items.fetch_add(1, Ordering::Relaxed);
        }
        Ok(at)
    }
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` per second over `elapsed`.
pub fn rate(n: u64, elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 { 0 } else { (n as f64 / secs) as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_and_rates_computed() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(rate(500, Duration::from_millis(500)), 1000);
        assert_eq!(rate(5, Duration::ZERO), 0);
    }

    #[test]
    fn a_disabled_display_starts_no_thread_and_counting_reads_count() {
        let progress = Progress::start(false, |_, _, _| String::new());
        assert!(progress.thread.is_none());
        let mut reader = CountingReader::new(
            std::io::Cursor::new(vec![7u8; 10]),
            Arc::clone(progress.counters()),
        );
        let mut buf = Vec::new();
        reader.read_to_end(&mut buf).unwrap();
        reader.seek(SeekFrom::Start(0)).unwrap();
        assert_eq!(progress.counters().amount.load(Ordering::Relaxed), 10);
        assert_eq!(progress.counters().items.load(Ordering::Relaxed), 1);
        progress.finish();
    }
}
