//! Each side of a run over time: recorded in buckets of [`BUCKET_MS`] from
//! its first release ([`Timeline`]), drawn by `--plot FILE` (plotters) and
//! summed up in the terminal by a sparkline per side, both sides on one
//! time axis and one scale.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

use corral_testkit::{micros, Tally};

pub(crate) const BUCKET_MS: u64 = 10;

/// A side's run in one bucket: calls started at the source, callers
/// answered and failed (they sum to the run's totals), and the most calls
/// running at the source at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Bucket {
    pub(crate) started: u64,
    pub(crate) running: u64,
    pub(crate) answered: u64,
    pub(crate) failed: u64,
}

/// A side's calls at its source, as they start and end, and its callers'
/// answers, from its first release since it was last taken.
#[derive(Debug, Default)]
pub(crate) struct Timeline(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    /// The first release (tokio's clock, which tests pause); what comes
    /// before it counts as at 0.
    epoch: Option<tokio::time::Instant>,
    /// Microseconds from the first release to each call's start (`true`)
    /// and end at the source, in the order they came.
    calls: Vec<(u64, bool)>,
    /// Microseconds to each answer, and whether it was its key's value.
    answers: Vec<(u64, bool)>,
}

impl Timeline {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Callers are released now (the first release starts the clock);
    /// returns the microseconds since the first release.
    pub(crate) fn release(&self) -> u64 {
        let mut state = self.state();
        let epoch = state.epoch.get_or_insert_with(tokio::time::Instant::now);
        micros(epoch.elapsed())
    }

    /// A call starts running at the source, until the guard drops.
    pub(crate) fn run(&self) -> Running<'_> {
        self.call(true);
        Running(self)
    }

    fn call(&self, starts: bool) {
        let mut state = self.state();
        let at = state.epoch.map_or(0, |epoch| micros(epoch.elapsed()));
        state.calls.push((at, starts));
    }

    /// Adds the callers of a round released `at` (as [`Timeline::release`]
    /// said): when each answer came, and whether it was its key's value.
    pub(crate) fn answers(&self, at: u64, tally: &Tally) {
        let answers = tally.ends_us.iter().map(|&(end, ok)| (at + end, ok));
        self.state().answers.extend(answers);
    }

    /// The buckets so far, starting over; one more at the end holds the
    /// calls still running after the last event (none, once all ended).
    pub(crate) fn take(&self) -> Vec<Bucket> {
        let State { calls, answers, .. } = std::mem::take(&mut *self.state());
        let (mut buckets, mut running, mut last) = (Vec::new(), 0, 0);
        for (us, ok) in answers {
            let at = bucket(&mut buckets, us);
            buckets[at].answered += u64::from(ok);
            buckets[at].failed += u64::from(!ok);
        }
        for (us, starts) in calls {
            let at = bucket(&mut buckets, us);
            // The level since the last call holds in every bucket up to now.
            for bucket in &mut buckets[last..=at] {
                bucket.running = bucket.running.max(running);
            }
            running = (running + u64::from(starts)).saturating_sub(u64::from(!starts));
            buckets[at].running = buckets[at].running.max(running);
            buckets[at].started += u64::from(starts);
            last = at;
        }
        buckets.push(Bucket::default());
        for bucket in &mut buckets[last..] {
            bucket.running = bucket.running.max(running);
        }
        buckets
    }
}

/// The bucket `us` microseconds from the first release, there.
fn bucket(buckets: &mut Vec<Bucket>, us: u64) -> usize {
    let at = usize::try_from(us / 1000 / BUCKET_MS).unwrap_or(usize::MAX);
    if buckets.len() <= at {
        buckets.resize(at + 1, Bucket::default());
    }
    at
}

pub(crate) struct Running<'a>(&'a Timeline);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.call(false);
    }
}

const COLORS: [RGBColor; 2] = [RGBColor(0x1f, 0x6f, 0xb4), RGBColor(0xd6, 0x3a, 0x28)];
const FONT: (&str, u32) = ("sans-serif", 15);

