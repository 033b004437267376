//! PyTorch formats beyond the truth comparison: payloads stay inert, `views` explains shared
//! storages, and broken archives give their clear errors.

use crate::common::{read_json, root, stderr, stdout, tensorplay};
use std::process::Command;

/// The payload fixtures carry `os.system("echo tensorplay-payload-ran > tensorplay_payload_marker")`
/// and `importlib.import_module(...)`: reading them must list the globals and run nothing.
#[test]
fn payloads_are_reported_and_never_run() {
    let dir = std::env::temp_dir().join(format!("tensorplay-payload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (fixture, module, name) in [
        ("payload_os_system.pt", "posix", "system"),
        ("payload_importlib.pt", "importlib", "import_module"),
    ] {
        let path = root().join("fixtures/pytorch").join(fixture);
        for format in ["text", "json"] {
            let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
                .args(["inspect", "--format", format])
                .arg(&path)
                .current_dir(&dir)
                .output()
                .expect("runs");
            assert_eq!(out.status.code(), Some(0), "{fixture}: {}", stderr(&out));
            let text = stdout(&out);
            if format == "json" {
                let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                let globals = doc["unsafe_globals"].as_array().expect("unsafe_globals");
                assert!(
                    globals
                        .iter()
                        .any(|g| g["module"] == module && g["name"] == name),
                    "{fixture}: {globals:?}"
                );
            } else {
                assert!(
                    text.contains(&format!("unsafe global {module}.{name} in ")),
                    "{text}"
                );
            }
        }
        assert!(
            !dir.join("tensorplay_payload_marker").exists(),
            "{fixture}'s payload ran"
        );
        assert_eq!(
            std::fs::read_dir(&dir).expect("dir").count(),
            0,
            "{fixture} wrote into the working directory"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn views_relate_the_byte_ranges_of_a_legacy_file() {
    let out = tensorplay(&[
        "views",
        "--format",
        "json",
        "fixtures/pytorch/legacy_views.pt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(doc["format"], "pytorch-legacy");
    let shared = doc["shared_storages"].as_array().expect("shared");
    assert_eq!(shared.len(), 1);
    let s = &shared[0];
    assert_eq!(s["nbytes"], 72);
    // numbers (9 float64), numbers[1::2], numbers[2:5].view(3, 1).
    let ranges: Vec<&serde_json::Value> = s["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| &t["byte_range"])
        .collect();
    assert_eq!(
        ranges,
        [
            &serde_json::json!([0, 72]),
            &serde_json::json!([8, 64]),
            &serde_json::json!([16, 40])
        ]
    );
    let relations: Vec<(String, String, String)> = s["relations"]
        .as_array()
        .expect("relations")
        .iter()
        .map(|r| {
            (
                r["a"].as_str().unwrap().into(),
                r["b"].as_str().unwrap().into(),
                r["relation"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        relations,
        [
            ("0".into(), "1".into(), "contains".into()),
            ("0".into(), "2".into(), "contains".into()),
            ("1".into(), "2".into(), "contains".into()),
        ]
    );

    let text = stdout(&tensorplay(&[
        "views",
        "fixtures/pytorch/overlapping_params.pt",
    ]));
    assert!(text.contains("a partial-overlap b"), "{text}");
}

#[test]
fn views_of_a_file_without_sharing_lists_nothing() {
    let out = tensorplay(&[
        "views",
        "--format",
        "json",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(doc["shared_storages"], serde_json::json!([]));
}

#[test]
fn torchscript_archives_say_so() {
    let out = tensorplay(&["inspect", "fixtures/pytorch/torchscript.pt"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("TorchScript archive: loading it compiles the code it carries"));
    let truth = read_json("fixtures/pytorch/torchscript.pt.truth.json");
    assert_eq!(truth["inspect"]["format"], "torchscript");
    assert_eq!(truth["inspect"]["unsafe_globals"], serde_json::json!([]));
}

/// A TorchScript archive holds more than the loaded module's `state_dict()`: each tensor says
/// what it is, as torch.jit.load's module holds it (the truth), and the text says how many of
/// each, and how many `state_dict()` lists. Traced, the tensors the forward reads but does not
/// own, and the one it makes, are the code's constants, named as the code calls them.
#[test]
fn torchscript_tensors_say_what_the_module_holds_them_as() {
    for (path, line) in [
        (
            "fixtures/pytorch/torchscript_held.pt",
            "held as: 2 parameters, 1 buffer, 3 attributes (state_dict() lists 3 of 6 tensors)",
        ),
        (
            "fixtures/pytorch/traced_held.pt",
            "held as: 2 parameters, 1 buffer, 3 constants (state_dict() lists 3 of 6 tensors)",
        ),
        (
            "fixtures/pytorch/torchscript_quantized.pt",
            "held as: 2 buffers, 8 for __setstate__ (state_dict() lists 2 of 10 tensors)",
        ),
    ] {
        let truth = read_json(&format!("{path}.truth.json"));
        let held: Vec<(&str, &str)> = truth["inspect"]["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .map(|t| (t["name"].as_str().unwrap(), t["held_as"].as_str().unwrap()))
            .collect();
        let count = |what: &str| held.iter().filter(|(_, h)| *h == what).count();
        let listed = count("parameter") + count("buffer");
        assert!(line.ends_with(&format!("lists {listed} of {} tensors)", held.len())));
        if path.contains("traced") {
            let constants: Vec<&str> = held
                .iter()
                .filter(|(_, h)| *h == "constant")
                .map(|(n, _)| *n)
                .collect();
            assert_eq!(constants, ["CONSTANTS.c0", "CONSTANTS.c1", "CONSTANTS.c2"]);
        }
        let out = tensorplay(&["inspect", path]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stdout(&out).contains(line), "{}", stdout(&out));
    }
}

/// Tensor names of a fixture, as `inspect --format json` gives them.
fn tensor_names(path: &str) -> Vec<String> {
    let out = tensorplay(&["inspect", "--format", "json", path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect()
}

/// A scripted statically quantized model: the convolution's weight and bias (in torch's
/// `_ConvNd.__getstate__` tuple) and the linear layer's packed (weight, bias) are named as
/// the eager module's `state_dict()` names them, each per-channel weight's scales and zero
/// points below it as torch reads them, and torch's own quantized-convolution `__setstate__`
/// leaves TP504 a warning, so the default gate passes.
#[test]
fn a_scripted_quantized_model_is_named_as_its_state_dict_and_passes_the_gate() {
    let path = "fixtures/pytorch/torchscript_quantized.pt";
    assert_eq!(
        tensor_names(path),
        [
            "quant.scale",
            "quant.zero_point",
            "conv.weight",
            "conv.weight.q_per_channel_scales",
            "conv.weight.q_per_channel_zero_points",
            "conv.bias",
            "fc._packed_params._packed_params.0",
            "fc._packed_params._packed_params.0.q_per_channel_scales",
            "fc._packed_params._packed_params.0.q_per_channel_zero_points",
            "fc._packed_params._packed_params.1",
        ]
    );
    let truth = read_json(&format!("{path}.truth.json"));
    assert_eq!(
        truth["torch_state_dict"],
        serde_json::json!(["quant.scale", "quant.zero_point"])
    );
    let out = tensorplay(&["audit", path]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("warning[TP504]")
            && text.contains("the __setstate__ in code/__torch__/torch/ao/nn/quantized/modules/conv.py is torch's own quantized convolution one")
            && !text.contains("runs while the file loads"),
        "{text}"
    );
}

/// Per-channel quantized tensors (`per_channel_affine`, `per_channel_affine_float_qparams`)
/// name the storages of their scales and zero points as torch's accessors read them; every
/// storage of the file holds a named tensor.
#[test]
fn per_channel_quantizer_tensors_are_named_below_their_tensor() {
    let path = "fixtures/pytorch/quantized.pt";
    assert_eq!(
        tensor_names(path),
        [
            "q",
            "per_channel",
            "per_channel.q_per_channel_scales",
            "per_channel.q_per_channel_zero_points",
            "float_qparams",
            "float_qparams.q_per_channel_scales",
            "float_qparams.q_per_channel_zero_points",
        ]
    );
    let out = tensorplay(&["inspect", "--format", "json", path]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    for storage in doc["storages"].as_array().expect("storages") {
        assert_ne!(storage["tensors"], serde_json::json!([]), "{storage}");
    }
}

/// A dynamically quantized LSTM's state_dict: each layer is one `CellParamsBase` object, its
/// tensors named below the state_dict key by the index path of torch's own `__getstate__`
/// (biases at `1.*`, packed weights at `4.*.0`, their biases at `4.*.1`), none twice.
#[test]
fn a_dynamic_quantized_lstm_names_every_packed_tensor_apart() {
    let names = tensor_names("fixtures/pytorch/quantized_dynamic_lstm.pt");
    assert_eq!(names.len(), 12);
    let mut distinct = names.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 12, "{names:?}");
    assert_eq!(
        &names[..6],
        [
            "0._all_weight_values.0.param.1.0",
            "0._all_weight_values.0.param.1.1",
            "0._all_weight_values.0.param.4.0.0",
            "0._all_weight_values.0.param.4.0.1",
            "0._all_weight_values.0.param.4.1.0",
            "0._all_weight_values.0.param.4.1.1",
        ]
    );
}

/// torch refuses to load this file (its storage was shrunk under a view before saving);
/// tensorplay reads what torch's unpickler rebuilds, and `inspect` refuses it on one line.
#[test]
fn a_view_past_its_storage_reads_as_torch_rebuilds_it_and_inspect_refuses_it() {
    let path = "fixtures/pytorch/bad/view_out_of_bounds.pt";
    let truth = read_json(&format!("{path}.truth.json"));
    assert_eq!(truth["torch_accepts"], false);
    let reading = &truth["torch_reading"];
    let ckpt = tensorplay_engine::load::open(&root().join(path)).expect(path);
    let tensors: Vec<serde_json::Value> = ckpt
        .tensors
        .iter()
        .map(|t| {
            let imp = t.tensor_impl();
            serde_json::json!({
                "name": t.name(),
                "dtype": imp.dtype().name(),
                "shape": imp.layout().sizes(),
                "strides": imp.layout().strides(),
                "storage_offset": imp.layout().storage_offset(),
                "storage": imp.storage().id().index(),
            })
        })
        .collect();
    let expected: Vec<serde_json::Value> = reading["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t["name"], "dtype": t["dtype"], "shape": t["shape"],
                "strides": t["strides"], "storage_offset": t["storage_offset"],
                "storage": t["storage"],
            })
        })
        .collect();
    assert_eq!(tensors, expected);
    let storages: Vec<(String, u64)> = ckpt
        .storages
        .iter()
        .map(|s| (s.key().to_owned(), s.nbytes()))
        .collect();
    let expected: Vec<(String, u64)> = reading["storages"]
        .as_array()
        .expect("storages")
        .iter()
        .map(|s| {
            (
                s["key"].as_str().unwrap().to_owned(),
                s["nbytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(storages, expected);

    let out = tensorplay(&["inspect", path]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("reaches bytes 20..48 of a 32-byte storage"),
        "{err}"
    );
}
