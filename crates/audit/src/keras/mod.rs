//! Keras v3 models judged from their `config.json`, as `keras.saving.load_model(...,
//! safe_mode=True)` would resolve it (keras/src/saving/serialization_lib.py), never resolving
//! anything: every object the config names is looked up in tables generated from the pinned
//! Keras (`allowlist`), and what Keras would refuse, or could run, is a concern. Where Keras'
//! own check is narrower, tensorplay fails closed: a `Lambda` layer fails whatever its function,
//! and an object naming no module fails. The rules of the `keras` family report from this.

pub mod allowlist;

use serde_json::{Map, Value};
use tensorplay_engine::{KerasMember, KerasModel};

/// What an object in the config is that a rule reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `Lambda` layer or a `__lambda__` (marshalled Python bytecode).
    Lambda,
    /// A class outside Keras' own serializable classes, or an object Keras cannot place.
    Foreign,
    /// A function outside Keras' built-in modeling functions.
    Function,
    /// An API Keras refuses as non-modeling (`enable_unsafe_deserialization`, `load_model`…).
    NonModeling,
}

/// One object found in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concern {
    /// Which rule reports it.
    pub kind: Kind,
    /// Where: its JSON path, with the layer's name when it has one.
    pub place: String,
    /// What it is, for people.
    pub what: String,
}

/// A Keras model with what its config names.
#[derive(Debug, Clone)]
pub struct Judged {
    /// What the walk found, in config order.
    pub concerns: Vec<Concern>,
    /// Whether the config was read: `false` for an HDF5 file (a legacy `.h5` model's config
    /// is an HDF5 attribute), which is then not judged at all.
    pub config_read: bool,
    /// `metadata.json`'s Keras version.
    pub keras_version: Option<String>,
    /// The archive's members besides its config and metadata (the weights, never read).
    pub members: Vec<KerasMember>,
}

impl Judged {
    /// Its concerns of one kind.
    pub fn concerns(&self, kind: Kind) -> impl Iterator<Item = &Concern> {
        self.concerns.iter().filter(move |c| c.kind == kind)
    }
}

/// Walks one model's config.
pub fn judge(model: &KerasModel) -> Judged {
    let mut concerns = Vec::new();
    if let Some(config) = &model.config {
        walk(config, "$", &mut concerns);
    }
    Judged {
        concerns,
        config_read: model.config.is_some(),
        keras_version: model.keras_version.clone(),
        members: model.members.clone(),
    }
}

/// Class names `deserialize_keras_object` turns into data, building nothing it looks up.
const DATA: &[&str] = &[
    "__keras_tensor__",
    "__tensor__",
    "__numpy__",
    "__bytes__",
    "__ellipsis__",
    "__slice__",
];

/// The name Keras' own switch to unsafe loading goes by; named anywhere, the file fails.
const UNSAFE_SWITCH: &str = "enable_unsafe_deserialization";

fn walk(value: &Value, path: &str, out: &mut Vec<Concern>) {
    match value {
        Value::Object(map) => {
            if map.contains_key("class_name") {
                object(map, path, out);
            }
            for (key, child) in map {
                walk(child, &format!("{path}.{}", short(key, KEY_CHARS)), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, &format!("{path}[{i}]"), out);
            }
        }
        Value::String(s) if s.contains(UNSAFE_SWITCH) => out.push(Concern {
            kind: Kind::NonModeling,
            place: path.to_owned(),
            what: format!(
                "the string {:?} names Keras' switch to unsafe loading",
                short(s, KEY_CHARS)
            ),
        }),
        _ => {}
    }
}

/// At most this many characters of a key go into a path, and of a concern into a message: a
/// hostile config's names are as long as it likes.
const KEY_CHARS: usize = 64;
const CONCERN_CHARS: usize = 300;

/// `text`, cut to `chars` characters with `…` where it was cut.
fn short(text: &str, chars: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(chars) {
        None => text.into(),
        Some((at, _)) => format!("{}…", &text[..at]).into(),
    }
}

