//! OpenSSF model signatures (TP801–TP805) against `fixtures/signatures/`: model directories
//! signed by model-signing 1.1.1 with a key and with a private certificate chain, keyless
//! (Sigstore) ones from sigstore/model-transparency's tests, and every
//! bad vector `truth.json` lists (a changed byte, an added or removed file, no signature, the
//! wrong key or CA, a tampered bundle), each failing with its own code where model_signing
//! refuses it too.

use crate::common::{copy_dir, read_json, root, stderr, tensorplay, TempDir};
use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::path::Path;

const DIR: &str = "fixtures/signatures";

/// The bundle with its statement's first digest changed and its signature kept, as
/// make_signatures.py's `tampered_bundle` does.
fn tamper(bundle: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut bundle: serde_json::Value = serde_json::from_str(bundle).expect("bundle");
    let payload = b64
        .decode(bundle["dsseEnvelope"]["payload"].as_str().expect("payload"))
        .expect("base64");
    let mut statement: serde_json::Value = serde_json::from_slice(&payload).expect("statement");
    let digest = statement["predicate"]["resources"][0]["digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    let first = if digest.starts_with('0') { "1" } else { "0" };
    statement["predicate"]["resources"][0]["digest"] = format!("{first}{}", &digest[1..]).into();
    bundle["dsseEnvelope"]["payload"] = b64
        .encode(serde_json::to_vec(&statement).expect("json"))
        .into();
    bundle.to_string()
}

/// `case`'s mutation applied to `model`, a copy of its signed directory.
fn apply(case: &serde_json::Value, model: &Path) {
    for step in case["mutate"].as_array().into_iter().flatten() {
        let target = model.join(step["path"].as_str().expect("path"));
        match step["op"].as_str().expect("op") {
            "flip-byte" => {
                let mut data = std::fs::read(&target).expect("read");
                let at = step["offset"].as_u64().expect("offset") as usize;
                data[at] ^= 1;
                std::fs::write(&target, data).expect("write");
            }
            "add" => std::fs::write(&target, step["text"].as_str().expect("text")).expect("add"),
            "remove" => std::fs::remove_file(&target).expect("remove"),
            "tamper-bundle" => {
                let text = std::fs::read_to_string(&target).expect("bundle");
                std::fs::write(&target, tamper(&text)).expect("write");
            }
            other => panic!("unknown mutation {other}"),
        }
    }
}

/// `audit --require-signature` of `model` with `case`'s trust source: exit code and report.
fn audit(
    case: &serde_json::Value,
    model: &Path,
    extra: &[&str],
) -> (Option<i32>, serde_json::Value) {
    let trust = &case["trust"];
    let mut trust_args: Vec<String> = Vec::new();
    if let Some(identity) = trust.get("identity") {
        // Keyless: verified offline against the production root built into tensorplay.
        for (flag, value) in [("--identity", identity), ("--issuer", &trust["issuer"])] {
            trust_args.push(flag.to_owned());
            trust_args.push(value.as_str().expect("identity").to_owned());
        }
    } else {
        let (flag, file) = match trust.get("public_key") {
            Some(key) => ("--public-key", key),
            None => ("--certificate-chain", &trust["certificate_chain"]),
        };
        let file = root().join(DIR).join(file.as_str().expect("trust file"));
        trust_args.push(flag.to_owned());
        trust_args.push(file.to_str().expect("utf-8 path").to_owned());
    }
    let model = model.to_str().expect("utf-8 path");
    let mut args = vec!["audit", "--format", "json", "--require-signature"];
    args.extend(trust_args.iter().map(String::as_str));
    args.extend_from_slice(extra);
    args.push(model);
    let out = tensorplay(&args);
    let report = serde_json::from_str(&crate::common::stdout(&out))
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stderr(&out)));
    (out.status.code(), report)
}

