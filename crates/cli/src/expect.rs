//! Reading what `audit --expect` compares against: a layout file written by
//! `tensorplay inspect --format layout`, or any checkpoint tensorplay reads.

use anyhow::Context;
use std::io::Read;
use std::path::Path;
use tensorplay_audit::manifest::Manifest;
use tensorplay_engine::load;

/// Layout files larger than this are refused rather than read whole (a million tensors
/// take about 200 MB of layout JSON).
const MAX_LAYOUT_BYTES: u64 = 1 << 30;

pub fn load_layout(path: &Path) -> anyhow::Result<Manifest> {
    let shown = path.display();
    let mut head = [0u8; 1];
    let mut file =
        std::fs::File::open(path).with_context(|| format!("--expect {shown}: cannot open"))?;
    let starts_like_json = file
        .read(&mut head)
        .is_ok_and(|n| n == 1 && head[0] == b'{');
    if starts_like_json {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len > MAX_LAYOUT_BYTES {
            anyhow::bail!("--expect {shown}: {len} bytes is more than a layout file may be");
        }
        let text = std::fs::read(path).with_context(|| format!("--expect {shown}"))?;
        if Manifest::looks_like(&text) {
            let text = std::str::from_utf8(&text)
                .with_context(|| format!("--expect {shown}: not UTF-8"))?;
            return Manifest::from_json(text).with_context(|| format!("--expect {shown}"));
        }
    }
    // Not a layout file: a checkpoint (a sharded index is JSON too), read like any other.
    let checkpoint = load::open(path).with_context(|| {
        format!("--expect {shown}: neither a tensorplay layout nor a readable checkpoint")
    })?;
    Ok(Manifest::of(&checkpoint))
}
