//! [`BellWait`]: how waiting on a bell ended, whichever kind of bell it was.

/// How a bell wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BellWait {
    /// The bell was let go (or never taken): look now.
    Rung,
    /// Nothing within the wait: the bell is held.
    TimedOut,
    /// This bell cannot be waited on now (no connection to be had, or the wait failed):
    /// look, and poll.
    Failed,
}
