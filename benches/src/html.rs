//! `report.html`: one self-contained page (no network fetch) with the Markdown report's tables
//! and every chart inlined as SVG under the section it illustrates, each with a short "how to
//! read this". A few lines of script record, once the page is laid out, how many shapes each
//! chart painted (`data-rendered`), so a headless browser can tell a drawn chart from a blank one.

use std::fmt::Write as _;

use crate::charts::Drawn;

const STYLE: &str = "body{font-family:sans-serif;max-width:1180px;margin:0 auto;padding:0 16px 48px;color:#222}\
h1{border-bottom:3px solid #1f77b4;padding-bottom:6px}h2{margin-top:40px;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 7px}\
th{background:#f3f6fa}td.n{text-align:right;font-variant-numeric:tabular-nums}\
figure{margin:16px 0;border:1px solid #e3e3e3;padding:8px}figure svg{max-width:100%;height:auto}\
.how{background:#f7f7f2;border-left:4px solid #1f77b4;padding:6px 10px;font-size:14px}\
nav a{margin-right:12px}code{background:#f2f2f2;padding:0 3px}li.why{list-style:none;color:#666}";

/// Runs once the page is laid out: per chart, the shapes the browser drew with some paint
/// other than the white background, and the chart's size on the page.
const SELF_CHECK: &str = r#"addEventListener('load',()=>{for(const f of document.querySelectorAll('figure[data-chart]')){
const s=f.querySelector('svg');if(!s){f.dataset.rendered='none';continue}let ink=0;
for(const e of s.querySelectorAll('rect,path,polyline,polygon,line,circle,text')){const r=e.getBoundingClientRect();
if(r.width+r.height===0)continue;const c=getComputedStyle(e);
if([c.fill,c.stroke].some(p=>p&&p!=='none'&&p!=='rgb(255, 255, 255)'))ink++}
const b=s.getBoundingClientRect();f.dataset.rendered=ink+' '+Math.round(b.width)+'x'+Math.round(b.height)}});"#;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Escapes `s` and turns its `code` spans into `<code>`.
fn inline(s: &str) -> String {
    escape(s)
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_owned()
            }
        })
        .collect()
}

fn cells(line: &str) -> Vec<&str> {
    let t = line.trim().trim_start_matches('|').trim_end_matches('|');
    t.split('|').map(str::trim).collect()
}

fn table(out: &mut String, lines: &[&str]) {
    out.push_str("<table>\n");
    for (i, l) in lines.iter().enumerate().filter(|(i, _)| *i != 1) {
        let (tag, row) = if i == 0 {
            ("th", "<tr>")
        } else {
            ("td", "<tr>")
        };
        out.push_str(row);
        for c in cells(l) {
            let numeric = tag == "td" && c.starts_with(|ch: char| ch.is_ascii_digit());
            let class = if numeric { " class=\"n\"" } else { "" };
            let _ = write!(out, "<{tag}{class}>{}</{tag}>", inline(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn figure(out: &mut String, d: &Drawn) {
    let _ = write!(
        out,
        "<figure id=\"{0}\" data-chart=\"{0}\"><figcaption><b>{1}</b><p class=\"how\"><b>How to read this.</b> {2}</p></figcaption>\n{3}\n</figure>\n",
        d.stem,
        escape(&d.title),
        escape(d.how),
        d.svg.trim_start_matches(|c| c != '<').trim_start_matches("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")
    );
}

fn anchor(heading: &str) -> String {
    heading
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// The body: the Markdown's blocks as HTML, each chart after the heading of its section.
fn body(markdown: &str, charts: &[Drawn], placed: &mut [bool]) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.starts_with('|') {
            let n = lines[i..].iter().take_while(|l| l.starts_with('|')).count();
            table(&mut out, &lines[i..i + n]);
            i += n;
            continue;
        }
        if let Some(h) = l.strip_prefix("## ") {
            let _ = writeln!(out, "<h2 id=\"{}\">{}</h2>", anchor(h), inline(h));
            for (d, done) in charts.iter().zip(placed.iter_mut()) {
                if !*done && l.starts_with(d.section) {
                    figure(&mut out, d);
                    *done = true;
                }
            }
        } else if let Some(h) = l.strip_prefix("# ") {
            let _ = writeln!(out, "<h1>{}</h1>", inline(h));
        } else if let Some(item) = l.strip_prefix("  - ") {
            let _ = writeln!(out, "<ul><li class=\"why\">{}</li></ul>", inline(item));
        } else if let Some(item) = l.strip_prefix("- ") {
            let _ = writeln!(out, "<ul><li>{}</li></ul>", inline(item));
        } else if !l.trim().is_empty() {
            let _ = writeln!(out, "<p>{}</p>", inline(l));
        }
        i += 1;
    }
    out
}

/// The page, from the Markdown report and the charts drawn.
pub fn page(markdown: &str, charts: &[Drawn]) -> String {
    let mut placed = vec![false; charts.len()];
    let mut main = body(markdown, charts, &mut placed);
    if placed.iter().any(|p| !p) {
        main.push_str("<h2 id=\"more-charts\">More charts</h2>\n");
        for (d, _) in charts.iter().zip(&placed).filter(|(_, p)| !**p) {
            figure(&mut main, d);
        }
    }
    let nav: String = markdown
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| {
            format!(
                "<a href=\"#{}\">{}</a>",
                anchor(h),
                escape(h.split(" (").next().unwrap_or(h))
            )
        })
        .collect();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>distlock benchmark report</title>\
         <style>{STYLE}</style></head>\n<body><nav>{nav}</nav>\n{main}<script>{SELF_CHECK}</script></body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(stem: &'static str, section: &'static str) -> Drawn {
        Drawn {
            stem,
            title: "T".into(),
            section,
            how: "read <this>",
            svg: "<svg xmlns=\"http://www.w3.org/2000/svg\"><rect/></svg>".into(),
        }
    }

    #[test]
    fn tables_become_html_and_charts_sit_under_their_section() {
        let md =
            "# r\n\n## Uncontended (x)\n\n| a | b |\n|---|---:|\n| `x` | 12 |\n\n## Failover\n";
        let html = page(
            md,
            &[chart("latency", "## Uncontended"), chart("grid", "## Grid")],
        );
        assert!(
            html.contains("<td><code>x</code></td><td class=\"n\">12</td>"),
            "{html}"
        );
        let (latency, failover) = (html.find("id=\"latency\""), html.find("id=\"failover\""));
        assert!(latency.is_some() && latency < failover, "{html}");
        assert!(
            html.contains("More charts") && html.contains("id=\"grid\""),
            "{html}"
        );
        assert!(html.contains("read &lt;this&gt;"), "{html}");
        assert!(!html.contains("src=") && !html.contains("<link"), "{html}");
    }
}
