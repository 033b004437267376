//! Every rule, one file each, in one folder per family.

pub mod device;
pub mod integrity;
pub mod memory;
pub mod numeric;
pub mod safety;
pub mod view;

use crate::rule::Context;

/// Names of the tensors viewing storage `id`, in checkpoint order.
pub(crate) fn names_in_storage(ctx: &Context<'_>, id: usize) -> Vec<String> {
    ctx.ckpt
        .tensors
        .iter()
        .filter(|t| t.tensor_impl().storage().id() == id)
        .map(|t| t.name().to_owned())
        .collect()
}

/// Bytes for people: `3.9 KiB`, `1.0 GiB`, `512 B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(4000), "3.9 KiB");
        assert_eq!(super::human_bytes(1 << 30), "1.0 GiB");
    }
}
