//! Every rule, one file each, in one folder per family.

pub mod device;
pub mod expect;
pub mod integrity;
pub mod keras;
pub mod memory;
pub mod numeric;
pub mod provenance;
pub mod safety;
pub mod template;
pub mod view;

use crate::rule::Context;

/// Names of the tensors viewing storage `id`, in checkpoint order.
pub(crate) fn names_in_storage(ctx: &Context<'_>, id: usize) -> Vec<String> {
    ctx.ckpt
        .tensors
        .iter()
        .filter(|t| t.storage_index() == id)
        .map(|t| t.name().to_owned())
        .collect()
}

pub(crate) use crate::text::{human_bytes, plural};