/// Writes the `sides` of the run `title` (corral's first) to `path` as SVG:
/// above, the calls running at the source (most per bucket, on a log
/// scale) and the `limits` that bound them (a pool's size, a budget);
/// below, the callers answered and failed so far.
pub(crate) fn svg(
    title: &str,
    sides: [(&str, &[Bucket]); 2],
    limits: &[(String, u64)],
    path: &Path,
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1000, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 17))?;
    let (top, bottom) = root.split_vertically(390);
    let buckets = sides.iter().map(|(_, side)| side.len()).max();
    let end = seconds(buckets.unwrap_or(0).max(1));
    let levels = sides
        .iter()
        .flat_map(|(_, side)| side.iter().map(|b| b.running));
    let peak = levels.chain(limits.iter().map(|(_, level)| *level)).max();
    let y = (0.7..peak.unwrap_or(0).max(1) as f64 * 3.0).log_scale();
    let caption = "calls at the source: the most running at once per 10 ms";
    let mut chart = builder(&top, caption).build_cartesian_2d(0.0..end, y)?;
    let mut mesh = chart.configure_mesh();
    let mesh = mesh.y_desc("calls (log scale)");
    mesh.y_label_formatter(&|y| group(*y as u64)).draw()?;
    for (color, (_, side)) in COLORS.iter().zip(sides) {
        let running = points(side.iter().map(|b| b.running), 0.7, end);
        chart.draw_series(LineSeries::new(running, color.stroke_width(2)))?;
    }
    // One line for each level, named by every limit at it.
    let mut levels = BTreeMap::<u64, Vec<&str>>::new();
    for (name, level) in limits {
        levels.entry(*level).or_default().push(name);
    }
    for (level, names) in levels {
        let at = level as f64;
        chart.draw_series(LineSeries::new([(0.0, at), (end, at)], BLACK.mix(0.45)))?;
        let style = TextStyle::from(FONT).pos(Pos::new(HPos::Right, VPos::Bottom));
        chart.draw_series([Text::new(names.join(", "), (end, at), style)])?;
    }
    let so_far = |side: &[Bucket], of: fn(&Bucket) -> u64| {
        let sums = side.iter().scan(0, move |sum, bucket| {
            *sum += of(bucket);
            Some(*sum)
        });
        sums.collect::<Vec<u64>>()
    };
    let calls = |side: &[Bucket]| side.iter().map(|b| b.answered + b.failed).sum::<u64>();
    // Headroom above the lines for the legend.
    let top = sides.iter().map(|(_, side)| calls(side)).max();
    let top = top.unwrap_or(0).max(1) as f64 * 1.4;
    let caption = "callers answered (line) and failed (dashed) so far";
    let mut chart = builder(&bottom, caption).build_cartesian_2d(0.0..end, 0.0..top)?;
    let mut mesh = chart.configure_mesh();
    let mesh = mesh
        .y_desc("callers")
        .x_desc("seconds from the first release");
    mesh.y_label_formatter(&|y| group(*y as u64)).draw()?;
    for (&color, (name, side)) in COLORS.iter().zip(sides) {
        let (answered, failed) = (so_far(side, |b| b.answered), so_far(side, |b| b.failed));
        let dashed = points(failed.iter().copied(), 0.0, end);
        chart.draw_series(DashedLineSeries::new(dashed, 6, 4, color.stroke_width(2)))?;
        let line = LineSeries::new(
            points(answered.iter().copied(), 0.0, end),
            color.stroke_width(2),
        );
        let [ok, failed] = [answered, failed].map(|sums| group(sums.last().copied().unwrap_or(0)));
        let run = group(side.iter().map(|b| b.started).sum());
        let label = format!("{name}: {ok} answered, {failed} failed, {run} run at the source");
        let mark = move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2));
        chart.draw_series(line)?.label(label).legend(mark);
    }
    let mut legend = chart.configure_series_labels();
    let legend = legend.position(SeriesLabelPosition::UpperMiddle);
    let legend = legend.label_font(FONT).background_style(WHITE.mix(0.85));
    legend.border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

