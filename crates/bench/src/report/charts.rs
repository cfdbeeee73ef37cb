//! The report's charts (plotters, SVG): bars of a figure per program, latency bars, lines.

use std::path::Path;

use plotters::prelude::*;

use super::count;

pub(super) fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

pub(super) type Chart = anyhow::Result<()>;

pub(super) fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("chart: {e}")
}

/// Horizontal bars, one per peer, value written at the end of each bar.
pub(super) fn bars(
    path: &Path,
    title: &str,
    names: &[String],
    values: &[f64],
    unit: &str,
) -> Chart {
    let n = names.len().max(1);
    let root = SVGBackend::new(path, (900, 80 + 36 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let max = values.iter().cloned().fold(0.0, f64::max).max(1e-9) * 1.35;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..max, 0f64..n as f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc(unit)
        .draw()
        .map_err(err)?;
    for (i, (name, v)) in names.iter().zip(values).enumerate() {
        let y = (n - 1 - i) as f64;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.15), (*v, y + 0.85)],
                color(i).filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!(" {name}: {}", count(*v)),
                (*v, y + 0.62),
                ("sans-serif", 14),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Two bars per peer: p50 (light) and p99 (dark).
pub(super) fn latency_bars(
    path: &Path,
    title: &str,
    names: &[String],
    values: &[(f64, f64)],
) -> Chart {
    let n = names.len().max(1);
    let root = SVGBackend::new(path, (900, 80 + 44 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let max = values
        .iter()
        .map(|v| v.1.max(v.0))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.45;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..max, 0f64..n as f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("ms")
        .draw()
        .map_err(err)?;
    for (i, (name, (p50, p99))) in names.iter().zip(values).enumerate() {
        let y = (n - 1 - i) as f64;
        let c = color(i);
        chart
            .draw_series([
                Rectangle::new([(0.0, y + 0.5), (*p99, y + 0.85)], c.filled()),
                Rectangle::new([(0.0, y + 0.12), (*p50, y + 0.47)], c.mix(0.45).filled()),
            ])
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!(" {name}: p50 {:.2} / p99 {:.2} ms", p50, p99),
                (p99.max(*p50), y + 0.6),
                ("sans-serif", 13),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Lines of (connections, mean latency ms) per peer.
pub(super) fn lines(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Chart {
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let xmax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|v| v.0))
        .fold(1.0, f64::max)
        * 1.05;
    let ymax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|v| v.1))
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("users / connections (N)")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts.iter().cloned(), c.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
