//! The run as a picture: `--plot FILE` draws both sides' series on one time
//! axis and one scale per panel (an SVG, by plotters), and the terminal
//! gets a sparkline per side of the calls running at the source.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::group;
use super::timeline::{Series, BUCKET_MS};

/// A run's picture: its title, its sides and the limits at its source.
pub(crate) struct Picture<'a> {
    pub(crate) title: String,
    /// corral's side, then the naive side.
    pub(crate) sides: [(&'a str, &'a Series); 2],
    /// Levels drawn across the source's panel: a pool's size, a budget.
    pub(crate) limits: Vec<(String, u64)>,
}

/// corral's colour, then the naive side's.
const COLORS: [RGBColor; 2] = [RGBColor(0x1f, 0x6f, 0xb4), RGBColor(0xd6, 0x3a, 0x28)];
/// Where zero sits on a log scale.
const FLOOR: f64 = 0.7;
const FONT: (&str, u32) = ("sans-serif", 15);

/// Writes the picture to `path` as SVG; fails if it cannot.
pub(crate) fn svg(picture: &Picture<'_>, path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1000, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&picture.title, ("sans-serif", 17))?;
    let height = root.dim_in_pixel().1 as i32;
    let panels = root.split_by_breakpoints([] as [i32; 0], [height / 2, height * 3 / 4]);
    let buckets = picture
        .sides
        .iter()
        .map(|(_, s)| s.len())
        .max()
        .unwrap_or(0);
    let end = (buckets.max(1) as u64 * BUCKET_MS) as f64 / 1000.0;
    source_panel(&panels[0], picture, end)?;
    for (area, answered) in panels[1..].iter().zip([true, false]) {
        let what = if answered { "answered" } else { "failed" };
        let so_far = picture.sides.map(|(_, series)| {
            let column = if answered {
                &series.answered
            } else {
                &series.failed
            };
            let mut sum = 0;
            let sums = column.iter().map(|n| {
                sum += n;
                sum
            });
            let mut sums: Vec<u64> = sums.collect();
            sums.resize(buckets, sum);
            sums
        });
        let top = so_far.iter().flatten().copied().max().unwrap_or(0).max(1) as f64;
        let mut chart = ChartBuilder::on(area)
            .caption(format!("callers {what} so far"), FONT)
            .margin_right(20)
            .x_label_area_size(if answered { 25 } else { 50 })
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..end, 0.0..top * 1.05)?;
        let mut mesh = chart.configure_mesh();
        let mesh = mesh
            .y_desc("callers")
            .y_label_formatter(&|y| group(*y as u64));
        if !answered {
            mesh.x_desc("seconds from the release (rounds end to end)");
        }
        mesh.draw()?;
        for ((color, (name, series)), so_far) in COLORS.iter().zip(picture.sides).zip(&so_far) {
            let drawn =
                chart.draw_series(LineSeries::new(steps(so_far, 0.0), color.stroke_width(2)))?;
            if answered {
                let sum = |column: &[u64]| group(column.iter().sum());
                let (run, ok, failed) = (
                    sum(&series.started),
                    sum(&series.answered),
                    sum(&series.failed),
                );
                let label = format!(
                    "{name}: {run} calls run at the source, {ok} answered, {failed} failed"
                );
                drawn.label(label).legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
            }
        }
        if answered {
            let mut labels = chart.configure_series_labels();
            let labels = labels
                .position(SeriesLabelPosition::MiddleRight)
                .label_font(FONT);
            labels
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }
    }
    root.present()?;
    Ok(())
}

