//! The text renderer of `views`: one block per shared storage.

use crate::table::Table;
use std::fmt::Write;
use tensorplay_audit::text::{human_bytes, plural, printable};
use tensorplay_engine::views::SharedStorage;
use tensorplay_engine::Checkpoint;

pub fn render(ckpt: &Checkpoint, shared: &[SharedStorage<'_>]) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "{}: {}, {} of {} viewed by more than one tensor",
        printable(&ckpt.path.display().to_string(), false),
        ckpt.format,
        shared.len(),
        plural(ckpt.storages.len(), "storage")
    )?;
    for s in shared {
        let st = s.storage;
        writeln!(
            out,
            "\nstorage {} (key '{}', {}, {}, {})",
            st.id().index(),
            printable(st.key(), false),
            st.dtype(),
            printable(st.location(), false),
            human_bytes(st.nbytes())
        )?;
        let mut table = Table::new(&["TENSOR", "BYTES", "SHAPE", "STRIDES", "OFFSET"]);
        for v in &s.views {
            let layout = v.tensor.tensor_impl().layout();
            table.row(vec![
                v.tensor.name().to_owned(),
                v.bytes
                    .as_ref()
                    .map_or("none".to_owned(), |r| format!("[{}, {})", r.start, r.end)),
                format!("{:?}", layout.sizes()),
                format!("{:?}", layout.strides()),
                layout.storage_offset().to_string(),
            ]);
        }
        out.push_str(&table.render("  "));
        for &(i, j, rel) in &s.relations {
            if let (Some(a), Some(b)) = (s.views.get(i as usize), s.views.get(j as usize)) {
                writeln!(
                    out,
                    "  {} {} {}",
                    a.tensor.name(),
                    rel.name(),
                    b.tensor.name()
                )?;
            }
        }
    }
    Ok(out)
}
