//! stable-baselines3 models (`model.save("ppo.zip")`): a zip with `data` (the model's
//! attributes as JSON), `policy.pth`, `policy.optimizer.pth` and `pytorch_variables.pth`
//! (`torch.save` archives), `_stable_baselines3_version` and `system_info.txt`, read as
//! `stable_baselines3.common.save_util.load_from_zip_file` reads them (SB3 2.9.2):
//! - every member whose extension (`os.path.splitext`) is `.pth` is `torch.load`ed: here a
//!   nested archive ([`super::nested`]) whose tensors are named under the member's name less
//!   `.pth` (`policy.action_net.weight`, `policy.optimizer.state.0.exp_avg`), as SB3 keys them;
//! - `data` is parsed as JSON, never evaluated; each top-level value that is an object with a
//!   `:serialized:` string is base64 that `cloudpickle.loads` runs: decoded and read as the
//!   pickle it is, its globals named under `data:<key>`. SB3 writes classes, NumPy arrays and
//!   schedules there, and a function (a `lambda` learning rate) as its code, which fails as any
//!   pickle naming code does;
//! - any other member that would run as a pickle is judged as `torch.load`'s would be.
//!
//! Base64 other than what Python's `b64encode` writes (the alphabet, `=` padding at the end
//! only) is refused: `b64decode` would read past such characters, and what it read is not
//! guessed at.

use super::json::Entries;
use super::nested;
use super::table::{Accepts, Row, ZipKind};
use super::torch::archive::{self, audit_other_pickles, Archive};
use super::Sink;
use crate::error::Result;
use crate::pickle::Loader;
use crate::Format;

const DATA: &str = "data";
const VERSION: &str = "_stable_baselines3_version";
const SERIALIZED: &str = ":serialized:";

/// stable-baselines3's archives, by their records: a root `data` member beside SB3's version
/// record or a `.pth` member (SB3 before 1.2 wrote no version), which no other zip kind has.
pub(crate) const ROW: Row = Row {
    what: "a stable-baselines3 model",
    loader: "stable_baselines3 load_from_zip_file",
    extensions: &[],
    accepts: Accepts::Records(ZipKind {
        archive: archive::flat_archive,
        claims: is_sb3,
        read: read_archive,
    }),
};

/// Whether the archive has SB3's `data` member and its version record or a `.pth` member.
pub(crate) fn is_sb3(archive: &Archive<'_>) -> Result<bool> {
    let entries = archive.zip.entries();
    // Without `data` no member's name matters: a torch.save zip of many tensors is not
    // scanned twice.
    if !entries.iter().any(|e| e.name == DATA) {
        return Ok(false);
    }
    Ok(entries
        .iter()
        .any(|e| e.name == VERSION || pth_name(&e.name).is_some()))
}

/// Reads the model's `.pth` members and `data` through `sink`.
pub(crate) fn read_archive(mut archive: Archive<'_>, sink: &mut Sink<'_>) -> Result<Format> {
    let path = archive.path().to_owned();
    for index in 0..archive.zip.entries().len() {
        let Some(name) = archive.zip.entries().get(index).map(|e| e.name.clone()) else {
            continue;
        };
        if let Some(key) = pth_name(&name) {
            let bytes = archive.read_at(index)?.into_owned();
            nested::read_at(&path, &name, key, bytes.into(), sink)?;
        } else if name == DATA {
            let text = archive.read_at(index)?;
            let cost = (text.len() as u64).saturating_mul(super::json::COST_PER_BYTE);
            archive
                .meter
                .check(&path, cost, || format!("parsing member {DATA}"))?;
            let entries: Entries<serde_json::Value> = serde_json::from_slice(&text)
                .map_err(|e| archive.err(DATA, format!("not a JSON object: {e}")))?;
            drop(text);
            for (key, value) in entries.0 {
                let Some(serialized) = value.get(SERIALIZED) else {
                    continue;
                };
                // SB3 calls `.encode()` on it; what is not a string fails there, caught and
                // skipped with a warning: nothing is unpickled.
                let Some(text) = serialized.as_str() else {
                    continue;
                };
                let place = format!("{DATA}:{key}");
                let bytes = decode_base64(text).ok_or_else(|| {
                    archive.err(
                        &place,
                        "`:serialized:` is not the base64 Python's b64encode writes",
                    )
                })?;
                nested::read_at(&path, &place, &format!("{DATA}.{key}"), bytes.into(), sink)?;
            }
        }
    }
    // What SB3 leaves unread but another loader of the zip might run.
    audit_other_pickles(&archive, Loader::Python, sink)?;
    Ok(Format::StableBaselines3)
}

/// The name SB3 keys a `.pth` member's contents by (`os.path.splitext(name)[0]`), or `None`
/// when the extension is not exactly `.pth`. A file name's leading dots are no extension.
fn pth_name(name: &str) -> Option<&str> {
    let base_start = name.rfind('/').map_or(0, |slash| slash + 1);
    let base = name.get(base_start..)?;
    let dot = base.rfind('.')?;
    let leading_dots = base.len() - base.trim_start_matches('.').len();
    if dot < leading_dots || base.get(dot..)? != ".pth" {
        return None;
    }
    name.get(..base_start + dot)
}

/// Canonical standard base64 (`A–Z a–z 0–9 + /`, `=` padding to a multiple of four at the
/// end only), or `None`.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    if padding > 2 {
        return None;
    }
    let body = bytes.get(..bytes.len() - padding)?;
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    let mut acc = 0u32;
    let mut bits = 0u32;
    for &c in body {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Bits left over from the last character must be zero, as b64encode writes them.
    (acc == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pth_members_are_keyed_as_splitext_keys_them() {
        assert_eq!(pth_name("policy.pth"), Some("policy"));
        assert_eq!(pth_name("policy.optimizer.pth"), Some("policy.optimizer"));
        assert_eq!(pth_name("dir/x.pth"), Some("dir/x"));
        assert_eq!(pth_name(".pth"), None);
        assert_eq!(pth_name("..pth"), None);
        assert_eq!(pth_name("x.PTH"), None);
        assert_eq!(pth_name("x.pth/y"), None);
        assert_eq!(pth_name("data"), None);
    }

    #[test]
    fn only_canonical_base64_is_decoded() {
        assert_eq!(decode_base64("").as_deref(), Some(&b""[..]));
        assert_eq!(decode_base64("YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(decode_base64("YWI=").as_deref(), Some(&b"ab"[..]));
        assert_eq!(decode_base64("YWJj").as_deref(), Some(&b"abc"[..]));
        assert_eq!(
            decode_base64("gAU+/w==").as_deref(),
            Some(&[0x80, 0x05, 0x3e, 0xff][..])
        );
        // Whitespace, padding inside, a missing pad, stray bits: refused.
        for bent in ["YW Jj", "YQ==YQ==", "YQ=", "YR==", "Y===", "YWJj\n"] {
            assert_eq!(decode_base64(bent), None, "{bent}");
        }
    }
}
