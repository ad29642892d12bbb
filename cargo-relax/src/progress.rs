//! Progress of long operations on the terminal (step i/n, elapsed time, what runs), with
//! indicatif; nothing is drawn when stderr is not a terminal (CI logs, pipes).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr, hidden when stderr is not a terminal.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar for `title` (e.g. "preparing for aarch64-unknown-linux-gnu").
    pub fn new(title: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {prefix} {pos}/{len} {wide_msg}",
            )
            .expect("a valid template"),
        );
        bar.set_prefix(title.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    /// Step `step` of `steps` starts: `what`.
    pub fn step(&self, step: usize, steps: usize, what: &str) {
        self.bar.set_length(steps as u64);
        self.bar.set_position(step.saturating_sub(1) as u64);
        self.bar.set_message(what.to_string());
    }

    /// Removes the bar (what was printed stays).
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
