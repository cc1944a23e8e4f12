//! distlock SQL backend (in progress).
