//! The CycloneDX 1.6 bill of materials (`--cyclonedx`, `--format cyclonedx`): its shape, and
//! every digest it states against the fixture's bytes hashed here. `scripts/check-cyclonedx.sh`
//! validates the same BOMs against the official schema (with cyclonedx-python-lib).

use crate::common::{root, stderr, TempDir};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// 2023-11-14T22:13:20Z.
const EPOCH: &str = "1700000000";

fn run(args: &[&str], epoch: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(args)
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env("SOURCE_DATE_EPOCH", epoch)
        .output()
        .expect("tensorplay runs")
}

/// The BOM and the JSON report of one audit of `target` (with `extra` flags), and its exit code.
fn bom_of(target: &str, extra: &[&str]) -> (Value, Value, Option<i32>) {
    // Tests run side by side in one process: each audit gets a folder of its own.
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = TempDir::new(&format!(
        "cyclonedx-{}",
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let bom = dir.0.join("bom.json");
    let json = dir.0.join("report.json");
    let mut args = vec![
        "audit",
        "--cyclonedx",
        bom.to_str().expect("utf-8"),
        "--json",
        json.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    args.push(target);
    let out = run(&args, EPOCH);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        stderr(&out)
    );
    let read = |path: &std::path::Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(path).expect("written")).expect("JSON")
    };
    let report = read(&json);
    // The JSON report carries the inventory the BOM was written from, within its schema.
    let validator = crate::report_limits::validator();
    let errors = crate::report_limits::schema_errors(&validator, &report);
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(report["files"][0]["inventory"].is_object(), "{report:#}");
    (read(&bom), report, out.status.code())
}

