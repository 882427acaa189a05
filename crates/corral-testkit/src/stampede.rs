//! A stampede in a worker process: the command the test side sends
//! (`stampede <key> <callers> <fill_ms> <counter>`), and what the worker
//! reports back in one line of its stdout (`@report <json>`).

use std::collections::BTreeSet;
use std::fmt::{self, Debug};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::Worker;

/// One stampede: `callers` concurrent reads of `key`, whose fill counts
/// itself in the shared counter `counter` and then takes `fill`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stampede {
    /// The key every caller reads.
    pub key: String,
    /// How many callers read it at once.
    pub callers: usize,
    /// How long the fill takes.
    pub fill: Duration,
    /// The shared counter each fill increments.
    pub counter: String,
}

impl Stampede {
    /// The command's words after `stampede`; panics (it is a test's) on
    /// anything else.
    pub fn parse(words: &[String]) -> Self {
        let word = |at: usize| {
            words
                .get(at)
                .unwrap_or_else(|| panic!("stampede: word {at}"))
        };
        Self {
            key: word(0).clone(),
            callers: word(1).parse().expect("stampede: callers"),
            fill: Duration::from_millis(word(2).parse().expect("stampede: fill ms")),
            counter: word(3).clone(),
        }
    }
}

impl fmt::Display for Stampede {
    /// The command line a worker reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stampede {} {} {} {}",
            self.key,
            self.callers,
            self.fill.as_millis(),
            self.counter
        )
    }
}

/// The callers of one stampede in one worker: how many got a value, the
/// distinct values they got, and the errors of the others.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StampedeReport {
    /// Callers that got a value.
    pub ok: usize,
    /// The distinct values they got.
    pub values: BTreeSet<String>,
    /// The other callers' errors, formatted with `Debug`.
    pub errors: Vec<String>,
}

impl StampedeReport {
    /// Awaits every caller task and sums up what they got.
    pub async fn collect<E: Debug>(tasks: Vec<JoinHandle<Result<String, E>>>) -> Self {
        let mut report = Self::default();
        for task in tasks {
            match task.await.expect("caller task") {
                Ok(value) => {
                    report.ok += 1;
                    report.values.insert(value);
                }
                Err(error) => report.errors.push(format!("{error:?}")),
            }
        }
        report
    }

    /// Prints the report as the worker's `@report` line.
    pub fn print(&self) {
        println!("@report {}", serde_json::to_string(self).expect("json"));
    }

    /// Reads the next `@report` line of `worker`.
    pub async fn read(worker: &mut Worker) -> Self {
        serde_json::from_str(&worker.expect("@report").await).expect("report json")
    }
}
