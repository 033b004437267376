//! Remote reads against hostile servers (`tests/common/hostile_hub.rs`): each bounded in
//! bytes, requests and time as the flags say, failing closed (exit 2 or TP502) with the limit
//! named, never a pass; and nothing a server names reaches a stream raw.

use crate::common::hostile_hub::{small_safetensors, HostileHub, Hostility, SHA};
use crate::common::hostile_store::{self, HostileStore};
use crate::common::range_server::{Fault, RangeServer};
use crate::common::{root, stderr, stdout};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `tensorplay audit ARGS` with `HF_ENDPOINT` set (when given), timed.
fn audit(args: &[&str], endpoint: Option<&str>, env: &[(&str, &str)]) -> (Output, Duration) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tensorplay"));
    command
        .arg("audit")
        .args(["--color", "never"])
        .args(args)
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("HF_TOKEN")
        .env_remove("TENSORPLAY_ALLOW_HTTP")
        .env_remove("AWS_ALLOW_HTTP")
        .env_remove("AWS_ENDPOINT")
        .env_remove("GOOGLE_ALLOW_HTTP")
        .env_remove("STORAGE_EMULATOR_HOST");
    if let Some(endpoint) = endpoint {
        command.env("HF_ENDPOINT", endpoint);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let start = Instant::now();
    let out = command.output().expect("tensorplay runs");
    (out, start.elapsed())
}

