//! Remote checkpoints (`https://`, `hf://`, `s3://`, `az://`, `gs://`) read by byte ranges from a
//! loopback server: the
//! same findings as the same files audited locally, far fewer bytes read than they weigh, and
//! every fault of the store a refusal (exit 2 or TP502), never a pass; a read past the run's
//! remote budget is TP506 (over-budget), naming the flag.

use crate::common::range_server::{Fault, RangeServer, BUCKET, GCS_BUCKET, SHA};
use crate::common::{root, stderr, stdout};
use std::process::{Command, Output};

fn audit(args: &[&str], endpoint: Option<&str>) -> Output {
    audit_env(args, endpoint, &[])
}

fn audit_env(args: &[&str], endpoint: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tensorplay"));
    command
        .arg("audit")
        .args(["--format", "json", "--color", "never"])
        .args(args)
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("HF_TOKEN")
        .env_remove("TENSORPLAY_ALLOW_HTTP")
        .env_remove("STORAGE_EMULATOR_HOST");
    if let Some(endpoint) = endpoint {
        command.env("HF_ENDPOINT", endpoint);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("tensorplay runs")
}

/// Each audited file's findings as JSON text, its path (and every mention of it) replaced by
/// what follows `prefix`, keyed by that.
fn findings(out: &Output, prefix: &str) -> Vec<(String, String)> {
    let report: serde_json::Value =
        serde_json::from_str(&stdout(out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)));
    let mut files: Vec<(String, String)> = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|file| {
            let path = file["path"].as_str().expect("path");
            let rel = path.strip_prefix(prefix).unwrap_or(path).to_owned();
            // A fingerprint covers the path; the rest of a finding must not depend on it.
            let mut findings = file["findings"].clone();
            for finding in findings.as_array_mut().expect("findings") {
                finding
                    .as_object_mut()
                    .expect("finding")
                    .remove("fingerprint");
            }
            let text = findings.to_string().replace(path, "<file>");
            let text = match prefix {
                "" => text,
                prefix => text.replace(prefix, "<root>/"),
            };
            (rel, text)
        })
        .collect();
    files.sort();
    files
}

/// A safetensors file of one F32 tensor of `mib` MiB of zeros.
fn zeros_safetensors(path: &std::path::Path, mib: u64) {
    let len = mib << 20;
    let header = format!(
        r#"{{"w":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{len}]}}}}"#,
        len / 4
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + len as usize, 0);
    std::fs::write(path, &bytes).unwrap();
}

fn server() -> RangeServer {
    RangeServer::start(&root().join("fixtures"))
}

#[test]
fn every_fixture_family_audited_from_the_hub_gives_the_local_findings() {
    let server = server();
    let endpoint = server.endpoint();
    for family in ["safetensors", "pytorch", "dcp", "pt2", "numpy", "gguf"] {
        let arg = format!("hf://org/{family}");
        let shown = format!("hf://org/{family}@{SHA}/");
        assert_as_local(family, &arg, &shown, Some(&endpoint), &[]);
    }
}

/// Audits `fixtures/FAMILY` locally (metadata only) and remotely as `arg`, whose files the
/// report shows under `shown`, and asserts the same exit code and findings (paths aside).
fn assert_as_local(
    family: &str,
    arg: &str,
    shown: &str,
    endpoint: Option<&str>,
    env: &[(&str, &str)],
) {
    let local = audit(&["--metadata-only", &format!("fixtures/{family}")], None);
    let remote = audit_env(&[arg], endpoint, env);
    assert_eq!(
        remote.status.code(),
        local.status.code(),
        "{family}: {}",
        stderr(&remote)
    );
    let local = findings(&local, &format!("fixtures/{family}/"));
    let remote = findings(&remote, shown);
    assert!(local.len() > 3, "{family}: {local:?}");
    assert_eq!(remote, local, "{family}");
}

