//! Second step of reading `tensorplay.toml`: what was written, checked against the rules
//! this build has. Every problem is collected; the config is used only when there are none.

use super::parse::{At, MaxMemory, Parsed};
use super::{Config, Ignore, Problem, Spot};
use crate::settings::RuleSettings;
use crate::text::normal_path;
use crate::Code;
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::collections::HashMap;
use tensorplay_engine::alloc::AllocatorConfig;

/// Builds the config from what was parsed, adding a problem for each rule that does not
/// exist or cannot be configured, each glob that does not compile, each bad allocator setting
/// and a `max_memory` that is not a size.
pub(super) fn validate(parsed: Parsed, problems: &mut Vec<Problem>) -> Config {
    let mut levels = HashMap::new();
    for (name, level) in &parsed.levels {
        if let Some(code) = rule_code(name, problems) {
            levels.insert(code, *level);
        }
    }
    let mut ignores = Vec::new();
    for entry in &parsed.ignores {
        let codes: Vec<Code> = entry
            .rules
            .iter()
            .filter_map(|name| rule_code(name, problems))
            .collect();
        if let Some(path) = &entry.path {
            // Matched against lexically normal paths: `./legacy/**` means `legacy/**`.
            let normal = At {
                value: normal_path(&path.value),
                spot: path.spot,
            };
            // Without `rules` the entry skips its files unaudited, with its reason.
            let skip = match (entry.has_rules, &entry.reason) {
                (false, Some(reason)) => Some(reason.value.clone()),
                _ => None,
            };
            ignores.push(Ignore {
                globs: glob_set(std::slice::from_ref(&normal), problems),
                codes,
                skip,
                pattern: path.value.clone(),
                line: path.spot.line,
                used: Default::default(),
            });
        }
    }
    let allocator = match &parsed.allocator_conf {
        None => AllocatorConfig::default(),
        Some(conf) => AllocatorConfig::parse(&conf.value).unwrap_or_else(|detail| {
            problems.push(Problem::new(conf.spot, detail));
            AllocatorConfig::default()
        }),
    };
    let max_memory = parsed.max_memory.as_ref().and_then(|at| {
        let size = match &at.value {
            MaxMemory::Text(text) => super::parse_size(text),
            MaxMemory::Bytes(n) if *n > 0 => Ok(n.unsigned_abs()),
            MaxMemory::Bytes(n) => Err(format!("'{n}' is out of range")),
        };
        size.map_err(|detail| {
            problems.push(Problem::new(at.spot, format!("`max_memory`: {detail}")))
        })
        .ok()
    });
    let defaults = RuleSettings::default();
    Config {
        levels,
        ignores,
        settings: RuleSettings {
            allowed_devices: parsed.allowed_devices.unwrap_or(defaults.allowed_devices),
            thresholds: parsed.thresholds,
            tied_allow: glob_set(&parsed.tied_allow, problems),
            allow_globals: allow_globals(&parsed.allow_globals, problems)
                .into_iter()
                .chain(allow_presets(&parsed.allow_presets, problems))
                .collect(),
        },
        allocator,
        max_memory,
        // Set by `Config::parse`, which knows the file's name.
        source: String::new(),
    }
}

/// The code of the rule a config entry names (code in any case, or name), if it is one
/// configuration may change.
fn rule_code(name: &At<String>, problems: &mut Vec<Problem>) -> Option<Code> {
    let detail = match Code::find(&name.value) {
        Some(code) if code.configurable() => return Some(code),
        Some(code) => format!(
            "rule {code} ({}) cannot be configured: a checkpoint that cannot be read, or was \
             not judged, always fails",
            code.name()
        ),
        None => crate::suggest::unknown_rule(&name.value),
    };
    problems.push(Problem::new(name.spot, detail));
    None
}

/// `[pickle] allow_globals`: exact `module.name` names, as TP501 reports them. No patterns,
/// and never a module that runs code or commands.
fn allow_globals(entries: &[At<String>], problems: &mut Vec<Problem>) -> Vec<String> {
    let mut kept = Vec::new();
    for entry in entries {
        let name = &entry.value;
        let identifier = |part: &str| {
            part.starts_with(|c: char| c == '_' || c.is_alphabetic())
                && part.chars().all(|c| c == '_' || c.is_alphanumeric())
        };
        let detail = if !name.contains('.') || !name.split('.').all(identifier) {
            format!(
                "allow_globals: '{name}' is not an exact global name: write `module.name` as TP501 reports it (e.g. \"argparse.Namespace\"); patterns are not accepted"
            )
        } else if crate::rules::safety::runs_code(name) {
            format!("allow_globals: '{name}' can run code or commands when torch.load calls it, so it cannot be allowed")
        } else {
            kept.push(name.clone());
            continue;
        };
        problems.push(Problem::new(entry.spot, detail));
    }
    kept
}

/// `[pickle] allow_presets`: the globals of each named preset ([`super::presets`]).
fn allow_presets(entries: &[At<String>], problems: &mut Vec<Problem>) -> Vec<String> {
    let mut kept = Vec::new();
    for entry in entries {
        match crate::presets::globals(&entry.value) {
            Some(names) => kept.extend(names.map(str::to_owned)),
            None => {
                let known: Vec<&str> = crate::presets::names().collect();
                problems.push(Problem::new(
                    entry.spot,
                    format!(
                        "allow_presets: '{}' is not a preset (known: {})",
                        entry.value,
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    kept
}

fn glob_set(globs: &[At<String>], problems: &mut Vec<Problem>) -> GlobSet {
    let mut builder = GlobSetBuilder::new();
    for g in globs {
        match Glob::new(&g.value) {
            Ok(glob) => {
                builder.add(glob);
            }
            Err(e) => problems.push(Problem::new(
                g.spot,
                format!("invalid glob '{}': {}", g.value, e.kind()),
            )),
        }
    }
    builder.build().unwrap_or_else(|e| {
        let spot = globs.first().map_or(
            Spot {
                line: 1,
                ..Spot::default()
            },
            |g| g.spot,
        );
        problems.push(Problem::new(
            spot,
            format!("globs do not compile together: {e}"),
        ));
        GlobSet::empty()
    })
}
