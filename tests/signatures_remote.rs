//! OpenSSF model signatures of `hf://` repositories (TP801–TP805), served by the loopback Hub
//! (`tests/common/range_server.rs`): `fixtures/signatures/key` as a repository whose
//! `model.safetensors` is stored in LFS. The LFS file is compared by the `lfs.oid` the listing
//! gives, without fetching it; the other files are fetched whole and hashed; `--deep` hashes
//! every byte. A tampered listing, an extra file, another key and a missing signature fail with
//! their own codes.

use crate::common::range_server::{RangeServer, SHA};
use crate::common::{copy_dir, root, stderr, stdout, TempDir};
use sha2::{Digest, Sha256};
use std::process::Output;

const MODEL: &str = "fixtures/signatures/key";
const SIGNATURES: &str = "fixtures/signatures";

/// The signed files of the fixture, with their sizes.
const FILES: [&str; 4] = [
    "config.json",
    "model.safetensors",
    "model.sig",
    "tokenizer/vocab.txt",
];

fn size(rel: &str) -> u64 {
    std::fs::metadata(root().join(MODEL).join(rel))
        .expect("fixture")
        .len()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A Hub serving a copy of a signed fixture (`key` unless named) as `hf://org/VECTOR`, its
/// `model.safetensors` in LFS under its true SHA-256.
struct Hub {
    dir: TempDir,
    server: RangeServer,
    vector: &'static str,
}

impl Hub {
    fn start(tag: &str) -> Hub {
        Hub::of("key", tag)
    }

    fn of(vector: &'static str, tag: &str) -> Hub {
        let dir = TempDir::new(tag);
        let fixture = root().join(SIGNATURES).join(vector);
        copy_dir(&fixture, &dir.0.join(vector));
        let server = RangeServer::start(&dir.0);
        let model = std::fs::read(fixture.join("model.safetensors")).expect("model");
        server.set_lfs(&format!("{vector}/model.safetensors"), &sha256_hex(&model));
        Hub {
            dir,
            server,
            vector,
        }
    }

    fn repo(&self) -> std::path::PathBuf {
        self.dir.0.join(self.vector)
    }

    /// `audit --require-signature --public-key KEY hf://org/key EXTRA…`, in JSON.
    fn audit(&self, key: &str, extra: &[&str]) -> (Output, serde_json::Value) {
        let out = self.run("json", key, extra);
        let report = serde_json::from_str(&stdout(&out))
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
        (out, report)
    }

    /// The same audit in `format`.
    fn run(&self, format: &str, key: &str, extra: &[&str]) -> Output {
        let key = root().join("fixtures/signatures/keys").join(key);
        std::process::Command::new(env!("CARGO_BIN_EXE_tensorplay"))
            .args(["audit", "--format", format, "--color", "never"])
            .args(["--require-signature", "--public-key"])
            .arg(&key)
            .args(extra)
            .arg(format!("hf://org/{}", self.vector))
            .current_dir(root())
            .env("HF_ENDPOINT", self.server.endpoint())
            .env_remove("HF_TOKEN")
            .env_remove("GITHUB_ACTIONS")
            .env_remove("TENSORPLAY_ALLOW_HTTP")
            .output()
            .expect("tensorplay runs")
    }
}

/// The report's entry for the signature file.
fn signature_entry(report: &serde_json::Value) -> &serde_json::Value {
    report["files"]
        .as_array()
        .expect("files")
        .iter()
        .find(|f| f["format"] == "oms-signature")
        .unwrap_or_else(|| panic!("no signature entry: {report}"))
}

/// The provenance findings: (code, message).
fn provenance(report: &serde_json::Value) -> Vec<(String, String)> {
    signature_entry(report)["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["code"].as_str().expect("code").to_owned(),
                f["message"].as_str().expect("message").to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_hub_repository_verifies_by_lfs_oid_without_fetching_the_lfs_file() {
    let hub = Hub::start("sig-remote-good");
    let (out, report) = hub.audit("signer.pub", &[]);
    assert_eq!(out.status.code(), Some(0), "{report}\n{}", stderr(&out));
    let findings = provenance(&report);
    assert_eq!(findings.len(), 1, "{findings:?}");
    let (code, message) = &findings[0];
    assert_eq!(code, "TP805", "{message}");
    assert!(message.starts_with(&format!("hf://org/key@{SHA} is signed by the key sha256:")));
    assert!(
        message.contains("trusts the Hub's content addressing"),
        "{message}"
    );
    let facts = &report["signatures"][0];
    assert_eq!(facts["status"], "verified", "{facts}");
    assert_eq!(facts["digests"], "hub-lfs-oid", "{facts}");
    assert_eq!(facts["signature"], format!("hf://org/key@{SHA}/model.sig"));
    assert_eq!(facts["resources"], 3, "{facts}");
    // What the check fetched: the signature and the two files outside LFS, whole; not one
    // byte of model.safetensors (read afterwards by the checkpoint's own audit).
    let remote = &signature_entry(&report)["remote"];
    let small = size("model.sig") + size("config.json") + size("tokenizer/vocab.txt");
    assert_eq!(remote["bytes_read"], small, "{remote}");
    assert_eq!(remote["requests"], 3, "{remote}");
    assert_eq!(remote["values_read"], false, "{remote}");
    let total: u64 = FILES.iter().map(|f| size(f)).sum();
    assert_eq!(remote["size"], total, "{remote}");
    let validator = crate::report_limits::validator();
    let errors = crate::report_limits::schema_errors(&validator, &report);
    assert!(errors.is_empty(), "{errors:?}");
    // A bill of materials hashes the signature from the bytes fetched to verify it.
    let bom = hub.dir.0.join("bom.json");
    let (out, _) = hub.audit("signer.pub", &["--cyclonedx", bom.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bom = std::fs::read_to_string(&bom).expect("bom");
    let sig = std::fs::read(root().join(MODEL).join("model.sig")).expect("sig");
    assert!(bom.contains(&sha256_hex(&sig)), "{bom}");
    // People are told too, under the signature's entry.
    let human = stdout(&hub.run("human", "signer.pub", &[]));
    assert!(
        human.contains(&format!(
            "hf://org/key@{SHA}/model.sig (oms-signature, 0 tensors, 0 storages, 0 B)\n  LFS \
             files compared by the Hub's lfs.oid, not fetched: this trusts the Hub's content \
             addressing; --deep hashes every byte\n"
        )),
        "{human}"
    );

    // --deep hashes every byte instead: the LFS file is fetched by the check too.
    let hub = Hub::start("sig-remote-deep");
    let (out, report) = hub.audit("signer.pub", &["--deep"]);
    assert_eq!(out.status.code(), Some(0), "{report}\n{}", stderr(&out));
    assert_eq!(report["signatures"][0]["digests"], "hashed");
    let remote = &signature_entry(&report)["remote"];
    assert_eq!(
        remote["bytes_read"],
        small + size("model.safetensors"),
        "{remote}"
    );
    assert_eq!(remote["values_read"], true, "{remote}");
    let (code, message) = &provenance(&report)[0];
    assert_eq!(code, "TP805");
    assert!(!message.contains("lfs.oid"), "{message}");
}

#[test]
fn a_listing_whose_lfs_oid_differs_from_the_signed_digest_is_a_mismatch() {
    let hub = Hub::start("sig-remote-oid");
    // The Hub lists other content under the name; the file it would serve is the signed one.
    hub.server
        .set_lfs("key/model.safetensors", &sha256_hex(b"other content"));
    let (out, report) = hub.audit("signer.pub", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings = provenance(&report);
    assert_eq!(findings.len(), 1, "{findings:?}");
    let (code, message) = &findings[0];
    assert_eq!(code, "TP804");
    assert!(
        message.contains("model.safetensors: changed since it was signed")
            && message.contains(&sha256_hex(b"other content"))
            && message.ends_with("as the Hub lists it (lfs.oid)"),
        "{message}"
    );
    assert_eq!(report["signatures"][0]["status"], "mismatch");

    // --deep fetches the file, whose bytes do not hash to the listed lfs.oid: not what the Hub
    // listed, so not verified either.
    let (out, report) = hub.audit("signer.pub", &["--deep"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings = provenance(&report);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].0, "TP804");
    assert!(
        findings[0]
            .1
            .contains("model.safetensors could not be fetched to hash it")
            && findings[0].1.contains("lfs.oid"),
        "{findings:?}"
    );
}

#[test]
fn shards_and_blake3_signatures_hash_every_byte_of_the_repository() {
    for vector in ["key-shards", "key-blake3"] {
        let hub = Hub::of(vector, &format!("sig-remote-{vector}"));
        let (out, report) = hub.audit("signer.pub", &[]);
        assert_eq!(out.status.code(), Some(0), "{vector}: {}", stderr(&out));
        let findings = provenance(&report);
        assert_eq!(findings.len(), 1, "{vector}: {findings:?}");
        assert_eq!(findings[0].0, "TP805", "{vector}: {findings:?}");
        assert!(!findings[0].1.contains("lfs.oid"), "{vector}: {findings:?}");
        assert_eq!(report["signatures"][0]["digests"], "hashed", "{vector}");
        // Every file fetched whole, the LFS one included.
        let remote = &signature_entry(&report)["remote"];
        assert_eq!(remote["bytes_read"], remote["size"], "{vector}: {remote}");
        assert_eq!(remote["values_read"], true, "{vector}: {remote}");

        // A changed byte of the LFS file, served under its old lfs.oid: TP804.
        let path = hub.repo().join("model.safetensors");
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[300] ^= 1;
        std::fs::write(&path, bytes).expect("write");
        let (out, report) = hub.audit("signer.pub", &[]);
        assert_eq!(out.status.code(), Some(1), "{vector}: {}", stderr(&out));
        let codes: Vec<String> = provenance(&report).into_iter().map(|f| f.0).collect();
        assert_eq!(codes, ["TP804"], "{vector}");
    }
}

#[test]
fn a_file_outside_lfs_is_hashed_and_a_change_to_it_is_a_mismatch() {
    let hub = Hub::start("sig-remote-small");
    std::fs::write(hub.repo().join("config.json"), b"{\"changed\": true}\n").expect("write");
    let (out, report) = hub.audit("signer.pub", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings = provenance(&report);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].0, "TP804");
    assert!(
        findings[0]
            .1
            .contains("config.json: changed since it was signed")
            && !findings[0].1.contains("lfs.oid"),
        "{findings:?}"
    );
}

#[test]
fn an_extra_file_in_the_listing_is_a_mismatch() {
    let hub = Hub::start("sig-remote-extra");
    std::fs::write(hub.repo().join("extra.txt"), b"unsigned\n").expect("write");
    let (out, report) = hub.audit("signer.pub", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings = provenance(&report);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].0, "TP804");
    assert!(
        findings[0]
            .1
            .ends_with("extra.txt: not covered by the signature"),
        "{findings:?}"
    );
}

#[test]
fn another_key_and_a_missing_signature_fail_with_their_own_codes() {
    let hub = Hub::start("sig-remote-key");
    let (out, report) = hub.audit("other.pub", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let codes: Vec<String> = provenance(&report).into_iter().map(|f| f.0).collect();
    assert_eq!(codes, ["TP803"]);
    assert!(report["signatures"][0].get("signer").is_none());

    std::fs::remove_file(hub.repo().join("model.sig")).expect("remove");
    let (out, report) = hub.audit("signer.pub", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings = provenance(&report);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].0, "TP801");
    assert!(
        findings[0].1.contains("the repository lists no model.sig"),
        "{findings:?}"
    );
}

#[test]
fn a_check_past_the_remote_byte_budget_fails_closed_naming_the_flag() {
    let hub = Hub::start("sig-remote-budget");
    // The listing fits, the signature (1.8 KiB) does not.
    let (out, report) = hub.audit("signer.pub", &["--max-remote-bytes", "1KiB"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings = provenance(&report);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_ne!(findings[0].0, "TP805", "{findings:?}");
    assert!(findings[0].1.contains("--max-remote-bytes"), "{findings:?}");
    assert_ne!(report["signatures"][0]["status"], "verified");
}
