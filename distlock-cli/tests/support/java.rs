//! Real Apache Curator for the interop tests: Debian's jars (`libcurator-recipes-java`) and a
//! JDK (`default-jdk-headless`), both installed by `scripts/services.sh up`.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// Curator and what it needs on the classpath, from `/usr/share/java`.
pub const JARS: [&str; 7] = [
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
];
/// The standalone ZooKeeper of `scripts/services.sh up`.
pub fn zk_hosts() -> String {
    std::env::var("DISTLOCK_TEST_ZK_HOSTS").unwrap_or_else(|_| "127.0.0.1:12181".to_owned())
}

/// Microseconds since the epoch: the clock every participant of an interop test logs by.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Compiles `tests/java/<class>.java` against Debian's Curator jars into `dir`; returns the
/// classpath to run it with.
pub fn compile_java(dir: &Path, class: &str) -> String {
    let mut cp: Vec<String> = Vec::new();
    for jar in JARS {
        let p = format!("/usr/share/java/{jar}.jar");
        assert!(
            Path::new(&p).exists(),
            "{p} is missing: install Curator and a JDK with `scripts/services.sh up` (libcurator-recipes-java, default-jdk-headless)"
        );
        cp.push(p);
    }
    let classes = dir.join("classes");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/java/{class}.java"));
    let out = Command::new("javac")
        .args(["-cp", &cp.join(":"), "-d"])
        .arg(&classes)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("javac: {e}; install a JDK with `scripts/services.sh up`"));
    assert!(
        out.status.success(),
        "javac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cp.push(classes.display().to_string());
    cp.join(":")
}
