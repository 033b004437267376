//! Inline SVG charts: the storage-size histogram and the line charts of a run's time series.
//! Plain SVG with `<title>` tooltips: no script, nothing fetched.

use super::escape;
use std::fmt::Write;
use tensorplay_audit::report::SizeBin;
use tensorplay_audit::text::human_bytes;

const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 170.0;
/// Room for the axis title and labels (`1023.9 MiB` fits).
const LEFT: f64 = 84.0;
const BOTTOM: f64 = 56.0;
const TOP: f64 = 12.0;
/// Width of a character of the 11px tick font, for spacing labels (an upper bound).
const CHAR: f64 = 6.6;
/// Characters of a checkpoint's name under its point.
const NAME: usize = 18;

/// A bar per power of two from the smallest to the largest size present (empty bins drawn
/// as gaps, so the axis stays log-scale), empty storages first.
pub fn histogram(bins: &[SizeBin]) -> String {
    let mut bars: Vec<(String, usize)> = Vec::new();
    if let Some(empty) = bins.iter().find(|b| b.log2.is_none()) {
        bars.push(("0 B".to_owned(), empty.count));
    }
    let powers: Vec<(u32, usize)> = bins
        .iter()
        .filter_map(|b| b.log2.map(|k| (k, b.count)))
        .collect();
    if let (Some(&(low, _)), Some(&(high, _))) = (powers.first(), powers.last()) {
        for k in low..=high {
            let count = powers.iter().find(|(p, _)| *p == k).map_or(0, |(_, c)| *c);
            bars.push((human_bytes(1u64 << k), count));
        }
    }
    let max = bars.iter().map(|(_, c)| *c).max().unwrap_or(0).max(1);
    let plot_h = HEIGHT - BOTTOM - TOP;
    let slot = (WIDTH - LEFT) / bars.len().max(1) as f64;
    let mut svg = open_svg("storage sizes, log2 bins");
    axis(&mut svg, &max.to_string(), "storages", "size (log2 bins)");
    // Label every bar whose label fits its share of the axis, else every few.
    let widest = bars
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(1) as f64
        * CHAR;
    let every = ((widest + 4.0) / slot).ceil().max(1.0) as usize;
    for (i, (label, count)) in bars.iter().enumerate() {
        let h = plot_h * *count as f64 / max as f64;
        let x = LEFT + slot * i as f64;
        let _ = write!(
            svg,
            r#"<rect class="bar" x="{:.1}" y="{:.1}" width="{:.1}" height="{h:.1}"><title>{} storages of at least {}</title></rect>"#,
            x + 1.0,
            TOP + plot_h - h,
            (slot - 2.0).max(1.0),
            count,
            escape(label)
        );
        if i % every == 0 {
            let _ = write!(
                svg,
                r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x + slot / 2.0,
                HEIGHT - BOTTOM + 14.0,
                escape(label)
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// One value per checkpoint in path order (`None`: not measured, left as a gap), with an
/// optional threshold drawn as a dashed line; `format` writes values for people. Each point
/// is named by its checkpoint's file name (slanted when they would touch).
pub fn line_chart(
    title: &str,
    labels: &[String],
    values: &[Option<f64>],
    threshold: Option<f64>,
    ceiling: Option<f64>,
    format: fn(f64) -> String,
) -> String {
    // Axes with nothing on them read as a broken chart: say why there is none.
    if values.iter().all(Option::is_none) {
        return r#"<p class="note">Not measured for these checkpoints.</p>"#.to_owned();
    }
    let top = values
        .iter()
        .flatten()
        .copied()
        .chain(threshold)
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    // A share is drawn up to 100 %, not past it.
    let top = ceiling.map_or(top, |c| top.min(c));
    let plot_h = HEIGHT - BOTTOM - TOP;
    let names: Vec<String> = labels.iter().map(|l| short_name(l)).collect();
    let widest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0) as f64 * CHAR;
    let gaps = (values.len().max(2) - 1) as f64;
    // Room on the right for half the last name, when names stand upright under their points.
    let upright_step = (WIDTH - LEFT - 8.0 - widest / 2.0) / gaps;
    let slant = widest + 4.0 > upright_step;
    let step = if slant {
        (WIDTH - LEFT - 16.0) / gaps
    } else {
        upright_step
    };
    let x = |i: usize| LEFT + 8.0 + step * i as f64;
    let y = |v: f64| TOP + plot_h * (1.0 - v / top);
    let mut svg = open_svg(title);
    axis(&mut svg, &format(top), title, "checkpoint");
    if let Some(t) = threshold {
        let _ = write!(
            svg,
            r#"<line class="threshold" x1="{LEFT}" x2="{WIDTH}" y1="{0:.1}" y2="{0:.1}"><title>threshold {1}</title></line>"#,
            y(t),
            format(t)
        );
    }
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| format!("{:.1},{:.1}", x(i), y(v))))
        .collect();
    let _ = write!(
        svg,
        r#"<polyline class="line" points="{}"/>"#,
        points.join(" ")
    );
    for (i, (label, value)) in labels.iter().zip(values).enumerate() {
        if let Some(v) = value {
            let _ = write!(
                svg,
                r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="3.5"><title>{}: {}</title></circle>"#,
                x(i),
                y(*v),
                escape(label),
                format(*v)
            );
        }
        let (tx, ty) = (x(i), HEIGHT - BOTTOM + 13.0);
        let (anchor, turn) = if slant {
            (
                "end",
                format!(r#" transform="rotate(-30 {tx:.1} {ty:.1})""#),
            )
        } else {
            ("middle", String::new())
        };
        let _ = write!(
            svg,
            r#"<text class="tick" x="{tx:.1}" y="{ty:.1}" text-anchor="{anchor}"{turn}><title>{}</title>{}</text>"#,
            escape(label),
            escape(&names[i])
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A checkpoint's file name, its middle elided past [`NAME`] characters.
fn short_name(path: &str) -> String {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= NAME {
        return name.to_owned();
    }
    let head: String = chars[..NAME / 2].iter().collect();
    let tail: String = chars[chars.len() - (NAME / 2 - 1)..].iter().collect();
    format!("{head}…{tail}")
}

fn open_svg(label: &str) -> String {
    format!(
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{}">"#,
        escape(label)
    )
}

/// The two axes, the top value's label and the axes' titles (the y title turned along
/// its axis).
fn axis(svg: &mut String, top: &str, y_title: &str, x_title: &str) {
    let base = HEIGHT - BOTTOM;
    let _ = write!(
        svg,
        r#"<line class="axis" x1="{LEFT}" x2="{WIDTH}" y1="{base}" y2="{base}"/><line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text><text class="tick" x="{:.1}" y="{base}" text-anchor="end">0</text>"#,
        LEFT - 4.0,
        TOP + 10.0,
        escape(top),
        LEFT - 4.0
    );
    let middle = TOP + (base - TOP) / 2.0;
    let _ = write!(
        svg,
        r#"<text class="axistitle" x="12" y="{middle:.1}" text-anchor="middle" transform="rotate(-90 12 {middle:.1})">{}</text><text class="axistitle" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        escape(y_title),
        LEFT + (WIDTH - LEFT) / 2.0,
        HEIGHT - 4.0,
        escape(x_title)
    );
}

#[cfg(test)]
mod tests {
    use super::short_name;

    #[test]
    fn checkpoints_are_named_by_their_file_names() {
        assert_eq!(short_name("runs/a/epoch_10.pt"), "epoch_10.pt");
        assert_eq!(
            short_name("x/model-checkpoint-000123.safetensors"),
            "model-che…etensors"
        );
    }
}
