//! What `torch.load(path)` would do with a file by default (`weights_only=True`): the
//! verdict a checkpoint carries; `pickle::weights_only` decides it.

/// What `torch.load(path)` would do with a file, as far as its bytes tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsOnly {
    /// The weights-only unpickler reads every pickle `torch.load` runs.
    Loads,
    /// `torch.load` raises.
    Refuses {
        /// The archive member or stream it raises in.
        member: String,
        /// torch's message (the weights-only unpickler's, or the loader's).
        reason: String,
    },
}

impl WeightsOnly {
    /// The first refusal of a file made of parts (an index's shards, a legacy file's pickles).
    pub fn and(self, next: WeightsOnly) -> WeightsOnly {
        match self {
            WeightsOnly::Loads => next,
            refused => refused,
        }
    }

    /// A refusal of `member` for `reason`.
    pub fn refuses(member: &str, reason: impl Into<String>) -> WeightsOnly {
        WeightsOnly::Refuses {
            member: member.to_owned(),
            reason: reason.into(),
        }
    }
}