fn all(out: &Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

fn good_file() -> Vec<u8> {
    small_safetensors(&[1.0, 2.0, 3.0, 4.0])
}

#[test]
fn a_listing_without_end_stays_within_the_byte_budget_and_one_page() {
    let hub = HostileHub::start(Hostility::EndlessPage, good_file());
    let (out, took) = audit(
        &["--max-remote-bytes", "1MiB", "hf://org/bomb"],
        Some(&hub.endpoint()),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    assert!(stderr(&out).contains("--max-remote-bytes"), "{}", all(&out));
    // What the server managed to send: the budget and one page (16 MiB) at most, socket
    // buffers included; unbounded, it would send until killed.
    let sent = hub.listed_bytes();
    assert!(sent <= (1 << 20) + (16 << 20), "{sent} bytes sent");
    assert!(took < Duration::from_secs(30), "{took:?}");

    // Small pages that link a next one forever: each is a request within --max-requests.
    let hub = HostileHub::start(
        Hostility::Pages {
            pages: u64::MAX,
            per_page: 10,
        },
        good_file(),
    );
    let (out, took) = audit(
        &["--max-requests", "50", "hf://org/pages"],
        Some(&hub.endpoint()),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    assert!(stderr(&out).contains("--max-requests"), "{}", all(&out));
    // The revision, then pages until the 51st request is refused before it is sent.
    assert!(hub.pages() <= 50, "{} pages", hub.pages());
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn a_listing_of_twenty_thousand_files_is_stopped_by_its_limit() {
    let hub = HostileHub::start(
        Hostility::Pages {
            pages: 20,
            per_page: 1000,
        },
        good_file(),
    );
    let (out, _) = audit(&["hf://org/many"], Some(&hub.endpoint()), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    let err = stderr(&out);
    assert!(
        err.contains("more than 10000 files") && err.contains("--max-remote-files"),
        "{err}"
    );
    // Stopped at the page that passed 10 000, not after all 20.
    assert_eq!(hub.pages(), 11);
    let (out, _) = audit(
        &["--max-remote-files", "500", "hf://org/many"],
        Some(&hub.endpoint()),
        &[],
    );
    assert!(
        stderr(&out).contains("more than 500 files"),
        "{}",
        all(&out)
    );
}

#[test]
fn a_long_retry_after_and_a_body_of_a_byte_a_second_end_within_twice_the_timeout() {
    for (hostility, says) in [
        (Hostility::RateLimited(30), "HTTP 429"),
        (
            Hostility::SlowBody,
            "no complete answer within --request-timeout",
        ),
    ] {
        let hub = HostileHub::start(hostility.clone(), good_file());
        let (out, took) = audit(
            &["--request-timeout", "3", "hf://org/slow"],
            Some(&hub.endpoint()),
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{hostility:?}: {}", all(&out));
        let err = stderr(&out);
        assert!(
            err.contains(says) && err.contains("--request-timeout (3 s)"),
            "{hostility:?}: {err}"
        );
        assert!(!stdout(&out).contains("passed"), "{}", stdout(&out));
        assert!(took < Duration::from_secs(6), "{hostility:?}: {took:?}");
    }
}

#[test]
fn a_store_slow_on_every_request_is_stopped_by_the_run_s_deadline() {
    // Each answer comes well within --request-timeout; together they would take for ever.
    let hub = HostileHub::start(
        Hostility::SlowPages(Duration::from_millis(300)),
        good_file(),
    );
    let (out, took) = audit(
        &[
            "--request-timeout",
            "5",
            "--remote-deadline",
            "2s",
            "hf://org/slow",
        ],
        Some(&hub.endpoint()),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    let err = stderr(&out);
    assert!(
        err.contains("(--remote-deadline)") && err.contains("past the 2 s allowed"),
        "{err}"
    );
    assert!(!stdout(&out).contains("passed"), "{}", stdout(&out));
    // The deadline and one request under way, at most.
    assert!(took < Duration::from_secs(2 + 5), "{took:?}");
    assert!(hub.pages() >= 3, "{} pages", hub.pages());

    // Forty files, each range a second in coming: those not read by the deadline are not
    // judged (TP506 naming the flag), and none is sent a request after it.
    let hub = HostileHub::start(
        Hostility::SlowFiles(40, Duration::from_secs(1)),
        good_file(),
    );
    let (out, took) = audit(
        &[
            "--request-timeout",
            "5",
            "--remote-deadline",
            "3",
            "--format",
            "json",
            "hf://org/slow",
        ],
        Some(&hub.endpoint()),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(took < Duration::from_secs(3 + 5), "{took:?}");
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["summary"]["passed"], false);
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 40);
    let late: Vec<&serde_json::Value> = files
        .iter()
        .filter(|f| f["findings"][0]["code"] == "TP506")
        .collect();
    assert!(late.len() >= 30, "{} of 40 not judged", late.len());
    for file in late {
        let finding = &file["findings"][0];
        let message = finding["message"].as_str().unwrap();
        assert!(message.contains("(--remote-deadline)"), "{message}");
        assert!(
            finding["fix"]
                .as_str()
                .unwrap()
                .contains("raise --remote-deadline above 3 s"),
            "{finding}"
        );
    }
}

/// The environment that points S3 (`s3`), Azure (`az`) or GCS (`gs`) at `endpoint`, with
/// credentials the loopback store ignores (without them the chains would ask a metadata
/// service); a GCS emulator is asked with none.
fn store_env(scheme: &str, endpoint: &str) -> Vec<(&'static str, String)> {
    let pairs: Vec<(&str, &str)> = match scheme {
        "s3" => vec![
            ("AWS_ENDPOINT_URL", endpoint),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ],
        "az" => vec![
            ("AZURE_STORAGE_USE_EMULATOR", "true"),
            ("AZURITE_BLOB_STORAGE_URL", endpoint),
        ],
        _ => vec![("STORAGE_EMULATOR_HOST", endpoint)],
    };
    pairs.into_iter().map(|(k, v)| (k, v.to_owned())).collect()
}

fn with_env<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn an_s3_azure_or_gcs_listing_of_large_pages_stays_within_the_budgets() {
    for scheme in ["s3", "az", "gs"] {
        // Pages of about 1 MiB without end: 2 MiB allows two, and the one that passes it is
        // cut off as it arrives. Uncounted, the listing went on to --max-remote-files (ten
        // pages).
        let store = HostileStore::start(hostile_store::Hostility::ListingBomb);
        let env = store_env(scheme, &store.endpoint());
        let (out, took) = audit(
            &[
                "--max-remote-bytes",
                "2MiB",
                &format!("{scheme}://bucket/bomb"),
            ],
            None,
            &with_env(&env),
        );
        assert_eq!(out.status.code(), Some(2), "{scheme}: {}", all(&out));
        let err = stderr(&out);
        assert!(
            err.contains("(--max-remote-bytes)") && err.contains("more than the 2.0 MiB"),
            "{scheme}: {err}"
        );
        let sent = store.listed_bytes();
        assert!(store.pages() <= 3, "{scheme}: {} pages", store.pages());
        assert!(sent <= (2 << 20) + (3 << 19), "{scheme}: {sent} bytes sent");
        assert!(took < Duration::from_secs(30), "{scheme}: {took:?}");

        // Each page is a request within --max-requests, as the HEAD of the key before them is.
        let store = HostileStore::start(hostile_store::Hostility::ListingBomb);
        let env = store_env(scheme, &store.endpoint());
        let (out, _) = audit(
            &["--max-requests", "4", &format!("{scheme}://bucket/bomb")],
            None,
            &with_env(&env),
        );
        assert_eq!(out.status.code(), Some(2), "{scheme}: {}", all(&out));
        assert!(
            stderr(&out).contains("(--max-requests): the run would make 5 range requests"),
            "{scheme}: {}",
            all(&out)
        );
        assert_eq!(store.pages(), 3, "{scheme}");
    }
}

#[test]
fn a_store_s_error_answer_is_summarised_bounded_and_escaped() {
    let message = format!(
        "Access Denied\u{1b}[2J\n::error::INJECTED {}",
        "x".repeat(50_000)
    );
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied</Code>\
         <Message>{message}</Message><RequestId>R</RequestId></Error>"
    );
    for scheme in ["s3", "az", "gs"] {
        let store = HostileStore::start(hostile_store::Hostility::ErrorAnswer(403, xml.clone()));
        let env = store_env(scheme, &store.endpoint());
        let (out, _) = audit(
            &[&format!("{scheme}://bucket/model")],
            None,
            &with_env(&env),
        );
        assert_eq!(out.status.code(), Some(2), "{scheme}: {}", all(&out));
        let err = stderr(&out);
        assert!(
            err.contains("AccessDenied: Access Denied\\u{1b}[2J\\u{a}::error::INJECTED xxx"),
            "{scheme}: {err}"
        );
        assert_no_raw_body(&out, scheme);
    }
    // The Hub's JSON error.
    let json = serde_json::json!({"error": message}).to_string();
    let hub = HostileHub::start(Hostility::ErrorAnswer(401, json), good_file());
    let (out, _) = audit(&["hf://org/private"], Some(&hub.endpoint()), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    let err = stderr(&out);
    assert!(
        err.contains("HTTP 401 Unauthorized (Access Denied\\u{1b}[2J\\u{a}::error::INJECTED xxx"),
        "{err}"
    );
    assert_no_raw_body(&out, "hf");
    // A name object_store refuses (an empty path segment) is quoted in its message: bounded.
    let name = format!("a//{}", "n".repeat(5000));
    let store = HostileStore::start(hostile_store::Hostility::Named(name));
    let env = store_env("s3", &store.endpoint());
    let (out, _) = audit(&["s3://bucket/model"], None, &with_env(&env));
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    let err = stderr(&out);
    assert!(err.contains("invalid path"), "{err}");
    assert!(err.lines().all(|l| l.chars().count() < 800), "{err}");
    assert!(err.contains("nnn…"), "{err}");
}

/// No markup, no raw control character, no line a server started, and no more than a bounded
/// part of a 50 000-character message, on either stream.
fn assert_no_raw_body(out: &Output, what: &str) {
    for (stream, text) in [("stdout", stdout(out)), ("stderr", stderr(out))] {
        assert!(!text.contains('\u{1b}'), "{what} {stream}: {text}");
        assert!(
            !text.contains("<Code>") && !text.contains("<?xml"),
            "{what} {stream}: {text}"
        );
        assert!(!text.contains("{\"error\""), "{what} {stream}: {text}");
        assert!(
            !text.lines().any(|l| l.trim_start().starts_with("::error")),
            "{what} {stream}: {text}"
        );
        assert!(
            !text.contains(&"x".repeat(400)),
            "{what} {stream}: {} chars",
            text.len()
        );
    }
}

#[test]
fn names_a_server_gives_reach_no_stream_raw() {
    let names = [
        "a\n::warning title=INJECTED::x.safetensors",
        "b\u{1b}[2Kc\u{7}.safetensors",
        "d\u{202e}fig.safetensors",
        "missing\n::error title=INJECTED::y.safetensors",
    ];
    let hub = HostileHub::start(
        Hostility::Names(names.iter().map(|n| n.to_string()).collect()),
        good_file(),
    );
    for format in ["human", "json", "github", "sarif"] {
        let (out, _) = audit(
            &["--format", format, "hf://org/names"],
            Some(&hub.endpoint()),
            &[],
        );
        // The missing file is not judged.
        assert_eq!(out.status.code(), Some(2), "{format}: {}", all(&out));
        for (stream, text) in [("stdout", stdout(&out)), ("stderr", stderr(&out))] {
            for c in ['\u{1b}', '\u{7}', '\u{202e}'] {
                assert!(!text.contains(c), "{format} {stream}: {c:?} in {text}");
            }
            // A line starting `::` is a workflow command to GitHub Actions.
            for line in text.lines() {
                let start = line.trim_start();
                for injected in ["::warning title=INJECTED", "::error title=INJECTED"] {
                    assert!(!start.starts_with(injected), "{format} {stream}: {line}");
                }
            }
        }
        // The names did reach both streams, escaped.
        assert!(
            stderr(&out).contains("missing\\u{a}::error"),
            "{}",
            all(&out)
        );
        if format == "human" || format == "github" {
            assert!(stdout(&out).contains("b\\u{1b}[2Kc\\u{7}"), "{}", all(&out));
            assert!(stdout(&out).contains("d\\u{202e}fig"), "{}", all(&out));
            assert!(stdout(&out).contains("could not judge: hf://org/names@"));
        } else if format == "json" {
            assert!(stdout(&out).contains("d\\u202efig"), "{}", stdout(&out));
        }
    }
}

#[test]
fn plain_http_endpoints_and_redirects_beyond_loopback_are_refused_naming_the_flag() {
    // 192.0.2.1 (TEST-NET-1) is never answered: a refusal that came after connecting would
    // have waited for the 30 s timeout.
    let far = "http://192.0.2.1:9";
    let (out, took) = audit(
        &["--request-timeout", "30", "hf://org/model"],
        Some(far),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    assert!(
        stderr(&out).contains("HF_ENDPOINT") && stderr(&out).contains("--allow-http"),
        "{}",
        all(&out)
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    let (out, took) = audit(
        &["--request-timeout", "30", "s3://bucket/model.safetensors"],
        None,
        &[
            ("AWS_ENDPOINT_URL", far),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    assert!(
        stderr(&out).contains("AWS_ENDPOINT_URL") && stderr(&out).contains("--allow-http"),
        "{}",
        all(&out)
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    // GCS: the emulator variable, or a service account's gcs_base_url (object_store's way to
    // another endpoint), whose key is never shown.
    let key = serde_json::json!({
        "gcs_base_url": far,
        "private_key": "SECRET-KEY",
        "private_key_id": "k",
        "client_email": "a@b",
    })
    .to_string();
    let cases = [
        (
            "STORAGE_EMULATOR_HOST",
            far.to_owned(),
            "STORAGE_EMULATOR_HOST",
        ),
        (
            "STORAGE_EMULATOR_HOST",
            "192.0.2.1:9".to_owned(),
            "STORAGE_EMULATOR_HOST",
        ),
        (
            "GOOGLE_SERVICE_ACCOUNT_KEY",
            key,
            "the gcs_base_url of GOOGLE_SERVICE_ACCOUNT_KEY",
        ),
    ];
    for (name, value, named) in cases {
        let (out, took) = audit(
            &["--request-timeout", "30", "gs://bucket/model.safetensors"],
            None,
            &[(name, value.as_str())],
        );
        assert_eq!(out.status.code(), Some(2), "{name}: {}", all(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{named} is plain http://")) && err.contains("--allow-http"),
            "{name}: {}",
            all(&out)
        );
        assert!(!all(&out).contains("SECRET"), "{}", all(&out));
        assert!(took < Duration::from_secs(20), "{took:?}");
    }
    // A loopback Hub that redirects a file to plain http beyond loopback.
    let hub = HostileHub::start(
        Hostility::RedirectTo(format!("{far}/model.safetensors?X-Amz-Signature=secret")),
        good_file(),
    );
    let (out, took) = audit(
        &["--request-timeout", "30", "hf://org/model"],
        Some(&hub.endpoint()),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    let err = stderr(&out);
    assert!(
        err.contains("redirected to plain http://192.0.2.1"),
        "{err}"
    );
    assert!(
        err.contains("--allow-http") && !err.contains("secret"),
        "{err}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn a_server_without_byte_ranges_is_not_judged_and_never_reads_as_passed() {
    let dir = crate::common::TempDir::new("remote-no-ranges");
    std::fs::write(dir.0.join("f.safetensors"), good_file()).unwrap();
    let server = RangeServer::start(&dir.0);
    server.set_fault(Fault::WholeBody);
    let url = server.url("f.safetensors");
    let (out, _) = audit(&[&url], None, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    let text = stdout(&out);
    assert!(!text.contains("passed"), "{text}");
    assert!(
        text.contains("could not judge: ") && text.contains("does not serve byte ranges"),
        "{text}"
    );
    assert!(stderr(&out).contains("does not serve byte ranges"));
    // The JSON report's verdict is no pass either.
    let (out, _) = audit(&["--format", "json", &url], None, &[]);
    assert_eq!(out.status.code(), Some(2));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["summary"]["passed"], false);
}

#[test]
fn a_deep_read_whose_sha256_differs_from_the_lfs_oid_fails() {
    use sha2::{Digest, Sha256};
    // Larger than the first ranges fetched: a metadata-only audit does not read it whole.
    let file = small_safetensors(&vec![1.0; 100_000]);
    let right: String = Sha256::digest(&file)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let wrong = "ab".repeat(32);
    let hub = HostileHub::start(Hostility::Lfs(wrong.clone()), file.clone());
    let (out, _) = audit(
        &["--deep", "--format", "json", "hf://org/model"],
        Some(&hub.endpoint()),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let finding = &report["files"][0]["findings"][0];
    assert_eq!(finding["code"], "TP502", "{finding}");
    let message = finding["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("SHA-256 {right}, not the {wrong}"))
            && message.contains("lfs.oid"),
        "{message}"
    );
    // Metadata only, the file is not read whole, so its address is trusted.
    let (out, _) = audit(&["hf://org/model"], Some(&hub.endpoint()), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    // The same content under its own address passes --deep.
    let hub = HostileHub::start(Hostility::Lfs(right), file);
    let (out, _) = audit(&["--deep", "hf://org/model"], Some(&hub.endpoint()), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
}

#[test]
fn a_metadata_only_remote_audit_says_per_file_that_values_were_not_read() {
    let names = ["a.safetensors", "b.safetensors"]
        .map(String::from)
        .to_vec();
    let hub = HostileHub::start(Hostility::Names(names), good_file());
    let endpoint = hub.endpoint();
    let (out, _) = audit(&["hf://org/model"], Some(&endpoint), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let said = "tensor values not read: a remote audit reads metadata only; --deep reads them";
    assert_eq!(stdout(&out).matches(said).count(), 2, "{}", stdout(&out));
    let (out, _) = audit(
        &["--format", "json", "hf://org/model"],
        Some(&endpoint),
        &[],
    );
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    for file in report["files"].as_array().unwrap() {
        assert_eq!(file["remote"]["values_read"], false, "{file}");
    }
    assert!(report["files"][0]["path"]
        .as_str()
        .unwrap()
        .starts_with(&format!("hf://org/model@{SHA}/")));
    // --deep reads them, and says nothing of the kind.
    let (out, _) = audit(&["--deep", "hf://org/model"], Some(&endpoint), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(!stdout(&out).contains("tensor values not read"));
    let (out, _) = audit(
        &["--deep", "--format", "json", "hf://org/model"],
        Some(&endpoint),
        &[],
    );
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["files"][1]["remote"]["values_read"], true);
}
