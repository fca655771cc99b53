//! Utilisation charts with `plotters`: one panel per run, time in seconds across, utilisation in
//! % up, a horizontal 100 % ceiling, one legend entry per series and a marker at each throttle.
//!
//! SVG or PNG by the file extension. Neither needs a system font: the SVG backend writes `<text>`
//! elements, and label sizes and PNG glyphs come from DejaVu Sans, embedded from the `dejavu`
//! crate and drawn by plotters' pure-Rust `ab_glyph` text path.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

/// Default size of one panel, pixels.
pub const PANEL_SIZE: (u32, u32) = (420, 320);

/// One line: a partition's utilisation over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend entry (e.g. `p0`).
    pub name: String,
    /// `(second, utilisation %)` points.
    pub points: Vec<(f64, f64)>,
    /// `(second, utilisation %)` where the series throttled.
    pub throttles: Vec<(f64, f64)>,
}

/// One chart panel (e.g. one strategy's run).
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The caption.
    pub title: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// Colours of the series, in order (the ceiling is black, throttle marks red).
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];

/// The output format, from a file name's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.svg`.
    Svg,
    /// `.png`.
    Png,
}

impl Format {
    /// The format `path`'s extension names, if it is `.svg` or `.png` (any case).
    pub fn of(path: &Path) -> Result<Self, String> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("svg") => Ok(Self::Svg),
            Some("png") => Ok(Self::Png),
            _ => Err(format!(
                "--plot {}: name a .svg or .png file (the extension picks the format)",
                path.display()
            )),
        }
    }
}

/// Registers the embedded font once; plotters looks fonts up by family name.
fn register_font() {
    static FONT: Once = Once::new();
    FONT.call_once(|| {
        // DejaVu Sans is a valid TrueType font; a failure here would only lose text.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// Writes the panels side by side to `path`, as SVG or PNG by its extension.
pub fn write(path: &Path, panels: &[Panel]) -> Result<(), String> {
    let bytes = match Format::of(path)? {
        Format::Svg => svg(panels)?.into_bytes(),
        Format::Png => png(panels)?,
    };
    std::fs::write(path, bytes).map_err(|e| {
        format!(
            "cannot write the chart to {}: {e}: check the directory exists and is writable",
            path.display()
        )
    })
}

/// The whole chart's size for `panels`.
fn size(panels: &[Panel]) -> (u32, u32) {
    let n = u32::try_from(panels.len().max(1)).unwrap_or(u32::MAX);
    (PANEL_SIZE.0.saturating_mul(n), PANEL_SIZE.1)
}

/// The chart as an SVG document.
pub fn svg(panels: &[Panel]) -> Result<String, String> {
    register_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size(panels)).into_drawing_area();
        draw(&root, panels)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The chart as a PNG image (8-bit RGB).
pub fn png(panels: &[Panel]) -> Result<Vec<u8>, String> {
    register_font();
    let (w, h) = size(panels);
    let len = usize::try_from(u64::from(w) * u64::from(h) * 3).map_err(|e| e.to_string())?;
    let mut rgb = vec![0u8; len];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root, panels)?;
        root.present().map_err(|e| e.to_string())?;
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Draws every panel on `root`, split evenly left to right.
fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, panels: &[Panel]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel).map_err(e)?;
    }
    Ok(())
}

/// One panel: mesh with units, the ceiling, the series and the throttle marks, then the legend.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let points = panel.series.iter().flat_map(|s| s.points.iter());
    let (x_max, y_top) = points.fold((1.0f64, 0.0f64), |(x, y), (px, py)| {
        (x.max(*px), y.max(*py))
    });
    // Room above the ceiling (and above the highest point) for the legend.
    let y_max = (y_top * 1.1).max(150.0);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_labels((x_max as usize).saturating_add(1).clamp(2, 10))
        .x_desc("time (s)")
        .y_desc("write utilisation (%)")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}%"))
        .label_style(("sans-serif", 11))
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, 100.0), (x_max, 100.0)],
            BLACK.stroke_width(2),
        ))?
        .label("100 % ceiling")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    for (i, s) in panel.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(&s.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
    }
    let throttles: Vec<(f64, f64)> = panel
        .series
        .iter()
        .flat_map(|s| s.throttles.iter().copied())
        .collect();
    if !throttles.is_empty() {
        chart
            .draw_series(
                throttles
                    .iter()
                    .map(|p| Cross::new(*p, 4, RED.stroke_width(2))),
            )?
            .label("throttled")
            .legend(|(x, y)| Cross::new((x + 8, y), 4, RED.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 11))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panels() -> Vec<Panel> {
        vec![Panel {
            title: "naive".into(),
            series: vec![
                Series {
                    name: "p0".into(),
                    points: vec![(0.0, 20.0), (1.0, 140.0), (2.0, 100.0)],
                    throttles: vec![(1.0, 140.0)],
                },
                Series {
                    name: "p1".into(),
                    points: vec![(0.0, 5.0), (1.0, 7.0), (2.0, 6.0)],
                    throttles: vec![],
                },
            ],
        }]
    }

    #[test]
    fn the_svg_has_units_legend_and_a_horizontal_ceiling() {
        let svg = svg(&panels()).expect("svg");
        // The SVG backend writes each text on its own line inside <text>…</text>.
        let texts: Vec<&str> = svg.lines().map(str::trim).collect();
        for text in [
            "time (s)",
            "write utilisation (%)",
            "100%",
            "100 % ceiling",
            "p0",
            "p1",
            "throttled",
            "naive",
        ] {
            assert!(texts.contains(&text), "missing text {text:?}");
        }
        // The ceiling: a black polyline 2 px wide whose points all share one y.
        let horizontal = |p: &&str| {
            let points = p
                .split("points=\"")
                .nth(1)
                .and_then(|p| p.split('"').next())
                .unwrap_or_default();
            let ys: Vec<&str> = points
                .split_whitespace()
                .filter_map(|xy| xy.split(',').nth(1))
                .collect();
            let xs: Vec<f64> = points
                .split_whitespace()
                .filter_map(|xy| xy.split(',').next()?.parse().ok())
                .collect();
            // Across the plot, not the legend's 16 px sample.
            let wide = xs.len() >= 2 && xs[xs.len() - 1] - xs[0] > 200.0;
            wide && ys.iter().all(|y| *y == ys[0])
        };
        assert!(
            svg.split("<polyline")
                .skip(1)
                .filter(|p| p.contains("stroke=\"#000000\"") && p.contains("stroke-width=\"2\""))
                .any(|p| horizontal(&p)),
            "no horizontal ceiling line"
        );
    }

    #[test]
    fn the_png_is_a_png_and_the_extension_picks_the_format() {
        let png = png(&panels()).expect("png");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(Format::of(Path::new("a/b.PNG")), Ok(Format::Png));
        assert_eq!(Format::of(Path::new("chart.svg")), Ok(Format::Svg));
        assert!(Format::of(Path::new("chart.jpg")).is_err());
        assert!(Format::of(Path::new("chart")).is_err());
    }

    #[test]
    fn write_picks_png_or_svg_by_the_extension() {
        let dir = std::env::temp_dir().join(format!("heatsink-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (png_path, svg_path) = (dir.join("u.png"), dir.join("u.svg"));
        write(&png_path, &panels()).expect("png");
        write(&svg_path, &panels()).expect("svg");
        let png = std::fs::read(&png_path).expect("read png");
        let svg = std::fs::read_to_string(&svg_path).expect("read svg");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        assert!(write(&dir.join("u.gif"), &panels()).is_err());
    }
}
