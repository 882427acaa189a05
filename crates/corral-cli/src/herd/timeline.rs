//! A side's run over time, in buckets of [`BUCKET_MS`]: calls starting,
//! running and waiting at the source, callers answered and failed. Rounds
//! are laid end to end, each from its release; the time between them
//! (warm-ups, pauses) is left out.

use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

/// How long a bucket is, in milliseconds.
pub(crate) const BUCKET_MS: u64 = 10;

/// One value per bucket for each series; counts sum to the run's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Series {
    /// Calls that started running at the source (queries run, fills).
    pub(crate) started: Vec<u64>,
    /// The most calls running at the source at once.
    pub(crate) running: Vec<u64>,
    /// The most calls waiting at the source's door (for a pooled connection).
    pub(crate) waiting: Vec<u64>,
    /// Callers answered with their key's value.
    pub(crate) answered: Vec<u64>,
    /// Callers that failed.
    pub(crate) failed: Vec<u64>,
}

impl Series {
    fn columns(&mut self) -> [&mut Vec<u64>; 5] {
        let Self {
            started,
            running,
            waiting,
            answered,
            failed,
        } = self;
        [started, running, waiting, answered, failed]
    }

    /// Buckets in the series.
    pub(crate) fn len(&self) -> usize {
        self.running.len()
    }

    fn grow(&mut self, len: usize) {
        for column in self.columns() {
            column.resize(column.len().max(len), 0);
        }
    }

    /// Adds `other`, its first bucket at `at`: counts add up, gauges take
    /// the larger.
    pub(crate) fn add(&mut self, at: usize, other: &Series) {
        self.grow(at + other.len());
        let Series {
            started,
            running,
            waiting,
            answered,
            failed,
        } = other;
        let theirs = [started, running, waiting, answered, failed];
        for (column, (mine, theirs)) in self.columns().into_iter().zip(theirs).enumerate() {
            let gauge = column == 1 || column == 2;
            for (mine, theirs) in mine[at..].iter_mut().zip(theirs) {
                *mine = if gauge {
                    (*mine).max(*theirs)
                } else {
                    *mine + theirs
                };
            }
        }
    }
}

/// What a source counts of itself now: running a call, or waiting to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Gauge {
    Running,
    Waiting,
}

/// Records a side's series as events happen; shared by its source and its
/// callers.
#[derive(Debug, Default)]
pub(crate) struct Timeline(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    series: Series,
    /// The release of the round under way (tokio's clock, so tests can
    /// pause it).
    epoch: Option<tokio::time::Instant>,
    /// The round's first bucket.
    offset: usize,
    /// Calls running and waiting now.
    levels: [u64; 2],
    /// The buckets before this one hold the levels of their time.
    filled: usize,
}

impl State {
    /// The bucket of now, every bucket up to it holding the levels so far.
    fn now(&mut self) -> usize {
        let since = self.epoch.map_or(0, |epoch| epoch.elapsed().as_millis());
        let bucket = self.offset + usize::try_from(since / u128::from(BUCKET_MS)).unwrap_or(0);
        self.series.grow(bucket + 1);
        for at in self.filled..=bucket {
            let [running, waiting] = self.levels;
            let series = &mut self.series;
            series.running[at] = series.running[at].max(running);
            series.waiting[at] = series.waiting[at].max(waiting);
        }
        self.filled = bucket;
        bucket
    }
}

impl Timeline {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A round is released now; returns its first bucket.
    pub(crate) fn begin_round(&self) -> usize {
        let mut state = self.state();
        state.epoch = Some(tokio::time::Instant::now());
        state.offset
    }

    /// The round is over: the next starts after its last bucket.
    pub(crate) fn end_round(&self) {
        let mut state = self.state();
        state.offset = state.now() + 1;
        state.epoch = None;
    }

    /// A call starts running (counted as started) or waiting, until the
    /// guard drops.
    pub(crate) fn enter(&self, gauge: Gauge) -> Held<'_> {
        let mut state = self.state();
        let at = state.now();
        state.levels[gauge as usize] += 1;
        let level = state.levels[gauge as usize];
        let series = &mut state.series;
        match gauge {
            Gauge::Running => {
                series.started[at] += 1;
                series.running[at] = series.running[at].max(level);
            }
            Gauge::Waiting => series.waiting[at] = series.waiting[at].max(level),
        }
        Held(self, gauge)
    }

    /// A caller got its answer (`ok`) or failed.
    pub(crate) fn answer(&self, ok: bool) {
        let mut state = self.state();
        let at = state.now();
        let column = if ok {
            &mut state.series.answered
        } else {
            &mut state.series.failed
        };
        column[at] += 1;
    }

    /// Adds another timeline's series (a worker process's round) at `at`.
    pub(crate) fn add(&self, at: usize, series: &Series) {
        self.state().series.add(at, series);
    }

    /// The series so far, starting over.
    pub(crate) fn take(&self) -> Series {
        let mut state = self.state();
        let levels = state.levels;
        let series = std::mem::take(&mut state.series);
        *state = State {
            levels,
            ..State::default()
        };
        series
    }
}

/// A call counted at the source until dropped.
pub(crate) struct Held<'a>(&'a Timeline, Gauge);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.now();
        state.levels[self.1 as usize] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn levels_fill_the_buckets_they_span_and_rounds_lie_end_to_end() {
        let timeline = Timeline::default();
        let ms = |n| tokio::time::advance(std::time::Duration::from_millis(n));
        assert_eq!(timeline.begin_round(), 0);
        let running = timeline.enter(Gauge::Running);
        let waiting = timeline.enter(Gauge::Waiting);
        timeline.answer(false);
        ms(35).await;
        drop(waiting);
        let again = timeline.enter(Gauge::Running);
        timeline.answer(true);
        drop((running, again));
        timeline.end_round();
        ms(1).await;
        let next = timeline.begin_round();
        timeline.answer(true);
        timeline.end_round();
        let series = timeline.take();
        assert_eq!(next, 4, "{series:?}");
        assert_eq!(series.started, [1, 0, 0, 1, 0]);
        assert_eq!(series.running, [1, 1, 1, 2, 0]);
        assert_eq!(series.waiting, [1, 1, 1, 1, 0]);
        assert_eq!(series.answered, [0, 0, 0, 1, 1]);
        assert_eq!(series.failed, [1, 0, 0, 0, 0]);
        let mut sum = Series::default();
        sum.add(1, &series);
        assert_eq!(sum.answered, [0, 0, 0, 0, 1, 1]);
        sum.add(0, &series);
        assert_eq!(sum.running, [1, 1, 1, 2, 2, 0]);
        assert_eq!(sum.started, [1, 1, 0, 1, 1, 0]);
        assert_eq!(timeline.take(), Series::default());
    }
}
