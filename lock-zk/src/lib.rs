//! distlock ZooKeeper backend (in progress).