fn sha256_of(relative: &str) -> String {
    let bytes = std::fs::read(root().join(relative)).expect(relative);
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every value of the properties named `tensorplay:NAME` of `node`.
fn props(node: &Value, name: &str) -> Vec<String> {
    let full = format!("tensorplay:{name}");
    node["properties"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter(|p| p["name"] == full.as_str())
                .map(|p| p["value"].as_str().expect("string value").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn component<'a>(bom: &'a Value, name: &str) -> &'a Value {
    bom["components"]
        .as_array()
        .expect("components")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no component {name} in {bom:#}"))
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn assert_envelope(bom: &Value) {
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["specVersion"], "1.6");
    assert_eq!(bom["version"], 1);
    let serial = bom["serialNumber"].as_str().expect("serialNumber");
    let uuid = serial.strip_prefix("urn:uuid:").expect("a urn:uuid");
    let groups: Vec<&str> = uuid.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    assert_eq!(lens, [8, 4, 4, 4, 12], "{serial}");
    assert!(groups.iter().all(|g| is_hex(g, g.len())), "{serial}");
    assert_eq!(bom["metadata"]["timestamp"], "2023-11-14T22:13:20Z");
    let tool = &bom["metadata"]["tools"]["components"][0];
    assert_eq!(tool["name"], "tensorplay");
    assert_eq!(tool["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        bom["metadata"]["component"]["type"],
        "machine-learning-model"
    );
    for c in bom["components"].as_array().expect("components") {
        assert_eq!(c["type"], "file", "{c:#}");
    }
}

#[test]
fn a_model_folder_names_the_model_its_files_with_their_digests_and_the_verdict() {
    let (bom, report, code) = bom_of("fixtures/models/llama", &[]);
    assert_eq!(code, Some(0));
    assert_envelope(&bom);
    let model = &bom["metadata"]["component"];
    assert_eq!(model["name"], "fixtures/models/llama/model.safetensors");
    let config: Value = crate::common::read_json("fixtures/models/llama/config.json");
    let params = &model["modelCard"]["modelParameters"];
    assert_eq!(params["architectureFamily"], config["model_type"]);
    assert_eq!(params["modelArchitecture"], config["architectures"][0]);
    assert_eq!(props(model, "verdict"), ["pass"]);
    assert!(props(model, "rule").is_empty());

    // The parameter count is the tensors' elements, from the JSON report's own reading.
    let card = &model["modelCard"];
    let parameters: u64 = props(card, "parameters")[0].parse().expect("a count");
    let f32_bytes = report["files"][0]["bytes"].as_u64().expect("bytes");
    assert_eq!(report["files"][0]["dtypes"], serde_json::json!(["float32"]));
    assert_eq!(parameters * 4, f32_bytes);
    assert_eq!(props(card, "parameters:float32"), [parameters.to_string()]);

    for file in ["model.safetensors", "config.json"] {
        let relative = format!("fixtures/models/llama/{file}");
        let c = component(&bom, &relative);
        assert_eq!(c["hashes"][0]["alg"], "SHA-256");
        assert_eq!(c["hashes"][0]["content"], sha256_of(&relative).as_str());
        let size = std::fs::metadata(root().join(&relative))
            .expect("size")
            .len();
        assert_eq!(props(c, "size"), [size.to_string()]);
        assert_eq!(
            props(c, "checkpoint"),
            ["fixtures/models/llama/model.safetensors"]
        );
    }
    let weights = component(&bom, "fixtures/models/llama/model.safetensors");
    assert_eq!(props(weights, "format"), ["safetensors"]);
    let digest = props(weights, "tensors-sha256");
    assert!(is_hex(&digest[0], 64), "{digest:?}");
    assert_eq!(props(model, "tensors-sha256"), digest);
    // Nothing not read is listed: no generation_config.json.
    assert_eq!(bom["components"].as_array().expect("components").len(), 2);
}

#[test]
fn a_failing_pickle_says_fail_with_its_rule_codes() {
    let (bom, report, code) = bom_of("fixtures/pytorch/payload_os_system.pt", &[]);
    assert_eq!(code, Some(1));
    assert_envelope(&bom);
    let model = &bom["metadata"]["component"];
    assert_eq!(props(model, "verdict"), ["fail"]);
    let codes: BTreeSet<String> = report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["code"].as_str().expect("code").to_owned())
        .collect();
    assert!(codes.contains("TP501"), "{codes:?}");
    assert_eq!(props(model, "rule"), codes.into_iter().collect::<Vec<_>>());
    let relative = "fixtures/pytorch/payload_os_system.pt";
    let c = component(&bom, relative);
    assert_eq!(c["hashes"][0]["content"], sha256_of(relative).as_str());
    assert_eq!(props(c, "format"), ["pytorch-zip"]);
}

#[test]
fn a_gguf_chat_template_digest_is_the_one_the_template_rules_report() {
    let (bom, report, _) = bom_of("fixtures/chat_templates/named/model.gguf", &[]);
    assert_envelope(&bom);
    let reported: BTreeSet<String> = report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["template"]["sha256"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(reported.len(), 1, "{report:#}");
    // Every template the file carries, flagged or not, as the fixture's generator (gguf-py)
    // wrote them and hashed them.
    let relative = "fixtures/chat_templates/named/model.gguf";
    let truth = crate::common::read_json("fixtures/chat_templates/truth.json");
    let carried: BTreeSet<String> = truth["templates"]
        .as_array()
        .expect("templates")
        .iter()
        .filter(|t| {
            t["in"]
                .as_array()
                .is_some_and(|places| places.iter().any(|p| p["file"] == relative))
        })
        .map(|t| t["sha256"].as_str().expect("sha256").to_owned())
        .collect();
    assert_eq!(carried.len(), 2, "{carried:?}");
    assert!(reported.is_subset(&carried));
    let model = &bom["metadata"]["component"];
    let listed: BTreeSet<String> = props(model, "chat-template-sha256").into_iter().collect();
    assert_eq!(listed, carried);
    let c = component(&bom, relative);
    assert_eq!(c["hashes"][0]["content"], sha256_of(relative).as_str());
}

#[test]
fn a_metadata_only_run_states_the_hashes_it_did_not_compute() {
    let (bom, _, _) = bom_of("fixtures/models/gpt2", &["--metadata-only"]);
    assert_envelope(&bom);
    let weights = component(&bom, "fixtures/models/gpt2/model.safetensors");
    assert!(weights.get("hashes").is_none(), "{weights:#}");
    assert_eq!(
        props(weights, "hash"),
        ["not computed: --metadata-only reads no tensor bytes"]
    );
    let size = std::fs::metadata(root().join("fixtures/models/gpt2/model.safetensors"))
        .expect("size")
        .len();
    assert_eq!(props(weights, "size"), [size.to_string()]);
    // config.json is read whole for the architecture, so it is hashed in any run.
    let config = component(&bom, "fixtures/models/gpt2/config.json");
    assert_eq!(
        config["hashes"][0]["content"],
        sha256_of("fixtures/models/gpt2/config.json").as_str()
    );
}

#[test]
fn the_same_run_at_the_same_epoch_writes_the_same_bom_and_stdout_matches_the_file() {
    let target = "fixtures/pytorch/state_dict.pt";
    let stdout_at = |epoch: &str| {
        let out = run(&["audit", "--format", "cyclonedx", target], epoch);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let first = stdout_at(EPOCH);
    assert_eq!(first, stdout_at(EPOCH));
    let later: Value = serde_json::from_str(&stdout_at("1700000001")).expect("JSON");
    let first_bom: Value = serde_json::from_str(&first).expect("JSON");
    assert_ne!(first_bom["serialNumber"], later["serialNumber"]);
    assert_eq!(later["metadata"]["timestamp"], "2023-11-14T22:13:21Z");
    let (file_bom, _, _) = bom_of(target, &[]);
    assert_eq!(file_bom, first_bom);

    let out = run(&["audit", "--format", "cyclonedx", target], "yesterday");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("SOURCE_DATE_EPOCH=yesterday"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn merged_parts_write_the_bom_of_the_whole_run() {
    let dir = TempDir::new("cyclonedx-merge");
    let path = |name: &str| dir.0.join(name).to_str().expect("utf-8").to_owned();
    let target = "fixtures/models";
    let whole = run(
        &["audit", "--cyclonedx", &path("whole.cdx.json"), target],
        EPOCH,
    );
    let code = whole.status.code();
    let mut merge_args = vec![
        "merge".to_owned(),
        "--cyclonedx".to_owned(),
        path("merged.cdx.json"),
    ];
    let mut plain_args = vec![
        "merge".to_owned(),
        "--cyclonedx".to_owned(),
        path("plain.cdx.json"),
    ];
    for k in 1..=2 {
        let spec = format!("{k}/2");
        let (json, plain) = (
            path(&format!("part-{k}.json")),
            path(&format!("plain-{k}.json")),
        );
        let part = run(
            &[
                "audit",
                "--partition",
                &spec,
                "--json",
                &json,
                "--cyclonedx",
                &path("p.cdx.json"),
                target,
            ],
            EPOCH,
        );
        assert!(
            part.status.code().is_some_and(|c| c <= 1),
            "{}",
            stderr(&part)
        );
        let part = run(
            &["audit", "--partition", &spec, "--json", &plain, target],
            EPOCH,
        );
        assert!(
            part.status.code().is_some_and(|c| c <= 1),
            "{}",
            stderr(&part)
        );
        merge_args.push(json);
        plain_args.push(plain);
    }
    let args: Vec<&str> = merge_args.iter().map(String::as_str).collect();
    let merged = run(&args, EPOCH);
    assert_eq!(merged.status.code(), code, "{}", stderr(&merged));
    let read = |name: &str| std::fs::read_to_string(dir.0.join(name)).expect(name);
    assert_eq!(read("merged.cdx.json"), read("whole.cdx.json"));

    let bom: Value = serde_json::from_str(&read("whole.cdx.json")).expect("JSON");
    assert_envelope(&bom);
    // Several models: one family is not named for them all, every file is hashed.
    let params = &bom["metadata"]["component"]["modelCard"]["modelParameters"];
    assert!(params.get("architectureFamily").is_none(), "{params:#}");
    for c in bom["components"].as_array().expect("components") {
        let name = c["name"].as_str().expect("name");
        assert_eq!(
            c["hashes"][0]["content"],
            sha256_of(name).as_str(),
            "{name}"
        );
    }

    // Parts audited without --cyclonedx hold no inventory: each checkpoint is named, its
    // hash said not computed.
    let args: Vec<&str> = plain_args.iter().map(String::as_str).collect();
    let plain = run(&args, EPOCH);
    assert_eq!(plain.status.code(), code, "{}", stderr(&plain));
    let bom: Value = serde_json::from_str(&read("plain.cdx.json")).expect("JSON");
    assert_envelope(&bom);
    let components = bom["components"].as_array().expect("components");
    assert!(!components.is_empty());
    for c in components {
        assert!(c.get("hashes").is_none(), "{c:#}");
        assert!(props(c, "hash")[0].starts_with("not computed"), "{c:#}");
    }
}

/// A Hub repository (the loopback server's): the model named with the revision it resolved to,
/// each file's size as listed and its hash said not computed (remote objects are read by
/// ranges, never whole).
#[cfg(target_os = "linux")]
#[test]
fn a_hub_model_is_named_with_its_revision_and_says_its_hashes_were_not_computed() {
    use crate::common::range_server::{RangeServer, SHA};
    let server = RangeServer::start(&root().join("fixtures"));
    let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(["audit", "--format", "cyclonedx", "hf://org/models/llama"])
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("HF_TOKEN")
        .env("HF_ENDPOINT", server.endpoint())
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .output()
        .expect("tensorplay runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bom: Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).expect("JSON");
    assert_envelope(&bom);
    let model = &bom["metadata"]["component"];
    assert_eq!(model["name"], "hf://org/models");
    assert_eq!(model["version"], SHA);
    let name = format!("hf://org/models@{SHA}/llama/model.safetensors");
    let c = component(&bom, &name);
    assert!(c.get("hashes").is_none(), "{c:#}");
    assert_eq!(
        props(c, "hash"),
        ["not computed: a remote object is read by byte ranges, never whole"]
    );
    let size = std::fs::metadata(root().join("fixtures/models/llama/model.safetensors"))
        .expect("size")
        .len();
    assert_eq!(props(c, "size"), [size.to_string()]);
}

/// The parameter histogram of a block-quantised GGUF: each tensor's logical elements under its
/// block type, as gguf-py (the fixture's generator) reads them, not its bytes as `uint8`.
#[test]
fn a_quantised_gguf_counts_its_elements_per_block_type_as_gguf_py_reads_them() {
    let relative = "fixtures/gguf/quantized.gguf";
    let (bom, _, _) = bom_of(relative, &[]);
    assert_envelope(&bom);
    let truth = crate::common::read_json("fixtures/gguf/truth.json");
    let mut expected = std::collections::BTreeMap::<String, u64>::new();
    for t in truth["files"][relative]["tensors"]
        .as_array()
        .expect("tensors")
    {
        let kind = t["type"].as_str().expect("type").to_owned();
        *expected.entry(kind).or_default() += t["n_elements"].as_u64().expect("n_elements");
    }
    assert!(expected.len() > 3, "{expected:?}");
    let card = &bom["metadata"]["component"]["modelCard"];
    for (kind, elements) in &expected {
        assert_eq!(
            props(card, &format!("parameters:{kind}")),
            [elements.to_string()]
        );
    }
    let total: u64 = expected.values().sum();
    assert_eq!(props(card, "parameters"), [total.to_string()]);
    assert!(props(card, "parameters:uint8").is_empty());
    let family = &truth["files"][relative]["fields"]["general.architecture"]["value"];
    assert_eq!(card["modelParameters"]["architectureFamily"], *family);
}

/// A sharded index naming a shard that is not there: the audit's finding and exit code stand,
/// and the BOM lists the missing shard with why it has no hash.
#[test]
fn a_missing_shard_is_listed_without_a_hash_and_the_verdict_stands() {
    let dir = "fixtures/safetensors/bad/index_missing_shard";
    let (bom, report, code) = bom_of(dir, &[]);
    let plain = run(&["audit", "--format", "json", dir], EPOCH);
    assert_eq!(code, plain.status.code());
    assert_eq!(code, Some(1));
    assert_envelope(&bom);
    assert_eq!(props(&bom["metadata"]["component"], "verdict"), ["fail"]);
    let codes: Vec<&str> = report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(codes.contains(&"TP503"), "{codes:?}");
    let missing = component(&bom, &format!("{dir}/model-00002-of-00002.safetensors"));
    assert!(missing.get("hashes").is_none(), "{missing:#}");
    assert!(
        props(missing, "hash")[0].starts_with("not computed: "),
        "{missing:#}"
    );
    let present = format!("{dir}/model-00001-of-00002.safetensors");
    let c = component(&bom, &present);
    assert_eq!(c["hashes"][0]["content"], sha256_of(&present).as_str());
}

/// A verified signature names its signer in the BOM, as the JSON report names it; a signature
/// the trust source does not vouch for names none.
#[test]
fn a_verified_signature_names_its_signer_and_an_untrusted_one_none() {
    let model = "fixtures/signatures/key";
    let trusted = [
        "--require-signature",
        "--public-key",
        "fixtures/signatures/keys/signer.pub",
    ];
    let (bom, report, code) = bom_of(model, &trusted);
    assert_eq!(code, Some(0), "{report:#}");
    let facts = &report["signatures"][0];
    assert_eq!(facts["status"], "verified");
    let metadata = &bom["metadata"]["component"];
    assert_eq!(
        props(metadata, "signer-key-fingerprint"),
        [facts["signer"]["fingerprint"]
            .as_str()
            .expect("fingerprint")]
    );
    assert_eq!(props(metadata, "signed-model"), [model]);
    assert_eq!(
        props(metadata, "signed-root-digest"),
        [facts["root_digest"].as_str().expect("root digest")]
    );

    let untrusted = [
        "--require-signature",
        "--public-key",
        "fixtures/signatures/keys/other.pub",
    ];
    let (bom, report, code) = bom_of(model, &untrusted);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(report["signatures"][0]["status"], "untrusted");
    for name in [
        "signer-key-fingerprint",
        "signed-model",
        "signed-root-digest",
    ] {
        assert!(
            props(&bom["metadata"]["component"], name).is_empty(),
            "{name}: {bom:#}"
        );
    }
}
