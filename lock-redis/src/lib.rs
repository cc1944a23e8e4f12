//! distlock Redis backend (in progress).
