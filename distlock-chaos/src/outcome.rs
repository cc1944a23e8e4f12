//! [`Outcome`]: what one fault scenario saw on one backend, the row of the report.

/// What one scenario saw on one backend.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Scenario name.
    pub scenario: String,
    /// Backend label.
    pub backend: String,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Holds both holders believed valid at once.
    pub overlaps: u64,
    /// Whether overlap is expected here (the backend makes no claim under this fault).
    pub overlap_expected: bool,
    /// Stale writes the fenced resource accepted (must be 0).
    pub stale_accepted: u64,
    /// Stale writes it rejected.
    pub stale_rejected: u64,
    /// Accepted writes out of token order (must be 0).
    pub out_of_order: u64,
    /// ms from the fault to the holder's `lost()` firing.
    pub lost_ms: Vec<f64>,
    /// ms from the fault to another client holding the lock.
    pub next_holder_ms: Vec<f64>,
    /// Anything the reader must know.
    pub note: String,
}

impl Outcome {
    /// Folds a repetition of the same scenario on the same backend into this one.
    pub fn merge(&mut self, o: Outcome) {
        self.acquisitions += o.acquisitions;
        self.overlaps += o.overlaps;
        self.stale_accepted += o.stale_accepted;
        self.stale_rejected += o.stale_rejected;
        self.out_of_order += o.out_of_order;
        self.lost_ms.extend(o.lost_ms);
        self.next_holder_ms.extend(o.next_holder_ms);
        if !o.note.is_empty() && !self.note.contains(&o.note) {
            self.note = format!("{}; {}", self.note, o.note);
        }
    }
}
