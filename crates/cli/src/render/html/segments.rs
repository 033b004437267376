//! The simulated allocator's segment map as SVG: a bar per segment, a rectangle per block,
//! coloured by the storage it holds, free space hatched grey.

use super::escape;
use std::fmt::Write;
use tensorplay_audit::report::SegmentMap;
use tensorplay_audit::text::human_bytes;

/// Beyond these, the map says how many more rather than drawing them: the file stays small.
const MAX_SEGMENTS: usize = 24;
const MAX_BLOCKS: usize = 48;

const WIDTH: f64 = 900.0;
const ROW: f64 = 26.0;
const LABEL: f64 = 150.0;

/// The map, or a line saying there is none; `names[id]` names the tensors of storage `id`.
pub fn segment_map(segments: &[SegmentMap], names: &[String]) -> String {
    let named = |id: usize| {
        names
            .get(id)
            .filter(|n| !n.is_empty())
            .map_or_else(|| format!("storage {id}"), |n| format!("storage {id}: {n}"))
    };
    if segments.is_empty() {
        return "<p class=\"note\">No segment reserved: no storage holds bytes.</p>".to_owned();
    }
    let shown = &segments[..segments.len().min(MAX_SEGMENTS)];
    let height = ROW * shown.len() as f64 + 4.0;
    let mut out = format!(
        r#"<svg class="segments" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="segment map">"#
    );
    let mut hidden_blocks = 0usize;
    for (row, seg) in shown.iter().enumerate() {
        let y = ROW * row as f64 + 2.0;
        let _ = write!(
            out,
            r#"<text class="seglabel" x="0" y="{:.1}">#{row} {} ({})</text>"#,
            y + 15.0,
            human_bytes(seg.size),
            seg.pool
        );
        let scale = (WIDTH - LABEL) / seg.size.max(1) as f64;
        let _ = write!(
            out,
            r#"<rect class="segment" x="{LABEL}" y="{y:.1}" width="{:.1}" height="20"/>"#,
            WIDTH - LABEL
        );
        // Free space first, then the blocks that hold storages on top: a 512-byte block in a
        // 2 MiB segment must stay visible.
        let drawn = &seg.blocks[..seg.blocks.len().min(MAX_BLOCKS)];
        let free = drawn.iter().filter(|b| b.storage.is_none());
        for block in free.chain(drawn.iter().filter(|b| b.storage.is_some())) {
            let x = LABEL + block.offset as f64 * scale;
            let (class, style, what, min) = match block.storage {
                Some(id) => (
                    "block",
                    format!(r#" style="fill:hsl({},55%,50%)""#, (id * 47) % 360),
                    named(id),
                    3.0,
                ),
                None => ("free", String::new(), "free".to_owned(), 1.0),
            };
            let w = (block.size as f64 * scale).max(min);
            let _ = write!(
                out,
                r#"<rect class="{class}"{style} x="{x:.1}" y="{y:.1}" width="{w:.1}" height="20"><title>{}: {} at offset {}</title></rect>"#,
                escape(&what),
                human_bytes(block.size),
                block.offset
            );
            // The tensor's name where it fits (about 6 px a character), cut at its start: a
            // name's end says most (`….q_proj.weight`).
            let room = ((w - 6.0) / 6.0).floor().max(0.0) as usize;
            let label = match block.storage {
                None => "free".to_owned(),
                Some(id) => names
                    .get(id)
                    .and_then(|n| n.split(" and ").next())
                    .filter(|n| !n.is_empty())
                    .map_or_else(|| format!("storage {id}"), |n| n.to_owned()),
            };
            let count = label.chars().count();
            if room >= 4 {
                let shown = if count <= room {
                    label
                } else {
                    let tail: String = label.chars().skip(count - (room - 1)).collect();
                    format!("…{tail}")
                };
                let _ = write!(
                    out,
                    r#"<text class="blocklabel" x="{:.1}" y="{:.1}">{}</text>"#,
                    x + 3.0,
                    y + 14.0,
                    escape(&shown)
                );
            }
        }
        hidden_blocks += seg.blocks.len().saturating_sub(MAX_BLOCKS);
    }
    out.push_str("</svg><ul class=\"holds note\">");
    for (row, seg) in shown.iter().enumerate() {
        holds(row, seg, names, &mut out);
    }
    out.push_str("</ul>");
    let hidden_segments = segments.len() - shown.len();
    if hidden_blocks > 0 || hidden_segments > 0 {
        let _ = write!(
            out,
            r#"<p class="note">Drawn: the first {MAX_BLOCKS} blocks of each of the first {MAX_SEGMENTS} segments; and {hidden_blocks} more blocks, and {hidden_segments} more segments.</p>"#
        );
    }
    out
}

/// Which storages a segment holds and how much of it is free, in words.
fn holds(row: usize, seg: &SegmentMap, names: &[String], out: &mut String) {
    let ids: Vec<String> = seg
        .blocks
        .iter()
        .filter_map(|b| b.storage)
        .take(MAX_BLOCKS)
        .map(|id| match names.get(id).filter(|n| !n.is_empty()) {
            Some(n) => format!("{id} ({})", escape(n)),
            None => id.to_string(),
        })
        .collect();
    let held = seg.blocks.iter().filter(|b| b.storage.is_some()).count();
    let free: u64 = seg
        .blocks
        .iter()
        .filter(|b| b.storage.is_none())
        .map(|b| b.size)
        .sum();
    let more = held - ids.len();
    let _ = write!(
        out,
        "<li>#{row}: storages {}{} in {held} blocks; {} free</li>",
        if ids.is_empty() {
            "none".to_owned()
        } else {
            ids.join(", ")
        },
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        human_bytes(free)
    );
}
