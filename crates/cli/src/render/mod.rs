//! One renderer per output format; each only reads a `Report`.

pub mod cyclonedx;
pub mod files;
pub mod github;
pub mod gitlab;
pub mod html;
pub mod human;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod sarif;
pub mod stdout;
mod timestamp;
mod xml;

use tensorplay_audit::report::FailOn;

/// `--fail-on`'s value as the reports name it.
pub fn fail_on_name(fail_on: FailOn) -> &'static str {
    match fail_on {
        FailOn::Error => "error",
        FailOn::Warning => "warning",
        FailOn::Never => "never",
    }
}
