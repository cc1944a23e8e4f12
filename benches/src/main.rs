//! distlock benchmark harness (in progress).
fn main() {}
