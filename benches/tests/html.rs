//! `report.html` opened in a real headless browser (Debian's `chromium`, which
//! `scripts/browser.sh` installs for `scripts/test.sh`): every chart of the committed run
//! must have been painted, and the page must fetch nothing. The page records, once laid out,
//! how many shapes each chart painted (`data-rendered`); a copy with one chart blanked proves
//! the check fails on an empty chart. No browser is a failure with a message, never a pass.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The committed run the report is drawn from (`docs/bench/README.md` says what it ran).
const RUN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../docs/bench/results-quick.json"
);

/// Every chart that run makes.
const CHARTS: [&str; 9] = [
    "throughput",
    "latency",
    "handoffs",
    "waits",
    "handoffs-procs",
    "waits-procs",
    "grid",
    "scaling",
    "memory",
];

fn chromium() -> PathBuf {
    let p: PathBuf = std::env::var_os("DISTLOCK_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/chromium".into());
    assert!(
        p.exists(),
        "no headless browser at {}: run scripts/browser.sh (it installs Debian's chromium, as \
         scripts/test.sh does) or set DISTLOCK_CHROMIUM",
        p.display()
    );
    p
}

/// The page's DOM once Chromium has loaded it and run its script (60 s at most).
fn dump_dom(page: &Path, profile: &Path) -> String {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut out = child.stdout.take().expect("chromium's stdout");
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        out.read_to_string(&mut dom).map(|_| dom)
    });
    let start = Instant::now();
    while child.try_wait().expect("wait for chromium").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader
        .join()
        .expect("reader thread")
        .expect("chromium's DOM")
}

/// Each chart of the DOM and what the page recorded of its painting (`None`: nothing).
fn charts(dom: &str) -> Vec<(String, Option<String>)> {
    let attr = |tag: &str, name: &str| {
        let at = tag.find(&format!("{name}=\""))? + name.len() + 2;
        tag[at..].split('"').next().map(str::to_owned)
    };
    dom.split("<figure ")
        .skip(1)
        .filter_map(|f| {
            let tag = f.split('>').next()?;
            Some((attr(tag, "data-chart")?, attr(tag, "data-rendered")))
        })
        .collect()
}

/// The charts not painted: fewer than 10 shapes with paint, or smaller than 100 × 100 pixels.
fn blank(dom: &str) -> Vec<String> {
    let painted = |r: &str| {
        let mut f = r.split([' ', 'x']).map(|n| n.parse::<u32>().unwrap_or(0));
        let (ink, w, h) = (f.next(), f.next(), f.next());
        ink >= Some(10) && w >= Some(100) && h >= Some(100)
    };
    charts(dom)
        .into_iter()
        .filter(|(_, r)| !r.as_deref().is_some_and(painted))
        .map(|(c, r)| format!("{c} ({})", r.unwrap_or_else(|| "no record".into())))
        .collect()
}

#[test]
fn report_html_paints_every_chart_in_chromium() {
    let dir = std::env::temp_dir().join(format!("distlock-bench-html-{}", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_benches"))
        .args(["--render", RUN, "--out"])
        .arg(&dir)
        .stdout(Stdio::null())
        .status()
        .expect("run the benchmark binary");
    assert!(status.success(), "rendering {RUN} exited with {status}");
    let page = dir.join("report.html");
    let html = std::fs::read_to_string(&page).expect("report.html");
    let offline = html
        .replace("xmlns=\"http://www.w3.org/2000/svg\"", "")
        .replace("xmlns:xlink=\"http://www.w3.org/1999/xlink\"", "");
    for fetch in ["http:", "https:", "src=", "<link", "url(", "@import"] {
        assert!(
            !offline.contains(fetch),
            "report.html refers outside itself: {fetch}"
        );
    }
    let dom = dump_dom(&page, &dir.join("profile"));
    let seen: Vec<String> = charts(&dom).into_iter().map(|c| c.0).collect();
    assert_eq!(seen, CHARTS, "the charts on the page");
    assert_eq!(
        blank(&dom),
        Vec::<String>::new(),
        "charts Chromium did not paint"
    );

    // The same check on a copy with the grid's chart emptied must name it.
    let start = html.find("<figure id=\"grid\"").expect("the grid figure");
    let svg = start + html[start..].find("<svg").expect("its svg");
    let end = svg + html[svg..].find("</svg>").expect("its end") + "</svg>".len();
    let empty = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"400\"></svg>";
    let broken = dir.join("broken.html");
    std::fs::write(&broken, format!("{}{empty}{}", &html[..svg], &html[end..])).expect("write");
    let missing = blank(&dump_dom(&broken, &dir.join("profile-broken")));
    assert!(
        missing.len() == 1 && missing[0].starts_with("grid "),
        "the blank grid chart went unnoticed: {missing:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