/// Judges one `{"module", "class_name", "config", "registered_name"}` object.
fn object(map: &Map<String, Value>, path: &str, out: &mut Vec<Concern>) {
    let place = match map
        .get("config")
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
    {
        Some(name) => format!("{path} (layer '{}')", short(name, KEY_CHARS)),
        None => path.to_owned(),
    };
    let mut push = |kind, what: String| {
        out.push(Concern {
            kind,
            place: place.clone(),
            what: short(&what, CONCERN_CHARS).into_owned(),
        })
    };
    let Some(class_name) = map.get("class_name").and_then(Value::as_str) else {
        push(
            Kind::Foreign,
            "an object whose class_name is not a string".into(),
        );
        return;
    };
    let module = match map.get("module") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.as_str()),
        Some(_) => {
            push(
                Kind::Foreign,
                format!("{class_name} with a module that is not a string"),
            );
            return;
        }
    };
    let in_keras = module.is_some_and(|m| m == "keras" || m.starts_with("keras."));
    match class_name {
        c if DATA.contains(&c) => {}
        "__lambda__" => push(
            Kind::Lambda,
            "a Python lambda (marshalled bytecode Keras would run)".into(),
        ),
        "__typespec__" => push(
            Kind::Foreign,
            "a TensorFlow type spec (resolved by module and name)".into(),
        ),
        "function" => function(map, module, in_keras, &mut push),
        "Lambda" => push(
            Kind::Lambda,
            format!(
                "a Lambda layer ({}.Lambda), which runs the function its config names",
                module.unwrap_or("no module")
            ),
        ),
        class => {
            let Some(module) = module else {
                push(
                    Kind::Foreign,
                    format!("{class}, named with no module (a custom object Keras cannot place)"),
                );
                return;
            };
            let full = format!("{module}.{class}");
            if in_keras && allowlist::NON_MODELING.contains(&full.as_str()) {
                push(
                    Kind::NonModeling,
                    format!("{full}, which Keras refuses as non-modeling"),
                );
            } else if !in_keras || allowlist::CLASSES.binary_search(&full.as_str()).is_err() {
                push(
                    Kind::Foreign,
                    format!("{full}, outside Keras' serializable classes"),
                );
            } else if let Some(registered) = registered_name(map).filter(|r| *r != class) {
                push(
                    Kind::Foreign,
                    format!("{full} registered as '{registered}' (a custom object's name)"),
                );
            }
        }
    }
}

/// An object's `registered_name`, when it names one.
fn registered_name(map: &Map<String, Value>) -> Option<&str> {
    map.get("registered_name").and_then(Value::as_str)
}

