//! Chat templates (TP701–TP706): what each template a file carries would do when a server
//! renders it, judged from its syntax tree (`crate::template`), never rendered.

mod changed;
mod loads_template;
mod mutation;
mod sandbox_escape;
mod unparsable;
mod unusual;

pub use changed::TemplateChanged;
pub use loads_template::TemplateLoadsTemplate;
pub use mutation::TemplateMutation;
pub use sandbox_escape::TemplateSandboxEscape;
pub use unparsable::TemplateUnparsable;
pub use unusual::TemplateUnusual;

use crate::finding::Draft;
use crate::rule::Context;
use crate::template::{Judged, Kind};

/// At most this many constructs are written into a message; the count says how many more.
const SHOWN: usize = 5;

/// A draft about one template, carrying its origin and, as its payload, its hash: a baseline
/// accepts the finding only while the template is unchanged.
pub(crate) fn about(judged: &Judged, message: String, fix: &str) -> Draft {
    Draft {
        message,
        fix: fix.to_owned(),
        template: Some(judged.origin.clone()),
        payload: judged.origin.sha256.clone(),
        ..Default::default()
    }
}

/// One draft per template with constructs of `kind`: `intro`, then each construct with its
/// line (the first [`SHOWN`]).
pub(crate) fn report(ctx: &Context<'_>, out: &mut Vec<Draft>, kind: Kind, intro: &str, fix: &str) {
    for judged in &ctx.templates {
        let found: Vec<String> = judged
            .concerns(kind)
            .map(|c| format!("line {}: {}", c.line, c.what))
            .collect();
        if found.is_empty() {
            continue;
        }
        let mut message = format!("{} {intro}: {}", judged.name(), shown(&found));
        if found.len() > SHOWN {
            message.push_str(&format!(" (and {} more)", found.len() - SHOWN));
        }
        out.push(about(judged, message, fix));
    }
}

fn shown(found: &[String]) -> String {
    found
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::config::Config;
    use crate::options::Options;
    use crate::report::FileReport;
    use tensorplay_engine::{ChatTemplate, Format};

    /// The report of a checkpoint carrying `templates` at GGUF keys.
    pub(crate) fn audit_templates(templates: &[&str], options: &Options) -> FileReport {
        let mut ckpt =
            tensorplay_engine::testing::checkpoint("m.gguf", Format::Gguf, Vec::new(), Vec::new());
        ckpt.chat_templates = templates
            .iter()
            .enumerate()
            .map(|(i, t)| ChatTemplate {
                location: Some(match i {
                    0 => "tokenizer.chat_template".to_owned(),
                    _ => format!("tokenizer.chat_template.t{i}"),
                }),
                source: t.as_bytes().to_vec(),
            })
            .collect();
        crate::audit::audit(&ckpt, "m.gguf", &Config::default(), options, None)
    }

    /// The codes found in one template, in rule order.
    pub(crate) fn codes(template: &str) -> Vec<&'static str> {
        audit_templates(&[template], &Options::default())
            .findings
            .iter()
            .map(|f| f.code.as_str())
            .collect()
    }
}
