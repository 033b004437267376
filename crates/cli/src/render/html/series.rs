//! Checkpoints of one run (`epoch_1.pt`, `epoch_2.pt`, …): paths equal but for their numbers,
//! in the order of those numbers, so `epoch_10` follows `epoch_9`.

use std::collections::BTreeMap;
use tensorplay_audit::report::FileReport;

/// Each run of at least two checkpoints: its pattern (numbers shown as `#`) and its files.
pub fn runs(files: &[FileReport]) -> Vec<(String, Vec<&FileReport>)> {
    let mut groups: BTreeMap<String, Vec<&FileReport>> = BTreeMap::new();
    for file in files {
        groups.entry(pattern(&file.path).0).or_default().push(file);
    }
    groups
        .into_iter()
        .filter(|(_, files)| files.len() >= 2)
        .map(|(key, mut files)| {
            files.sort_by_cached_key(|f| pattern(&f.path).1);
            (key, files)
        })
        .collect()
}

/// A path's key for natural ordering: its pattern, then its numbers as numbers.
pub fn natural_key(path: &str) -> (String, Vec<u128>) {
    pattern(path)
}

/// The path with each run of digits replaced by `#`, and those numbers in order.
fn pattern(path: &str) -> (String, Vec<u128>) {
    let mut key = String::with_capacity(path.len());
    let mut numbers = Vec::new();
    let mut digits = String::new();
    for c in path.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if !digits.is_empty() {
            key.push('#');
            numbers.push(digits.parse().unwrap_or(u128::MAX));
            digits.clear();
        }
        if c != '\0' {
            key.push(c);
        }
    }
    (key, numbers)
}

#[cfg(test)]
mod tests {
    use super::pattern;

    #[test]
    fn numbers_order_a_run() {
        let (key, numbers) = pattern("runs/3/epoch_10.pt");
        assert_eq!(key, "runs/#/epoch_#.pt");
        assert_eq!(numbers, [3, 10]);
        assert!(pattern("epoch_9.pt").1 < pattern("epoch_10.pt").1);
    }
}