#[test]
fn an_s3_prefix_and_an_s3_object_give_the_local_findings() {
    let server = server();
    let endpoint = server.endpoint();
    // Credentials the loopback server ignores: without them the chain would ask the instance
    // metadata service, beyond loopback.
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ];
    for family in ["safetensors", "pytorch"] {
        let arg = format!("s3://{BUCKET}/{family}");
        assert_as_local(family, &arg, &format!("{arg}/"), None, &env);
    }
    let one = audit_env(
        &[&format!("s3://{BUCKET}/pytorch/overlapping_params.pt")],
        None,
        &env,
    );
    assert_eq!(one.status.code(), Some(1), "{}", stderr(&one));
    assert!(stdout(&one).contains("TP101"));
    // The store's faults, through object_store: a whole body for a range cannot be judged; a
    // changed object is refused.
    let dir = crate::common::TempDir::new("remote-s3-faults");
    zeros_safetensors(&dir.0.join("f.safetensors"), 1);
    let server = RangeServer::start(&dir.0);
    let endpoint = server.endpoint();
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        env[1],
        env[2],
        env[3],
    ];
    let url = format!("s3://{BUCKET}/f.safetensors");
    for (fault, code) in [(Fault::WholeBody, 2), (Fault::ChangesAfter(1), 1)] {
        server.set_fault(fault);
        let out = audit_env(&["--deep", &url], None, &env);
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(code), "{fault:?}: {all}");
        assert!(all.contains(&url), "{fault:?}: {all}");
    }
}

#[test]
fn an_azure_container_gives_the_local_findings() {
    let server = server();
    let endpoint = server.endpoint();
    // The emulator's well-known account and key, at the loopback server.
    let env = [
        ("AZURE_STORAGE_USE_EMULATOR", "true"),
        ("AZURITE_BLOB_STORAGE_URL", endpoint.as_str()),
    ];
    for family in ["safetensors", "dcp"] {
        let arg = format!("az://{BUCKET}/{family}");
        assert_as_local(family, &arg, &format!("{arg}/"), None, &env);
    }
}

#[test]
fn a_gcs_prefix_and_a_gcs_object_give_the_local_findings() {
    let server = server();
    let endpoint = server.endpoint();
    // The variable Google's client libraries and emulators use; no credentials at all.
    let env = [("STORAGE_EMULATOR_HOST", endpoint.as_str())];
    for family in ["safetensors", "pytorch", "dcp"] {
        let arg = format!("gs://{GCS_BUCKET}/{family}");
        assert_as_local(family, &arg, &format!("{arg}/"), None, &env);
    }
    // One object, the emulator named without a scheme as Google's libraries allow.
    let host = endpoint.trim_start_matches("http://");
    let url = format!("gs://{GCS_BUCKET}/pytorch/overlapping_params.pt");
    let one = audit_env(&[&url], None, &[("STORAGE_EMULATOR_HOST", host)]);
    assert_eq!(one.status.code(), Some(1), "{}", stderr(&one));
    let report: serde_json::Value = serde_json::from_str(&stdout(&one)).unwrap();
    assert_eq!(report["files"][0]["path"], url.as_str());
    assert!(stdout(&one).contains("TP101"));
    assert!(
        stderr(&one).contains(&format!("note: {url}: read ")),
        "{}",
        stderr(&one)
    );
    // A changed object is refused, as S3's and Azure's are.
    let dir = crate::common::TempDir::new("remote-gcs-faults");
    zeros_safetensors(&dir.0.join("f.safetensors"), 1);
    let server = RangeServer::start(&dir.0);
    server.set_fault(Fault::ChangesAfter(1));
    let url = format!("gs://{GCS_BUCKET}/f.safetensors");
    let endpoint = server.endpoint();
    let out = audit_env(
        &["--deep", &url],
        None,
        &[("STORAGE_EMULATOR_HOST", endpoint.as_str())],
    );
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("TP502") && all.contains(&url), "{all}");
}

