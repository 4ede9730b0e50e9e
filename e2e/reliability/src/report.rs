//! What a scenario found: measures with their targets, printed as one table for the suite.

use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;

use crate::load::{Outcome, Tally, failure_sample};

/// One measure of a scenario.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub measure: String,
    pub value: String,
    /// The target it is held to, or empty when it is only reported.
    pub target: String,
    /// `None`: reported, not checked.
    pub pass: Option<bool>,
}

/// A scenario's result.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub scenario: String,
    pub checks: Vec<Check>,
    /// Failures seen, and anything else a reader needs.
    pub notes: Vec<String>,
    #[serde(with = "seconds")]
    pub took: Duration,
    /// The scenario could not run to its end.
    pub error: Option<String>,
}

impl Report {
    pub fn new(scenario: &str) -> Report {
        Report {
            scenario: scenario.into(),
            ..Default::default()
        }
    }

    pub fn passed(&self) -> bool {
        self.error.is_none() && self.checks.iter().all(|c| c.pass != Some(false))
    }

    /// A measure held to `target`.
    pub fn check(
        &mut self,
        measure: impl Into<String>,
        value: impl Into<String>,
        target: impl Into<String>,
        pass: bool,
    ) {
        self.checks.push(Check {
            measure: measure.into(),
            value: value.into(),
            target: target.into(),
            pass: Some(pass),
        });
    }

    /// A measure that is only reported.
    pub fn measure(&mut self, measure: impl Into<String>, value: impl Into<String>) {
        self.checks.push(Check {
            measure: measure.into(),
            value: value.into(),
            target: String::new(),
            pass: None,
        });
    }

    /// "No failed request" for some outcomes, with a sample of the failures in the notes.
    pub fn no_failures<'a>(&mut self, what: &str, outcomes: impl IntoIterator<Item = &'a Outcome> + Clone) {
        let t = Tally::of(outcomes.clone());
        self.check(
            format!("failed requests, {what}"),
            format!("{} of {} ({} client retries)", t.failed, t.requests, t.client_retries),
            "0",
            t.failed == 0 && t.requests > 0,
        );
        for f in failure_sample(outcomes, 5) {
            self.notes.push(format!("{what}: {f}"));
        }
    }
}

/// The suite's table (Markdown).
pub fn table(reports: &[Report]) -> String {
    let mut out = String::from("| scenario | measure | value | target | result |\n|---|---|---|---|---|\n");
    for r in reports {
        if let Some(e) = &r.error {
            let _ = writeln!(
                out,
                "| {} | could not run | {} | | FAIL |",
                r.scenario,
                e.replace('|', "/")
            );
        }
        for c in &r.checks {
            let result = match c.pass {
                Some(true) => "pass",
                Some(false) => "FAIL",
                None => "",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                r.scenario, c.measure, c.value, c.target, result
            );
        }
    }
    out
}

/// Milliseconds with one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The value at quantile `q` (0..=1) of sorted `values`.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

mod seconds {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}
