//! The text renderer of `inspect`: a header line, then a table of tensors and one of storages.

use super::Snapshot;
use crate::table::Table;
use std::fmt::Write;
use tensorplay_audit::text::{human_bytes, plural, printable};
use tensorplay_engine::{Checkpoint, Format, HeldAs, Owner, WeightsOnly};

/// `addresses`: show the process address of each storage's bytes, which changes every run.
pub fn render(snapshot: &Snapshot<'_>, addresses: bool) -> anyhow::Result<String> {
    let ckpt = snapshot.checkpoint;
    let mut out = String::new();
    writeln!(
        out,
        "{}: {}, {}, {}, {}",
        printable(&ckpt.path.display().to_string(), false),
        ckpt.format,
        plural(ckpt.tensors.len(), "tensor"),
        plural(ckpt.storages.len(), "storage"),
        human_bytes(ckpt.storage_bytes())
    )?;
    if ckpt.format == Format::Torchscript {
        writeln!(
            out,
            "TorchScript archive: loading it compiles the code it carries"
        )?;
        writeln!(out, "{}", held_as_counts(ckpt))?;
    }
    if let Some(WeightsOnly::Refuses { member, reason }) = &ckpt.weights_only {
        writeln!(
            out,
            "torch.load (weights_only=True) would refuse it: in {}: {}",
            printable(member, false),
            printable(reason, false)
        )?;
    }
    for g in &ckpt.unsafe_globals {
        writeln!(
            out,
            "unsafe global {} in {} at byte {} (recorded, never executed)",
            printable(&format!("{}.{}", g.module, g.name), false),
            printable(&g.member, false),
            g.position
        )?;
    }
    if !ckpt.metadata.is_empty() {
        let pairs: Vec<String> = ckpt
            .metadata
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        writeln!(out, "metadata: {}", printable(&pairs.join(", "), false))?;
    }

    let mut tensors = Table::new(&[
        "TENSOR",
        "DTYPE",
        "SHAPE",
        "STRIDES",
        "OFFSET",
        "STORAGE",
        "DEVICE",
        "GRAD",
        "PARAM",
        "CONTIGUOUS",
        "BYTES",
    ]);
    for t in &snapshot.tensors {
        let imp = t.tensor_impl();
        let layout = imp.layout();
        // The lazy bits change what the storage's values read as: shown with the dtype.
        let dtype = match (imp.is_conj(), imp.is_neg()) {
            (true, true) => format!("{} (conj, neg)", imp.dtype()),
            (true, false) => format!("{} (conj)", imp.dtype()),
            (false, true) => format!("{} (neg)", imp.dtype()),
            (false, false) => imp.dtype().to_string(),
        };
        tensors.row(vec![
            t.name().to_owned(),
            dtype,
            format!("{:?}", layout.sizes()),
            format!("{:?}", layout.strides()),
            layout.storage_offset().to_string(),
            imp.storage().id().index().to_string(),
            imp.device().to_string(),
            yes_no(imp.requires_grad()).to_owned(),
            yes_no(imp.is_parameter()).to_owned(),
            yes_no(layout.is_contiguous()).to_owned(),
            imp.nbytes()?.to_string(),
        ]);
    }
    writeln!(out, "\nTensors")?;
    out.push_str(&tensors.render("  "));
    if !snapshot.composites.is_empty() {
        let mut composites = Table::new(&["TENSOR", "LAYOUT", "DTYPE", "SHAPE", "COMPONENTS"]);
        for c in &snapshot.composites {
            let parts: Vec<&str> = c.components.iter().map(|p| p.tensor.as_str()).collect();
            composites.row(vec![
                c.name.clone(),
                c.layout.to_owned(),
                c.dtype.to_string(),
                c.shape
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |s| format!("{s:?}")),
                parts.join(", "),
            ]);
        }
        writeln!(
            out,
            "\nSparse, nested, wrapper and block-quantised tensors (their components are above)"
        )?;
        out.push_str(&composites.render("  "));
    }

    // A distributed checkpoint's tensors saved in several chunks: each chunk is a row above.
    let split: Vec<_> = ckpt.chunked.iter().filter(|t| t.chunks.len() > 1).collect();
    if !split.is_empty() {
        let mut chunked = Table::new(&["TENSOR", "DTYPE", "SHAPE", "CHUNKS (OFFSETS + SIZES)"]);
        for t in split {
            let chunks: Vec<String> = t
                .chunks
                .iter()
                .map(|c| format!("{:?}+{:?}", c.offsets, c.sizes))
                .collect();
            chunked.row(vec![
                t.name.clone(),
                t.dtype.to_string(),
                format!("{:?}", t.shape),
                chunks.join(" "),
            ]);
        }
        writeln!(out, "\nChunked tensors")?;
        out.push_str(&chunked.render("  "));
    }

    let by_storage = ckpt.tensors_by_storage();
    let mut storages = Table::new(&[
        "STORAGE", "KEY", "DTYPE", "DEVICE", "BYTES", "DATA PTR", "TENSORS",
    ]);
    for s in &snapshot.storages {
        let ptr = s.data_ptr();
        let where_ = match ptr.owner() {
            Owner::Host { buffer, range } => {
                let address = match addresses {
                    true => format!(" {:#x}", ptr.address()),
                    false => String::new(),
                };
                format!(
                    "{}{address} ({} @ {})",
                    buffer.backend().name(),
                    buffer.source().display(),
                    buffer.file_offset().saturating_add(range.start)
                )
            }
            Owner::None(_) => "none".to_owned(),
            Owner::Deferred(d) => format!(
                "deflated ({} @ {})",
                d.buffer.source().display(),
                d.compressed.start
            ),
        };
        storages.row(vec![
            s.id().index().to_string(),
            s.key().to_owned(),
            s.dtype().to_string(),
            s.location().to_owned(),
            s.nbytes().to_string(),
            where_,
            by_storage
                .get(s.id().index())
                .map(|n| n.join(", "))
                .unwrap_or_default(),
        ]);
    }
    writeln!(out, "\nStorages")?;
    out.push_str(&storages.render("  "));
    Ok(out)
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// How many tensors a TorchScript module holds as what: `state_dict()` lists only its
/// parameters and buffers.
fn held_as_counts(ckpt: &Checkpoint) -> String {
    const ORDER: [HeldAs; 5] = [
        HeldAs::Parameter,
        HeldAs::Buffer,
        HeldAs::Attribute,
        HeldAs::SetState,
        HeldAs::Constant,
    ];
    let mut counts = [0usize; ORDER.len()];
    for held in ckpt.tensors.iter().filter_map(|t| t.held_as()) {
        if let Some(i) = ORDER.iter().position(|&h| h == held) {
            counts[i] += 1;
        }
    }
    let said: Vec<String> = ORDER
        .iter()
        .zip(counts)
        .filter(|&(_, n)| n > 0)
        .map(|(&held, n)| match held {
            HeldAs::SetState => format!("{n} for __setstate__"),
            other => plural(n, other.name()),
        })
        .collect();
    let listed: usize = ORDER
        .iter()
        .zip(counts)
        .filter(|(held, _)| held.in_state_dict())
        .map(|(_, n)| n)
        .sum();
    format!(
        "held as: {} (state_dict() lists {listed} of {})",
        if said.is_empty() {
            "nothing".to_owned()
        } else {
            said.join(", ")
        },
        plural(ckpt.tensors.len(), "tensor")
    )
}