#[test]
fn a_range_read_sent_again_is_one_request_more_within_max_requests() {
    let dir = crate::common::TempDir::new("remote-retries");
    zeros_safetensors(&dir.0.join("f.safetensors"), 1);
    let server = RangeServer::start(&dir.0);
    let endpoint = server.endpoint();
    let gcs = [("STORAGE_EMULATOR_HOST", endpoint.as_str())];
    // An https:// object (retried by tensorplay) and a GCS one (retried by object_store).
    let cases = [
        (server.url("f.safetensors"), &[][..]),
        (format!("gs://{GCS_BUCKET}/f.safetensors"), &gcs[..]),
    ];
    for (arg, env) in cases {
        server.set_fault(Fault::None);
        let clean = audit_env(&[&arg], None, env);
        assert_eq!(clean.status.code(), Some(0), "{arg}: {}", stderr(&clean));
        let report: serde_json::Value = serde_json::from_str(&stdout(&clean)).unwrap();
        let reads = report["files"][0]["remote"]["requests"].as_u64().unwrap();
        assert_eq!(server.range_requests() as u64, reads, "{arg}");
        // The run's requests without a retry: the object's HEAD, then its reads.
        let enough = reads + 1;

        // Two 503s: the two attempts more are two requests more, past the limit (TP506, as
        // any read past the budget).
        server.set_fault(Fault::UnavailableFirst(2));
        let limit = enough.to_string();
        let out = audit_env(&["--max-requests", &limit, &arg], None, env);
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(1), "{arg}: {all}");
        assert!(all.contains("TP506"), "{arg}: {all}");
        assert!(
            all.contains(&format!(
                "(--max-requests): the run would make {} range requests, more than the {enough} \
                 allowed",
                enough + 1
            )),
            "{arg}: {all}"
        );
        // The attempt the limit refused was never sent.
        assert_eq!(server.range_requests(), 1, "{arg}");

        // With room for them the read goes on, and its requests count them.
        server.set_fault(Fault::UnavailableFirst(2));
        let limit = (enough + 2).to_string();
        let out = audit_env(&["--max-requests", &limit, &arg], None, env);
        assert_eq!(out.status.code(), Some(0), "{arg}: {}", stderr(&out));
        let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(report["files"][0]["remote"]["requests"], reads + 2, "{arg}");
        assert_eq!(server.range_requests() as u64, reads + 2, "{arg}");
        let note = format!(" in {} requests", reads + 2);
        assert!(stderr(&out).contains(&note), "{arg}: {}", stderr(&out));

        // The failed answers' bodies are bytes fetched too: a budget of the read's bytes alone
        // is passed by the first 503's body, and the read stops there.
        let bytes = report["files"][0]["remote"]["bytes_read"].as_u64().unwrap();
        server.set_fault(Fault::UnavailableFirst(2));
        let out = audit_env(&["--max-remote-bytes", &bytes.to_string(), &arg], None, env);
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(1), "{arg}: {all}");
        assert!(all.contains("TP506"), "{arg}: {all}");
        assert!(all.contains("(--max-remote-bytes)"), "{arg}: {all}");
        assert_eq!(server.range_requests(), 1, "{arg}");
        server.set_fault(Fault::UnavailableFirst(2));
        let room = (bytes + 1024).to_string();
        let out = audit_env(&["--max-remote-bytes", &room, &arg], None, env);
        assert_eq!(out.status.code(), Some(0), "{arg}: {}", stderr(&out));
    }
}

#[test]
fn an_https_file_is_audited_from_a_few_ranges_of_it() {
    let server = server();
    let file = "pytorch/overlapping_params.pt";
    let local = audit(&["--metadata-only", &format!("fixtures/{file}")], None);
    let url = server.url(file);
    let remote = audit(&[&url], None);
    assert_eq!(remote.status.code(), Some(1), "{}", stderr(&remote));
    let mut local = findings(&local, "");
    let mut remote = findings(&remote, "");
    local.iter_mut().for_each(|f| f.0.clear());
    remote.iter_mut().for_each(|f| f.0.clear());
    assert_eq!(remote, local);
    assert!(remote[0].1.contains("TP101"), "{remote:?}");
    // The JSON report says what was read of it, as the schema describes; the HTML shows it.
    let dir = crate::common::TempDir::new("remote-report");
    let html = dir.0.join("report.html");
    let out = audit(&["--html", html.to_str().unwrap(), &url], None);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let size = std::fs::metadata(root().join("fixtures").join(file))
        .unwrap()
        .len();
    assert_eq!(report["files"][0]["remote"]["size"], size);
    assert_eq!(
        report["files"][0]["remote"]["bytes_read"], size,
        "a small file is read whole"
    );
    assert_eq!(report["files"][0]["remote"]["requests"], 1);
    let validator = crate::report_limits::validator();
    let errors = crate::report_limits::schema_errors(&validator, &report);
    assert!(errors.is_empty(), "{errors:?}");
    let html = std::fs::read_to_string(html).unwrap();
    assert!(html.contains("<dt>read remotely</dt>"), "{html}");
    assert!(stderr(&audit(&[&url], None)).contains(&format!("note: {url}: read ")));
}

