//! The live line on stderr: rewritten in place on a terminal, a plain line every 10 s of the
//! run otherwise (logs, CI, tests).

use std::io::{IsTerminal, Write};

use vramfit_core::Bytes;
use vramfit_measure::Sample;

/// Seconds of the run between two plain lines.
const PLAIN_EVERY_S: f64 = 10.0;
/// Seconds between two redraws on a terminal.
const REDRAW_EVERY_S: f64 = 0.2;

pub struct LiveLine {
    terminal: bool,
    next_t_s: f64,
    drawn: bool,
}

impl LiveLine {
    pub fn new() -> Self {
        LiveLine { terminal: std::io::stderr().is_terminal(), next_t_s: 0.0, drawn: false }
    }

    pub fn update(&mut self, sample: &Sample, peak: u64) {
        if sample.t_s < self.next_t_s {
            return;
        }
        let text = line(sample, peak);
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{text}");
            self.next_t_s = sample.t_s + REDRAW_EVERY_S;
            self.drawn = true;
        } else {
            let _ = writeln!(err, "{text}");
            self.next_t_s = (sample.t_s / PLAIN_EVERY_S).floor() * PLAIN_EVERY_S + PLAIN_EVERY_S;
        }
        let _ = err.flush();
    }

    pub fn finish(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

/// `measure 12.3 s · now 10.21 GiB · peak 14.08 GiB`.
pub fn line(sample: &Sample, peak: u64) -> String {
    format!(
        "measure {:.1} s · now {} · peak {}",
        sample.t_s,
        Bytes(sample.command_bytes()),
        Bytes(peak)
    )
}

#[cfg(test)]
mod tests {
    use vramfit_measure::Sample;
    use vramfit_measure::measurement::DeviceSample;

    #[test]
    fn the_line_sums_devices_and_shows_the_peak() {
        let device =
            |index, command_bytes| DeviceSample { index, device_used_bytes: 0, command_bytes };
        let sample = Sample { t_s: 12.34, devices: vec![device(0, 3 << 30), device(1, 1 << 29)] };
        assert_eq!(super::line(&sample, 5 << 30), "measure 12.3 s · now 3.50 GiB · peak 5.00 GiB");
    }
}
