//! What a worker process reports after a stampede, in one line of its
//! stdout (`@report <json>`), and how the test side reads it back.

use std::collections::BTreeSet;
use std::fmt::Debug;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::Worker;

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
