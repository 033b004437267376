//! View safety: how tensors share and reach their storages.

mod grad_view;
mod non_contiguous;
mod out_of_bounds;
mod shared_storage;
mod storage_bloat;
mod tied_alias;
mod view_overlap;

pub use grad_view::GradView;
pub use non_contiguous::NonContiguous;
pub use out_of_bounds::ViewOutOfBounds;
pub use shared_storage::SharedStorage;
pub use storage_bloat::StorageBloat;
pub use tied_alias::TiedAlias;
pub use view_overlap::ViewOverlap;
