//! One small checkpoint per producer library, saved the way its users save it
//! (`fixtures/producers/`, made by `fixtures/make_producers.py`): diffusers, peft,
//! sentence-transformers, pytorch-ignite, torchaudio, torch.compile and FSDP2's DCP. tensorplay
//! reads each as its library does, and the gate passes them all.

use crate::common::{
    audit_report as audit, inspect_json, matches_inspect_truth, report_findings as findings,
    strings, truth_by_path,
};
use crate::dcp::matches_dcp_truth;
use serde_json::Value;

const TRUTH: &str = "fixtures/producers/truth.json";

/// Every file, by the library that wrote it; each is that library's ordinary output.
const ORDINARY: &[&str] = &[
    // diffusers: UNet2DModel.save_pretrained
    "fixtures/producers/diffusers_unet/diffusion_pytorch_model.safetensors",
    // peft: a LoRA adapter's save_pretrained, and torch.save of the unmerged model
    "fixtures/producers/peft_lora/adapter_model.safetensors",
    "fixtures/producers/peft_lora_state_dict.pt",
    // sentence-transformers: SentenceTransformer.save (the transformer and a Dense head)
    "fixtures/producers/sentence_transformers/model.safetensors",
    "fixtures/producers/sentence_transformers/2_Dense/model.safetensors",
    // pytorch-ignite: its Checkpoint handler (model, optimizer, trainer)
    "fixtures/producers/ignite_checkpoint_2.pt",
    // torchaudio: a MelSpectrogram front end and DeepSpeech, torch.save of the state dict
    "fixtures/producers/torchaudio_deepspeech.pt",
    // torch.compile: torch.save of the compiled module's state dict
    "fixtures/producers/compiled_state_dict.pt",
    // FSDP2: fully_shard, then dcp.save of get_state_dict's model and optimizer
    "fixtures/producers/fsdp2",
];

fn truth() -> serde_json::Map<String, Value> {
    truth_by_path(TRUTH)
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn inspect_reads_every_producer_file_as_its_library_does() {
    let truth = truth();
    let keys: Vec<&str> = truth.keys().map(String::as_str).collect();
    assert_eq!(sorted(keys), sorted(ORDINARY.to_vec()));
    for (path, t) in &truth {
        if t.get("inspect").is_some() {
            matches_inspect_truth(path, t, TRUTH);
        } else {
            // The DCP directory: DCP's own Metadata and dcp.load's values.
            matches_dcp_truth(path, t);
        }
    }
}

#[test]
fn ordinary_producer_files_pass_the_gate_with_nothing_above_info() {
    let mut args = vec!["--fail-on", "warning"];
    args.extend_from_slice(ORDINARY);
    let (code, report) = audit(&args);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["summary"]["files"], ORDINARY.len(), "{report}");
    let above_info: Vec<_> = findings(&report)
        .into_iter()
        .filter(|(_, _, severity, _)| severity != "info")
        .collect();
    assert!(above_info.is_empty(), "{above_info:?}");
    assert_eq!(report["summary"]["passed"], true);

    // The ties torch.save keeps (peft's unmerged model keeps transformers' tied embedding)
    // are reported, at info: one finding per storage torch read as one view under several
    // names, and no other.
    let mut want = Vec::new();
    for (path, t) in &truth() {
        let Some(inspect) = t.get("inspect") else {
            continue;
        };
        let tensors = inspect["tensors"].as_array().expect("tensors");
        let view = |name: &str| {
            let t = tensors.iter().find(|t| t["name"] == name).expect(name);
            (
                t["shape"].clone(),
                t["strides"].clone(),
                t["storage_offset"].clone(),
            )
        };
        for s in inspect["storages"].as_array().expect("storages") {
            let names = strings(&s["tensors"]);
            if names.len() > 1 && names.iter().all(|n| view(n) == view(&names[0])) {
                want.push((path.clone(), "TP103".to_owned(), "info".to_owned(), names));
            }
        }
    }
    assert!(!want.is_empty(), "peft's state dict keeps a tie");
    let got: Vec<_> = findings(&report)
        .into_iter()
        .filter(|(_, code, _, _)| code == "TP103")
        .collect();
    assert_eq!(sorted(got), sorted(want));
}

#[test]
fn a_producer_folder_is_audited_as_its_checkpoints_and_nothing_else() {
    // The folder as users keep it: configs beside the weights, a DCP directory's files, the
    // sentence-transformers modules in subfolders. Audited are exactly the checkpoints the
    // truth records; every other file is skipped.
    let (code, report) = audit(&["fixtures/producers"]);
    assert_eq!(code, Some(0), "{report}");
    let audited: Vec<String> = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["path"].as_str().expect("path").to_owned())
        .collect();
    let truth = truth();
    assert_eq!(sorted(audited), sorted(truth.keys().cloned().collect()));
    for skipped in report["skipped"].as_array().expect("skipped") {
        let path = skipped["path"].as_str().expect("path");
        assert!(
            path.ends_with(".json") || path.starts_with("fixtures/producers/fsdp2/"),
            "{skipped}"
        );
    }
}

/// The names of the tensors tensorplay reads from `path`, with their shapes.
fn read_names(path: &str) -> Vec<(String, Value)> {
    let doc = inspect_json(path);
    doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().expect("name").to_owned(),
                t["shape"].clone(),
            )
        })
        .collect()
}

#[test]
fn compiled_and_sharded_names_are_the_ones_their_libraries_save() {
    // torch.compile's wrapper keeps the module under `_orig_mod`: every name has the prefix.
    let compiled = read_names("fixtures/producers/compiled_state_dict.pt");
    assert!(!compiled.is_empty());
    assert!(
        compiled.iter().all(|(n, _)| n.starts_with("_orig_mod.")),
        "{compiled:?}"
    );

    // FSDP2's optimizer state, from get_state_dict, is keyed by parameter name: each
    // parameter's Adam moments of its shape and its scalar step.
    let fsdp2: std::collections::BTreeMap<String, Value> =
        read_names("fixtures/producers/fsdp2").into_iter().collect();
    let params: Vec<&str> = fsdp2
        .keys()
        .filter_map(|k| k.strip_prefix("model."))
        .collect();
    assert!(!params.is_empty());
    for p in &params {
        let shape = &fsdp2[&format!("model.{p}")];
        for (state, want) in [
            ("exp_avg", shape.clone()),
            ("exp_avg_sq", shape.clone()),
            ("step", serde_json::json!([])),
        ] {
            let name = format!("optim.state.{p}.{state}");
            assert_eq!(fsdp2.get(&name), Some(&want), "{name}");
        }
    }
    assert_eq!(fsdp2.len(), params.len() * 4, "{:?}", fsdp2.keys());
}