/// Judges a `class_name: "function"` object: its `config` names the function.
fn function(
    map: &Map<String, Value>,
    module: Option<&str>,
    in_keras: bool,
    push: &mut impl FnMut(Kind, String),
) {
    let Some(name) = map.get("config").and_then(Value::as_str) else {
        push(
            Kind::Function,
            "a function whose name is not a string".into(),
        );
        return;
    };
    match module {
        // Keras' built-in functions are saved under `builtins` by their bare name.
        Some("builtins") => {
            let found = allowlist::FUNCTION_MODULES.iter().any(|m| {
                allowlist::FUNCTIONS
                    .binary_search(&format!("{m}.{name}").as_str())
                    .is_ok()
            });
            if !found {
                push(
                    Kind::Function,
                    format!("the function '{name}', not one of Keras' built-in functions"),
                );
            }
        }
        Some(module) if in_keras => {
            let full = format!("{module}.{name}");
            let refused = allowlist::NON_MODELING.contains(&full.as_str())
                || allowlist::NON_MODELING
                    .iter()
                    .any(|api| api.rsplit('.').next() == Some(name));
            if refused {
                push(
                    Kind::NonModeling,
                    format!("{full}, which Keras refuses as non-modeling"),
                );
            } else if allowlist::FUNCTIONS.binary_search(&full.as_str()).is_err() {
                push(
                    Kind::Function,
                    format!("the function {full}, outside Keras' modeling functions"),
                );
            }
        }
        Some(module) => push(
            Kind::Function,
            format!("the function {module}.{name}, outside Keras"),
        ),
        None => push(
            Kind::Function,
            format!("the function '{name}', named with no module"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kinds(config: Value) -> Vec<Kind> {
        let model = KerasModel {
            config: Some(config),
            keras_version: None,
            members: Vec::new(),
        };
        judge(&model).concerns.iter().map(|c| c.kind).collect()
    }

    fn obj(module: Value, class_name: &str, config: Value) -> Value {
        json!({"module": module, "class_name": class_name, "config": config, "registered_name": null})
    }

    #[test]
    fn the_tables_are_sorted_for_binary_search() {
        assert!(allowlist::CLASSES.windows(2).all(|w| w[0] < w[1]));
        assert!(allowlist::FUNCTIONS.windows(2).all(|w| w[0] < w[1]));
        assert!(allowlist::CLASSES.contains(&"keras.layers.Dense"));
        assert!(!allowlist::CLASSES.contains(&"keras.layers.Lambda"));
        assert!(!allowlist::CLASSES.contains(&"keras.layers.TFSMLayer"));
    }

    #[test]
    fn keras_classes_and_functions_pass() {
        let dense = obj(
            json!("keras.layers"),
            "Dense",
            json!({"name": "d", "activation": "relu",
            "kernel_initializer": obj(json!("keras.initializers"), "GlorotUniform", json!({}))}),
        );
        let relu = json!({"module": "builtins", "class_name": "function", "config": "relu",
            "registered_name": "function"});
        let gelu =
            json!({"module": "keras.activations", "class_name": "function", "config": "gelu"});
        let data = obj(
            json!(null),
            "__numpy__",
            json!({"value": [1], "dtype": "int32"}),
        );
        let model = KerasModel {
            config: Some(json!([dense, relu, gelu, data])),
            keras_version: None,
            members: Vec::new(),
        };
        assert_eq!(judge(&model).concerns, []);
    }

    #[test]
    fn what_keras_refuses_or_would_run_is_a_concern() {
        let cases = [
            (
                obj(json!("keras.layers"), "Lambda", json!({})),
                Kind::Lambda,
            ),
            (
                obj(json!(null), "__lambda__", json!({"value": "4wEA"})),
                Kind::Lambda,
            ),
            (
                obj(json!("collections"), "OrderedDict", json!({})),
                Kind::Foreign,
            ),
            (
                obj(json!("keras.src.saving.saving_lib"), "zipfile", json!({})),
                Kind::Foreign,
            ),
            (obj(json!(null), "MyLayer", json!({})), Kind::Foreign),
            (
                obj(json!("keras.layers"), "TFSMLayer", json!({})),
                Kind::Foreign,
            ),
            (
                json!({"module": "os", "class_name": "function", "config": "system"}),
                Kind::Function,
            ),
            (
                json!({"module": "builtins", "class_name": "function", "config": "exec"}),
                Kind::Function,
            ),
            (
                json!({"module": "keras.ops", "class_name": "function", "config": "add"}),
                Kind::Function,
            ),
            (
                json!({"module": "keras.config", "class_name": "function",
                "config": "enable_unsafe_deserialization"}),
                Kind::NonModeling,
            ),
            (
                json!({"module": "keras.src.saving.saving_api", "class_name": "function",
                "config": "load_model"}),
                Kind::NonModeling,
            ),
            (json!({"class_name": 3, "config": {}}), Kind::Foreign),
        ];
        for (config, kind) in cases {
            assert!(kinds(config.clone()).contains(&kind), "{config}");
        }
        let renamed = json!({"module": "keras.layers", "class_name": "Dense", "config": {},
            "registered_name": "pkg>Dense"});
        assert_eq!(kinds(renamed), [Kind::Foreign]);
        assert_eq!(
            kinds(json!({"note": "keras.config.enable_unsafe_deserialization()"})),
            [Kind::NonModeling]
        );
    }

    #[test]
    fn long_names_are_cut_in_paths_and_messages() {
        let long = "k".repeat(10_000);
        let config =
            json!({ long.clone(): {"module": long.clone(), "class_name": long, "config": {}} });
        let model = KerasModel {
            config: Some(config),
            keras_version: None,
            members: Vec::new(),
        };
        let judged = judge(&model);
        let concern = &judged.concerns[0];
        assert_eq!(concern.kind, Kind::Foreign);
        assert!(
            concern.place.chars().count() <= 2 + KEY_CHARS + 1,
            "{}",
            concern.place
        );
        assert!(concern.what.chars().count() <= CONCERN_CHARS + 1);
        assert!(concern.what.ends_with('…'));
    }

    #[test]
    fn a_concern_names_the_layer_and_its_path() {
        let model = KerasModel {
            config: Some(
                json!({"config": {"layers": [obj(json!("keras.layers"), "Lambda", json!({"name": "evil"}))]}}),
            ),
            keras_version: None,
            members: Vec::new(),
        };
        let judged = judge(&model);
        assert_eq!(
            judged.concerns[0].place,
            "$.config.layers[0] (layer 'evil')"
        );
    }
}
