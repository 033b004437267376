//! Keras models (TP711–TP716): what a `.keras` archive's config names, judged as
//! `keras.saving.load_model(..., safe_mode=True)` resolves it (`crate::keras`), never loaded.

mod foreign_function;
mod foreign_object;
mod lambda;
mod unread_hdf5;
mod unsafe_deserialization;
mod weights_not_read;

pub use foreign_function::KerasForeignFunction;
pub use foreign_object::KerasForeignObject;
pub use lambda::KerasLambda;
pub use unread_hdf5::KerasUnreadHdf5;
pub use unsafe_deserialization::KerasUnsafeDeserialization;
pub use weights_not_read::KerasWeightsNotRead;

use crate::finding::Draft;
use crate::keras::Kind;
use crate::rule::Context;

/// At most this many objects are written into a message; the count says how many more.
const SHOWN: usize = 5;

/// One draft for the model when its config has objects of `kind`: `intro`, then each object
/// with where it is (the first [`SHOWN`]).
pub(crate) fn report(ctx: &Context<'_>, out: &mut Vec<Draft>, kind: Kind, intro: &str, fix: &str) {
    let Some(judged) = &ctx.keras else {
        return;
    };
    let found: Vec<String> = judged
        .concerns(kind)
        .map(|c| format!("{} at {}", c.what, c.place))
        .collect();
    if found.is_empty() {
        return;
    }
    let shown: Vec<&str> = found.iter().take(SHOWN).map(String::as_str).collect();
    let mut message = format!("the Keras config {intro}: {}", shown.join("; "));
    if found.len() > SHOWN {
        message.push_str(&format!(" (and {} more)", found.len() - SHOWN));
    }
    out.push(Draft {
        message,
        fix: fix.to_owned(),
        ..Default::default()
    });
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::config::Config;
    use crate::options::Options;
    use crate::report::FileReport;
    use tensorplay_engine::{Format, KerasMember, KerasModel};

    /// The report of a `.keras` archive whose config is `config`, with a weights member.
    pub(crate) fn audit_config(config: serde_json::Value) -> FileReport {
        let mut ckpt = tensorplay_engine::testing::checkpoint(
            "m.keras",
            Format::Keras,
            Vec::new(),
            Vec::new(),
        );
        ckpt.keras = Some(KerasModel {
            config: Some(config),
            keras_version: Some("3.15.1".into()),
            members: vec![KerasMember {
                name: "model.weights.h5".into(),
                size: 10_000,
            }],
        });
        crate::audit::audit(
            &ckpt,
            "m.keras",
            &Config::default(),
            &Options::default(),
            None,
        )
    }

    /// The codes found, in rule order.
    pub(crate) fn codes(config: serde_json::Value) -> Vec<&'static str> {
        audit_config(config)
            .findings
            .iter()
            .map(|f| f.code.as_str())
            .collect()
    }
}