/// The provenance findings of a report: (code, message).
fn provenance(report: &serde_json::Value) -> Vec<(String, String)> {
    report["files"]
        .as_array()
        .expect("files")
        .iter()
        .flat_map(|f| f["findings"].as_array().expect("findings"))
        .filter(|f| f["code"].as_str().is_some_and(|c| c.starts_with("TP8")))
        .map(|f| {
            (
                f["code"].as_str().expect("code").to_owned(),
                f["message"].as_str().expect("message").to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_vector_fails_with_its_own_code_and_agrees_with_model_signing() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let cases = truth["cases"].as_array().expect("cases");
    assert!(cases.len() >= 42, "every vector of every signing method");
    let schema = crate::report_limits::validator();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let tmp = TempDir::new(&format!("sig-{}", name.replace('/', "-")));
        let vector = case["vector"].as_str().expect("vector");
        let model = tmp.0.join(vector);
        copy_dir(&root().join(DIR).join(vector), &model);
        apply(case, &model);
        let (code, report) = audit(case, &model, &[]);
        let found = provenance(&report);
        let errors = crate::report_limits::schema_errors(&schema, &report);
        assert!(errors.is_empty(), "{name}: {errors:?}");
        let expected = case["code"].as_str().expect("code");
        assert!(!found.is_empty(), "{name}: no provenance finding");
        assert!(
            found.iter().all(|(c, _)| c == expected),
            "{name}: expected only {expected}, found {found:?}"
        );
        let verified = expected == "TP805";
        assert_eq!(
            code,
            Some(if verified { 0 } else { 1 }),
            "{name}: {found:?}"
        );
        let status = report["signatures"][0]["status"].as_str().expect("status");
        assert_eq!(status == "verified", verified, "{name}: {status}");
        // model_signing's verdict, except where it cannot verify its own format.
        if case.get("oracle_cannot_verify").is_none() {
            assert_eq!(
                verified,
                case["model_signing_verified"].as_bool().expect("verdict"),
                "{name}: model_signing says otherwise ({})",
                case["model_signing_error"]
            );
        }
        // A manifest mismatch names the file.
        if let Some(step) = case["mutate"].get(0) {
            if expected == "TP804" {
                let file = step["path"].as_str().expect("path");
                assert!(
                    found.iter().any(|(_, m)| m.contains(file)),
                    "{name}: no finding names {file}: {found:?}"
                );
            }
        }
    }
}

#[test]
fn the_report_names_the_signer() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let case = |n: &str| {
        truth["cases"]
            .as_array()
            .expect("cases")
            .iter()
            .find(|c| c["name"] == n)
            .expect("case")
            .clone()
    };
    let (_, report) = audit(&case("key/good"), &root().join(DIR).join("key"), &[]);
    let signer = &report["signatures"][0]["signer"];
    assert_eq!(signer["kind"], "key");
    // sha256 of the SubjectPublicKeyInfo DER: the PEM's body.
    let pem = std::fs::read_to_string(root().join(DIR).join("keys/signer.pub")).expect("pem");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    let expected = format!("sha256:{:x}", Sha256::digest(&der));
    assert_eq!(signer["fingerprint"], expected.as_str());
    assert_eq!(report["signatures"][0]["resources"], 3);

    let (_, report) = audit(&case("cert/good"), &root().join(DIR).join("cert"), &[]);
    let signer = &report["signatures"][0]["signer"];
    assert_eq!(signer["kind"], "certificate");
    assert_eq!(signer["subject"], "CN=tensorplay test model signer");

    let (_, report) = audit(
        &case("keyless-v1.1.0/good"),
        &root().join(DIR).join("keyless-v1.1.0"),
        &[],
    );
    let signer = &report["signatures"][0]["signer"];
    assert_eq!(signer["kind"], "identity");
    assert_eq!(signer["identity"], "stefanb@us.ibm.com");
    assert_eq!(report["signatures"][0]["method"], "keyless");
}

#[test]
fn a_signature_elsewhere_is_read_through_signature() {
    let tmp = TempDir::new("sig-elsewhere");
    let model = tmp.0.join("key");
    copy_dir(&root().join(DIR).join("key"), &model);
    let sig = tmp.0.join("moved.sig");
    std::fs::rename(model.join("model.sig"), &sig).expect("move");
    let case = serde_json::json!({"trust": {"public_key": "keys/signer.pub"}});
    let (code, report) = audit(
        &case,
        &model,
        &["--signature", sig.to_str().expect("utf-8")],
    );
    assert_eq!(code, Some(0), "{:?}", provenance(&report));
    assert_eq!(provenance(&report)[0].0, "TP805");
}

#[test]
fn a_trust_source_is_required_and_a_signature_is_never_trusted_by_default() {
    let model = format!("{DIR}/key");
    let out = tensorplay(&["audit", "--require-signature", &model]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("trust source"), "{}", stderr(&out));
    // No trust source, no flag: the signature is not looked at, let alone trusted.
    let out = tensorplay(&["audit", "--format", "json", &model]);
    let report: serde_json::Value =
        serde_json::from_str(&crate::common::stdout(&out)).expect("json");
    assert!(report.get("signatures").is_none());
    assert!(provenance(&report).is_empty());
    // A trust source without --require-signature: verified and said as info.
    let key = format!("{DIR}/keys/signer.pub");
    let out = tensorplay(&["audit", "--format", "json", "--public-key", &key, &model]);
    let report: serde_json::Value =
        serde_json::from_str(&crate::common::stdout(&out)).expect("json");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(provenance(&report)[0].0, "TP805");
    // Two trust sources are refused.
    let chain = format!("{DIR}/keys/root.crt");
    let out = tensorplay(&[
        "audit",
        "--require-signature",
        "--public-key",
        &key,
        "--certificate-chain",
        &chain,
        &model,
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_emitted_oms_manifest_is_what_model_signing_signed() {
    let tmp = TempDir::new("sig-emit");
    let out_file = tmp.0.join("manifest.json");
    let out = tensorplay(&[
        "audit",
        "--format",
        "json",
        "--emit-oms-manifest",
        out_file.to_str().expect("utf-8"),
        &format!("{DIR}/key"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let emitted: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).expect("written")).expect("json");
    let bundle = read_json(&format!("{DIR}/key/model.sig"));
    let payload = base64::engine::general_purpose::STANDARD
        .decode(bundle["dsseEnvelope"]["payload"].as_str().expect("payload"))
        .expect("base64");
    let signed: serde_json::Value = serde_json::from_slice(&payload).expect("statement");
    assert_eq!(emitted["subject"], signed["subject"]);
    assert_eq!(emitted["predicateType"], signed["predicateType"]);
    assert_eq!(
        emitted["predicate"]["resources"],
        signed["predicate"]["resources"]
    );
}

#[test]
fn a_private_sigstore_root_replaces_the_embedded_one() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let case = truth["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["name"] == "keyless-v1.1.0/good")
        .expect("case")
        .clone();
    let model = root().join(DIR).join("keyless-v1.1.0");
    let run = |root_file: &str| {
        let path = crate::common::root().join(DIR).join(root_file);
        audit(
            &case,
            &model,
            &["--trust-root", path.to_str().expect("utf-8")],
        )
    };
    // The production root, given as a file (sigstore-python's copy): the same verdict.
    let (code, report) = run("trusted_root.production.json");
    assert_eq!(code, Some(0), "{:?}", provenance(&report));
    // The staging instance's root does not vouch for the production timestamp authority that
    // dated the signature: its evidence does not verify under that root.
    let (code, report) = run("trusted_root.staging.json");
    assert_eq!(code, Some(1));
    let found = provenance(&report);
    assert_eq!(found[0].0, "TP802", "{found:?}");
    assert!(found[0].1.contains("trusted TSA"), "{found:?}");
    // Not a trusted root: nothing is trusted.
    let (code, report) = run("keys/root.crt");
    assert_eq!(code, Some(1));
    assert_eq!(
        provenance(&report)[0].0,
        "TP803",
        "{:?}",
        provenance(&report)
    );
}

#[test]
fn a_partitioned_run_refuses_to_verify_signatures() {
    let out = tensorplay(&[
        "audit",
        "--partition",
        "1/2",
        "--require-signature",
        "--public-key",
        &format!("{DIR}/keys/signer.pub"),
        &format!("{DIR}/key"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("partitioned"), "{}", stderr(&out));
}

/// A signature file larger than any bundle is refused before it is read whole (a sparse
/// file here: nothing is written).
#[test]
fn a_signature_larger_than_any_bundle_is_refused_unread() {
    let dir = TempDir::new("signature-too-large");
    let model = dir.0.join("model");
    copy_dir(&root().join(DIR).join("key"), &model);
    let sig = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(model.join("model.sig"))
        .expect("model.sig");
    sig.set_len((64 << 20) + 1).expect("sparse length");
    let key = root().join(DIR).join("keys/signer.pub");
    let out = tensorplay(&[
        "audit",
        "--format",
        "json",
        "--require-signature",
        "--public-key",
        key.to_str().expect("utf-8"),
        model.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: serde_json::Value =
        serde_json::from_str(&crate::common::stdout(&out)).expect("JSON report");
    let found = provenance(&report);
    assert!(
        found
            .iter()
            .any(|(code, m)| code == "TP802" && m.contains("larger than the 64 MiB")),
        "{found:?}"
    );
}