fn builder<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut chart = ChartBuilder::on(area);
    chart.caption(caption, FONT).margin_right(20);
    chart.x_label_area_size(40).y_label_area_size(60);
    chart
}

fn seconds(at: usize) -> f64 {
    (at as u64 * BUCKET_MS) as f64 / 1000.0
}

/// A point for each bucket's value (at least `floor`), the last held until
/// `end`.
fn points(values: impl Iterator<Item = u64>, floor: f64, end: f64) -> Vec<(f64, f64)> {
    let values = values.map(|value| (value as f64).max(floor));
    let mut points: Vec<(f64, f64)> = values.enumerate().map(|(at, y)| (seconds(at), y)).collect();
    points.push((end, points.last().map_or(floor, |&(_, y)| y)));
    points
}

/// Two lines for the terminal: each side's calls running at the source over
/// time, on one time axis and one scale.
pub(crate) fn sparklines(sides: [(&str, &[Bucket]); 2]) -> String {
    const WIDTH: usize = 60;
    // Eighths of the peak, rounded up: a blank only for none.
    const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let buckets = sides.iter().map(|(_, side)| side.len()).max().unwrap_or(0);
    let per = buckets.div_ceil(WIDTH).max(1);
    let peak = sides
        .iter()
        .flat_map(|(_, side)| side.iter().map(|b| b.running));
    let peak = peak.max().unwrap_or(0).max(1);
    let (ms, most) = (per as u64 * BUCKET_MS, group(peak));
    let mut out = format!("calls running at the source, a character per {ms} ms (█: {most}):\n");
    for (name, side) in sides {
        let line = side.chunks(per).map(|chunk| {
            let most = chunk.iter().map(|bucket| bucket.running).max().unwrap_or(0);
            BARS[(most * 8).div_ceil(peak).min(8) as usize]
        });
        let line: String = line.collect();
        out.push_str(&format!("{name:<7}|{line:<WIDTH$}|\n"));
    }
    out
}

/// `12345678` as `12,345,678`.
pub(crate) fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_level_fills_the_buckets_it_spans_from_the_first_release() {
        let timeline = Timeline::default();
        let ms = |n| tokio::time::advance(std::time::Duration::from_millis(n));
        let first = timeline.run();
        ms(50).await;
        let at = timeline.release();
        assert_eq!(at, 0, "the clock starts at the first release");
        ms(35).await;
        let second = timeline.run();
        drop((first, second));
        ms(11).await;
        let at = timeline.release();
        assert_eq!(at, 46_000);
        let ends_us = vec![(3_000, true), (0, false), (13_999, true)];
        let tally = Tally {
            ends_us,
            ..Tally::default()
        };
        timeline.answers(at, &tally);
        let buckets = timeline.take();
        let column = |f: fn(&Bucket) -> u64| buckets.iter().map(f).collect::<Vec<_>>();
        assert_eq!(column(|b| b.started), [1, 0, 0, 1, 0, 0, 0]);
        assert_eq!(column(|b| b.running), [1, 1, 1, 2, 0, 0, 0]);
        assert_eq!(column(|b| b.answered), [0, 0, 0, 0, 1, 1, 0]);
        assert_eq!(column(|b| b.failed), [0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(timeline.take(), [Bucket::default()]);
    }

    #[test]
    fn a_sparkline_scales_both_sides_alike_on_one_time_axis() {
        let at = |running| Bucket {
            running,
            ..Bucket::default()
        };
        let corral = [4, 0, 0, 4].map(at);
        let naive = [vec![at(8); 100], vec![at(1); 20]].concat();
        let expected = "calls running at the source, a character per 20 ms (█: 8):\n\
             corral |▄▄                                                          |\n\
             naive  |██████████████████████████████████████████████████▁▁▁▁▁▁▁▁▁▁|\n";
        assert_eq!(
            sparklines([("corral", &corral), ("naive", &naive)]),
            expected
        );
        let points = points([0, 3, 2].into_iter(), 0.5, 0.05);
        assert_eq!(points, [(0.0, 0.5), (0.01, 3.0), (0.02, 2.0), (0.05, 2.0)]);
    }
}