/// The top panel: calls running at the source (lines) and waiting at its
/// door (shaded), log scale, with the limits across.
fn source_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    picture: &Picture<'_>,
    end: f64,
) -> anyhow::Result<()> {
    let levels = picture
        .sides
        .iter()
        .flat_map(|(_, s)| s.running.iter().chain(&s.waiting));
    let limits = picture.limits.iter().map(|(_, level)| level);
    let peak = levels.chain(limits).copied().max().unwrap_or(0).max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "calls at the source, most per 10 ms: running (line), waiting for a connection (shaded)",
            FONT,
        )
        .margin_right(20)
        .x_label_area_size(25)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, (FLOOR..peak * 3.0).log_scale())?;
    let mut mesh = chart.configure_mesh();
    let mesh = mesh.y_desc("calls (log scale)");
    mesh.y_label_formatter(&|y| group(*y as u64)).draw()?;
    for (&color, &(_, series)) in COLORS.iter().zip(&picture.sides) {
        let waiting = AreaSeries::new(steps(&series.waiting, FLOOR), FLOOR, color.mix(0.25));
        chart.draw_series(waiting)?;
        chart.draw_series(LineSeries::new(
            steps(&series.running, FLOOR),
            color.stroke_width(2),
        ))?;
    }
    let mut levels: Vec<u64> = picture.limits.iter().map(|(_, level)| *level).collect();
    levels.sort_unstable();
    levels.dedup();
    for level in levels {
        let named = picture.limits.iter().filter(|(_, at)| *at == level);
        let label = named
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let level = level as f64;
        let line = LineSeries::new([(0.0, level), (end, level)], BLACK.mix(0.45));
        chart.draw_series(line)?;
        let style = TextStyle::from(FONT).pos(Pos::new(HPos::Right, VPos::Bottom));
        chart.draw_series([Text::new(label, (end, level), style)])?;
    }
    Ok(())
}

/// Points of a step line through `values` (one per bucket, in seconds),
/// from `floor`, with a point only where the value changes.
fn steps(values: &[u64], floor: f64) -> Vec<(f64, f64)> {
    let at = |bucket: usize| (bucket as u64 * BUCKET_MS) as f64 / 1000.0;
    let mut points = vec![(0.0, floor)];
    let mut last = floor;
    for (bucket, &value) in values.iter().enumerate() {
        let value = (value as f64).max(floor);
        if value != last {
            points.extend([(at(bucket), last), (at(bucket), value)]);
            last = value;
        }
    }
    points.push((at(values.len()), last));
    points
}

/// Two lines for the terminal: each side's calls running at the source over
/// time, on one time axis and one scale.
pub(crate) fn sparklines(sides: [(&str, &Series); 2]) -> String {
    const WIDTH: usize = 60;
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let buckets = sides.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
    let per = buckets.div_ceil(WIDTH).max(1);
    let peak = sides.iter().flat_map(|(_, s)| &s.running).max();
    let peak = peak.copied().unwrap_or(0).max(1);
    let mut out = format!(
        "calls running at the source, a character per {} ms (█: {}):\n",
        per as u64 * BUCKET_MS,
        group(peak)
    );
    for (name, series) in sides {
        let line = series.running.chunks(per).map(|chunk| {
            let most = chunk.iter().copied().max().unwrap_or(0);
            let bar = (most * 8).div_ceil(peak).clamp(1, 8) as usize - 1;
            if most == 0 {
                ' '
            } else {
                BARS[bar]
            }
        });
        out.push_str(&format!(
            "{name:<7}|{:<WIDTH$}|\n",
            line.collect::<String>()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_scales_both_sides_alike_on_one_time_axis() {
        let corral = Series {
            running: vec![4, 0, 0, 4],
            ..Series::default()
        };
        let naive = Series {
            running: [vec![8; 100], vec![1; 20]].concat(),
            ..Series::default()
        };
        let lines = sparklines([("corral", &corral), ("naive", &naive)]);
        let expected = "calls running at the source, a character per 20 ms (█: 8):\n\
             corral |▄▄                                                          |\n\
             naive  |██████████████████████████████████████████████████▁▁▁▁▁▁▁▁▁▁|\n";
        assert_eq!(lines, expected);
        let steps = steps(&[0, 3, 3, 0], 0.5);
        let points = [
            (0.0, 0.5),
            (0.01, 0.5),
            (0.01, 3.0),
            (0.03, 3.0),
            (0.03, 0.5),
            (0.04, 0.5),
        ];
        assert_eq!(steps, points);
    }
}