#[test]
fn a_large_safetensors_file_is_audited_reading_under_one_percent_of_it() {
    // 64 MiB of zeros behind a small header: the audit needs the header only.
    let dir = crate::common::TempDir::new("remote-large");
    zeros_safetensors(&dir.0.join("big.safetensors"), 64);
    let server = RangeServer::start(&dir.0);
    let out = audit(&[&server.url("big.safetensors")], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let note = stderr(&out);
    // Its first 128 KiB, as every object is first read: the header lies there.
    assert!(
        note.contains("read 128.0 KiB of 64.0 MiB in 1 request"),
        "{note}"
    );
}

/// `torch.save` of `n` float32 tensors `w{i}` of `numel` elements, storage key `{i}`, as a
/// torch-style archive (its data.pkl written out opcode by opcode, protocol 2).
fn many_records(n: usize, numel: u32) -> Vec<u8> {
    let text = |p: &mut Vec<u8>, s: &str| {
        p.push(b'X');
        p.extend((s.len() as u32).to_le_bytes());
        p.extend(s.as_bytes());
    };
    let mut pickle = b"\x80\x02}(".to_vec();
    for i in 0..n {
        text(&mut pickle, &format!("w{i}"));
        pickle.extend(b"ctorch._utils\n_rebuild_tensor_v2\n((");
        text(&mut pickle, "storage");
        pickle.extend(b"ctorch\nFloatStorage\n");
        text(&mut pickle, &i.to_string());
        text(&mut pickle, "cpu");
        pickle.push(b'J');
        pickle.extend(numel.to_le_bytes());
        pickle.extend(b"tQK\x00J");
        pickle.extend(numel.to_le_bytes());
        pickle.extend(b"\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR");
    }
    pickle.extend(b"u.");
    let mut zip = crate::common::zip_writer::ZipWriter::default();
    zip.add("archive/data.pkl", &pickle);
    let record = vec![0u8; numel as usize * 4];
    for i in 0..n {
        zip.add(&format!("archive/data/{i}"), &record);
    }
    zip.add("archive/version", b"3\n");
    zip.finish()
}

#[test]
fn a_remote_archive_s_local_headers_are_fetched_together_a_page_each() {
    // 24 records of 256 KiB: each local header is a request, and was a 64 KiB block asked for
    // once the one before had come back (1.6 MiB read of 6 MiB). The headers are now asked for
    // together, several at once, a page around each.
    let dir = crate::common::TempDir::new("remote-headers");
    std::fs::write(dir.0.join("model.pt"), many_records(24, 64 << 10)).unwrap();
    let local = audit(
        &["--metadata-only", dir.0.join("model.pt").to_str().unwrap()],
        None,
    );
    let server = RangeServer::start(&dir.0);
    let url = server.url("model.pt");
    let remote = audit(&[&url], None);
    assert_eq!(
        remote.status.code(),
        local.status.code(),
        "{}",
        stderr(&remote)
    );
    let strip = |mut f: Vec<(String, String)>| {
        f.iter_mut().for_each(|f| f.0.clear());
        f
    };
    assert_eq!(strip(findings(&remote, "")), strip(findings(&local, "")));
    let report: serde_json::Value = serde_json::from_str(&stdout(&remote)).unwrap();
    let read = &report["files"][0]["remote"];
    assert_eq!(
        read["requests"].as_u64(),
        Some(server.range_requests() as u64)
    );
    // The head (128 KiB), the end records and directory (a block), the other 23 headers: at
    // most two pages each.
    let bytes = read["bytes_read"].as_u64().unwrap();
    assert!(bytes <= (128 + 64 + 23 * 8) << 10, "{read}");
}

#[test]
fn a_large_array_is_audited_reading_its_header_and_a_deep_read_fetches_it_once() {
    // 64 MiB of float32 zeros behind an .npy header: the audit asks for the header alone, and
    // no byte it does not ask for is fetched.
    let dir = crate::common::TempDir::new("remote-npy");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (16777216,), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let padded = (10 + header.len() + 1).div_ceil(64) * 64 - 10;
    bytes.extend_from_slice(&(padded as u16).to_le_bytes());
    bytes.extend_from_slice(format!("{header:<width$}\n", width = padded - 1).as_bytes());
    bytes.resize(bytes.len() + (64 << 20), 0);
    std::fs::write(dir.0.join("big.npy"), &bytes).unwrap();
    let server = RangeServer::start(&dir.0);
    let url = server.url("big.npy");
    let out = audit(&[&url], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("read 128.0 KiB of 64.0 MiB in 1 request"),
        "{}",
        stderr(&out)
    );
    // --deep reads every byte, each once, in requests that grow as the scan goes on.
    let out = audit(&["--deep", &url], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let remote = &report["files"][0]["remote"];
    assert_eq!(remote["bytes_read"], bytes.len() as u64, "{remote}");
    assert!(remote["requests"].as_u64().unwrap() <= 12, "{remote}");
}

#[test]
fn a_sharded_index_s_note_counts_its_shards() {
    use tensorplay_audit::text::{human_bytes, plural};
    let server = server();
    let index = "hf://org/safetensors/sharded/model.safetensors.index.json";
    let out = audit(&[index], Some(&server.endpoint()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let remote = &report["files"][0]["remote"];
    // The checkpoint is the index and its two shards, each read whole (they are small).
    let dir = root().join("fixtures/safetensors/sharded");
    let size: u64 = [
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    .iter()
    .map(|f| std::fs::metadata(dir.join(f)).unwrap().len())
    .sum();
    assert_eq!(remote["size"], size, "{remote}");
    assert_eq!(remote["requests"], 3, "{remote}");
    // The note says the same of the path given: what was read of the index and its shards.
    let u = |key: &str| remote[key].as_u64().unwrap();
    let shown = format!("hf://org/safetensors@{SHA}/sharded/model.safetensors.index.json");
    let note = format!(
        "note: {shown}: read {} of {} in {}",
        human_bytes(u("bytes_read")),
        human_bytes(u("size")),
        plural(3, "request")
    );
    assert!(
        stderr(&out).lines().any(|l| l == note),
        "{note}\n{}",
        stderr(&out)
    );
}

#[test]
fn every_fault_of_the_store_is_a_refusal_naming_the_url() {
    // Larger than the first ranges fetched, so that --deep reads a second range.
    let dir = crate::common::TempDir::new("remote-faults");
    zeros_safetensors(&dir.0.join("f.safetensors"), 1);
    let server = RangeServer::start(&dir.0);
    let url = server.url("f.safetensors");
    let cases = [
        (Fault::WholeBody, 2, "whole object (200, not 206)"),
        (Fault::ShortBody, 2, "the body ended after"),
        (Fault::Status(500), 2, "HTTP 500"),
        (Fault::Status(403), 2, "HTTP 403"),
        (Fault::ChangesAfter(1), 1, "changed while it was read"),
    ];
    for (fault, code, message) in cases {
        server.set_fault(fault);
        // A larger file than the first ranges cover, so a second range is read.
        let out = audit(&["--deep", &url], None);
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(code), "{fault:?}: {all}");
        assert!(all.contains(message), "{fault:?}: {all}");
        assert!(all.contains(&url), "{fault:?}: {all}");
        if code == 1 {
            assert!(all.contains("TP502"), "{fault:?}: {all}");
        }
    }
    // A store slower than --request-timeout: not judged.
    server.set_fault(Fault::Slow);
    let out = audit(&["--request-timeout", "1", &url], None);
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("timed out") && all.contains("--request-timeout (1 s)"),
        "{all}"
    );
    // A 429 with Retry-After is waited for, and the read goes on.
    server.set_fault(Fault::RateLimitedOnce);
    let out = audit(&[&url], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(server.range_requests() >= 2);
}

#[test]
fn plain_http_beyond_loopback_and_unknown_schemes_are_refused_before_any_read() {
    let out = audit(&["http://example.invalid/model.safetensors"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--allow-http"), "{}", stderr(&out));
    let out = audit(&["abfs://container@account.dfs.core.windows.net/m"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not supported yet"),
        "{}",
        stderr(&out)
    );
}

/// The one finding of a one-file audit: its code, message and fix.
fn only_finding(out: &Output) -> (String, String, String) {
    let report: serde_json::Value =
        serde_json::from_str(&stdout(out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)));
    let findings = report["files"][0]["findings"].as_array().expect("findings");
    let [f] = findings.as_slice() else {
        panic!("{findings:?}")
    };
    let text = |k: &str| f[k].as_str().expect(k).to_owned();
    (text("code"), text("message"), text("fix"))
}

/// A refusal for a limit says which one and that the object was not judged, never that it
/// is corrupt or should be uploaded again.
fn not_called_corrupt(message: &str, fix: &str) {
    for word in ["corrupt", "re-upload", "re-save"] {
        assert!(!message.contains(word), "{message}");
    }
    assert!(
        fix.contains("not found corrupt") && !fix.contains("re-upload"),
        "{fix}"
    );
}

#[test]
fn the_remote_read_budget_refuses_a_deep_read_it_cannot_hold() {
    let dir = crate::common::TempDir::new("remote-budget");
    zeros_safetensors(&dir.0.join("f.safetensors"), 1);
    let server = RangeServer::start(&dir.0);
    let url = server.url("f.safetensors");
    let out = audit(&["--deep", "--max-remote-bytes", "512KiB", &url], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (code, message, fix) = only_finding(&out);
    assert_eq!(code, "TP506", "{message}");
    // The first 128 KiB and the last 64 KiB, then the rest of the 1 MiB file in one range.
    assert!(
        message.starts_with(&format!(
            "{url}: exceeds the remote read budget (--max-remote-bytes): the run's remote reads \
             would reach "
        )) && message.ends_with(", more than the 512.0 KiB (524288 bytes) allowed"),
        "{message}"
    );
    assert!(fix.contains("raise --max-remote-bytes above the "), "{fix}");
    not_called_corrupt(&message, &fix);
}

#[test]
fn the_request_budget_refuses_a_read_that_needs_more_requests() {
    let dir = crate::common::TempDir::new("remote-requests");
    zeros_safetensors(&dir.0.join("f.safetensors"), 1);
    let server = RangeServer::start(&dir.0);
    let url = server.url("f.safetensors");
    // The HEAD takes the one request allowed; the first range is one more.
    let out = audit(&["--deep", "--max-requests", "1", &url], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (code, message, fix) = only_finding(&out);
    assert_eq!(code, "TP506", "{message}");
    assert_eq!(
        message,
        format!(
            "{url}: exceeds the remote read budget (--max-requests): the run would make 2 range \
             requests, more than the 1 allowed"
        )
    );
    assert!(
        fix.contains("raise --max-requests above 1, e.g. --max-requests 2"),
        "{fix}"
    );
    not_called_corrupt(&message, &fix);
    // Within the default bounds the same read is judged.
    let out = audit(&["--deep", &url], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn inspect_views_and_diff_read_remote_paths_as_local_ones() {
    let server = server();
    let endpoint = server.endpoint();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
            .args(args)
            .current_dir(root())
            .env("HF_ENDPOINT", &endpoint)
            .env_remove("HF_TOKEN")
            .output()
            .expect("tensorplay runs");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let local = "fixtures/pytorch/overlapping_params.pt";
    let remote = "hf://org/pytorch/overlapping_params.pt";
    let shown = format!("hf://org/pytorch@{SHA}/overlapping_params.pt");
    for command in ["inspect", "views"] {
        let here = run(&[command, "--format", "json", local]);
        // Where the bytes are held is the one difference: fetched pages, not a file's map.
        let there = run(&[command, "--format", "json", remote])
            .replace(&shown, local)
            .replace("\"backend\": \"remote\"", "\"backend\": \"mmap\"");
        assert_eq!(there, here, "{command}");
    }
    let other = "pytorch/legacy_views.pt";
    let here = run(&[
        "diff",
        "--values",
        "--format",
        "json",
        local,
        &format!("fixtures/{other}"),
    ]);
    let there = run(&[
        "diff",
        "--values",
        "--format",
        "json",
        remote,
        &format!("hf://org/{other}"),
    ])
    .replace(&shown, local)
    .replace(
        &format!("hf://org/pytorch@{SHA}/legacy_views.pt"),
        &format!("fixtures/{other}"),
    );
    assert_eq!(there, here, "diff");
}
