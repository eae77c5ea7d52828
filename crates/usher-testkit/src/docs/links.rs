//! Relative links and anchors in Markdown, checked the way GitHub renders them.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The GitHub anchor of a heading's text: lower case, punctuation other than `-` and `_`
/// dropped, spaces turned into `-`. Duplicates get `-1`, `-2`, … (see [`anchors`]).
pub fn anchor(heading: &str) -> String {
    let mut out = String::new();
    for c in heading.trim().chars() {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            out.extend(c.to_lowercase());
        } else if c == ' ' {
            out.push('-');
        }
    }
    out
}

/// Every anchor a Markdown file offers: its headings' (outside code blocks) with GitHub's
/// numbering of duplicates, and explicit `<a name="…">`/`id="…"` ones.
pub fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(markdown) {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            let text = heading_text(&trimmed[hashes..]);
            let base = anchor(&text);
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        for attr in ["name=\"", "id=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(attr) {
                rest = &rest[i + attr.len()..];
                if let Some(end) = rest.find('"') {
                    out.insert(rest[..end].to_owned());
                }
            }
        }
    }
    out
}

/// A heading's text as GitHub renders it for its anchor: links reduced to their text, code
/// spans and emphasis markers removed.
fn heading_text(raw: &str) -> String {
    let mut text = raw.trim().trim_end_matches('#').trim().to_owned();
    // [text](target) → text
    while let Some(open) = text.find('[') {
        let Some(close) = text[open..].find("](").map(|i| open + i) else {
            break;
        };
        let Some(end) = text[close..].find(')').map(|i| close + i) else {
            break;
        };
        text = format!(
            "{}{}{}",
            &text[..open],
            &text[open + 1..close],
            &text[end + 1..]
        );
    }
    text.replace(['`', '*'], "")
}

/// The lines of a Markdown file outside fenced code blocks.
pub fn prose_lines(markdown: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for line in markdown.lines() {
        let t = line.trim_start();
        match fence {
            Some(f) if t.starts_with(f) => fence = None,
            Some(_) => {}
            None if t.starts_with("```") => fence = Some("```"),
            None if t.starts_with("~~~") => fence = Some("~~~"),
            None => out.push(line),
        }
    }
    out
}

/// Every link target of a Markdown file (`[text](target)`, `<img src="…">`, `<a href="…">`),
/// outside code blocks and code spans.
pub fn link_targets(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(markdown) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                let target = rest[..end].split_whitespace().next().unwrap_or_default();
                out.push(target.trim_matches(['<', '>']).to_owned());
            }
        }
        for attr in ["src=\"", "href=\""] {
            let mut rest = line.as_str();
            while let Some(i) = rest.find(attr) {
                rest = &rest[i + attr.len()..];
                if let Some(end) = rest.find('"') {
                    out.push(rest[..end].to_owned());
                }
            }
        }
    }
    out
}

fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// Problems with the relative links of `files` (paths relative to `root`): a target file that
/// does not exist, or an anchor its target Markdown file does not offer. Web links
/// (`http:`, `https:`, `mailto:`) are not followed.
pub fn link_problems(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut cache: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            problems.push(format!("{}: cannot read", file.display()));
            continue;
        };
        for target in link_targets(&text) {
            if target.is_empty()
                || ["http://", "https://", "mailto:"]
                    .iter()
                    .any(|s| target.starts_with(s))
            {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                normalize(&file.parent().unwrap_or(Path::new("")).join(path))
            };
            if !root.join(&resolved).exists() {
                problems.push(format!(
                    "{}: link to {target}: {} does not exist",
                    file.display(),
                    resolved.display()
                ));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if resolved.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let offered = cache.entry(resolved.clone()).or_insert_with(|| {
                anchors(&std::fs::read_to_string(root.join(&resolved)).unwrap_or_default())
            });
            if !offered.contains(fragment) {
                problems.push(format!(
                    "{}: link to {target}: {} has no anchor #{fragment}",
                    file.display(),
                    resolved.display()
                ));
            }
        }
    }
    problems
}

/// `a/b/../c` → `a/c` (without touching the file system).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
