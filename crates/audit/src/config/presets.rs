//! Named sets of globals `[pickle] allow_presets` accepts at once, each generated from the
//! library's own notion of what is safe to load and pinned to the versions it was made from.

/// The `sklearn` preset: skops 0.16.0's trusted scikit-learn types for scikit-learn 1.9.1
/// (`skops/io/_trusted_types.py`: every estimator `sklearn.utils.all_estimators()` lists and
/// the gradient-boosting models' internal loss, link and binning types), then the globals
/// joblib 1.6.0 and NumPy 2.2.6 pickle an estimator's arrays, dtypes and scalars through.
/// Written by `fixtures/make_joblib.py`, which states the versions at the top of the file.
const SKLEARN: &str = include_str!("sklearn_preset.txt");

/// The presets by name.
pub(crate) const PRESETS: [(&str, &str); 1] = [("sklearn", SKLEARN)];

/// The exact `module.name` globals of preset `name`; `None` when there is no such preset.
pub(crate) fn globals(name: &str) -> Option<impl Iterator<Item = &'static str>> {
    let (_, text) = PRESETS.iter().find(|(n, _)| *n == name)?;
    Some(
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sklearn_preset_names_estimators_and_numpy_and_nothing_that_runs_code() {
        let names: Vec<&str> = globals("sklearn").expect("sklearn").collect();
        for wanted in [
            "sklearn.linear_model._base.LinearRegression",
            "sklearn.pipeline.Pipeline",
            "sklearn.preprocessing._data.StandardScaler",
            "numpy.dtype",
            "numpy.ndarray",
            "joblib.numpy_pickle.NumpyArrayWrapper",
        ] {
            assert!(names.contains(&wanted), "{wanted}");
        }
        assert!(names
            .iter()
            .all(|n| n.contains('.') && !crate::rules::safety::runs_code(n)));
        assert!(globals("torch").is_none());
    }
}
