//! What a dead-letter confirmation showed, carried by its form so the
//! action that follows runs on exactly that (read by the pages that show
//! the confirmation and by the action that checks it).

/// The dead letters a confirmation showed: how many, and a fingerprint of
/// their ids (SHA-256 of the sorted ids, 128 bits shown), carried by its
/// form as `selection` so the action runs on exactly these or is refused.
pub struct Selection {
    pub count: usize,
    fingerprint: String,
}

impl Selection {
    pub fn of(ids: &[uuid::Uuid]) -> Self {
        use sha2::Digest;
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        let mut hash = sha2::Sha256::new();
        for id in &sorted {
            hash.update(id.as_bytes());
        }
        let fingerprint = hash.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Selection {
            count: ids.len(),
            fingerprint,
        }
    }

    /// `COUNT-FINGERPRINT`, the form's `selection` value.
    pub fn token(&self) -> String {
        format!("{}-{}", self.count, self.fingerprint)
    }

    /// The count a `selection` value names, if it names one.
    pub fn count_of(token: &str) -> Option<usize> {
        token.split_once('-')?.0.parse().ok()
    }
}
