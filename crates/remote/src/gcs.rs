//! Google Cloud Storage's settings from the environment: object_store's own (the `GOOGLE_*`
//! variables: a service account, `GOOGLE_SKIP_SIGNATURE=true` for a public bucket read
//! anonymously), or the emulator variable Google's client libraries read,
//! `STORAGE_EMULATOR_HOST`, which object_store has no variable for: it takes another endpoint
//! only as a service account's `gcs_base_url`.

use object_store::gcp::GoogleCloudStorageBuilder;
use std::io::Read;

/// The variable that points Google's client libraries (and the emulators) at an emulator.
const EMULATOR: &str = "STORAGE_EMULATOR_HOST";

/// The variables a service account is given by, as object_store reads them (a JSON key, then
/// the path of its file).
const KEY: &str = "GOOGLE_SERVICE_ACCOUNT_KEY";
const KEY_FILES: &[&str] = &[
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "SERVICE_ACCOUNT",
];

/// The most of a service account file read for its endpoint: a key is a few KiB.
const MAX_KEY_FILE: u64 = 1 << 20;

/// A builder from the environment: for an emulator one that sends no credentials (an emulator
/// asks for none, and a real key is not to be sent to whatever it names); otherwise
/// object_store's own, from the `GOOGLE_*` variables.
pub(crate) fn builder() -> GoogleCloudStorageBuilder {
    match emulator() {
        Some(url) => {
            let key = serde_json::json!({
                "gcs_base_url": url,
                "disable_oauth": true,
                "client_email": "",
                "private_key": "",
                "private_key_id": "",
            });
            GoogleCloudStorageBuilder::new()
                .with_service_account_key(key.to_string())
                .with_skip_signature(true)
        }
        None => GoogleCloudStorageBuilder::from_env(),
    }
}

/// The endpoint the environment sets, if any, as (where it is set, the URL): the emulator's,
/// or a service account's `gcs_base_url`. Never the key's other contents.
pub(crate) fn endpoint() -> Option<(String, String)> {
    if let Some(url) = emulator() {
        return Some((EMULATOR.to_owned(), url));
    }
    let (name, text) = if let Some(key) = var(KEY) {
        (KEY, key)
    } else if let Some((name, path)) = KEY_FILES.iter().find_map(|n| Some((*n, var(n)?))) {
        let mut text = String::new();
        let read = std::fs::File::open(&path)
            .and_then(|file| file.take(MAX_KEY_FILE).read_to_string(&mut text));
        if read.is_err() {
            // object_store names the file it cannot read.
            return None;
        }
        (name, text)
    } else {
        return None;
    };
    // A key that does not parse is object_store's to refuse.
    let url = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|key| key.get("gcs_base_url")?.as_str().map(str::to_owned));
    url.map(|url| (format!("the gcs_base_url of {name}"), url))
}

/// The emulator's base URL: `STORAGE_EMULATOR_HOST` as Google's libraries read it, plain
/// `http://` when it names no scheme (`localhost:9023`).
fn emulator() -> Option<String> {
    let host = var(EMULATOR)?;
    let host = host.trim().trim_end_matches('/');
    Some(if host.contains("://") {
        host.to_owned()
    } else {
        format!("http://{host}")
    })
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
