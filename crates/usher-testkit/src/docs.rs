//! What the documentation tests need (`tests/browsers/docs.rs`): the configuration reference rendered
//! from the binaries' clap definitions, a checker for relative links and anchors in Markdown,
//! and a reader of the `curl` examples the docs show.
//!
//! The reference is generated, never copied by hand: `docs/configuration.md` is the output of
//! [`configuration_reference`], and a test fails when the committed page differs from it.
//! `make docs` (the `config_reference` test with `USHER_BLESS=1`) writes the page again.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// The page `docs/configuration.md`, rendered from the `Config` types of the dispatcher, the
/// gateway and the demo booking service.
pub fn configuration_reference() -> String {
    let mut out = String::new();
    out.push_str(PREAMBLE);
    for (binary, command) in [
        ("usher-dispatcher", usher_dispatcher::Config::command()),
        ("usher-gateway", usher_gateway::Config::command()),
        ("usher-booking-demo", usher_booking_demo::Config::command()),
    ] {
        render_binary(&mut out, binary, &command);
    }
    out.push_str(OPENTELEMETRY);
    out
}

const PREAMBLE: &str = "\
<!-- Generated from the binaries' clap definitions by crates/usher-testkit/src/docs.rs.
     Do not edit: run `make docs` (the config_reference test with USHER_BLESS=1). -->

# Configuration

Every flag of every usher binary is also an environment variable, and `--help` on each binary prints the same text as this page.
This page is generated from the binaries' own definitions, so it lists every setting with its real default; a test fails when it is stale.

- [usher-dispatcher](#usher-dispatcher): admission, entry tokens, the admin API.
- [usher-gateway](#usher-gateway): the browsers' event streams and the waiting-room page.
- [usher-booking-demo](#usher-booking-demo): the demo booking service.
- [OpenTelemetry](#opentelemetry): the standard `OTEL_*` variables every binary reads.

Secrets (`USHER_ADMIN_TOKEN`, `USHER_JWT_KEY`, `USHER_TICKET_KEY`, a password in `USHER_REDIS_URL`, …) are never printed: `--help` hides their values.
`RUST_LOG` filters the logs of every binary (default `info`).
";

const OPENTELEMETRY: &str = "\
## OpenTelemetry

Every binary reads the standard OpenTelemetry variables (they are not flags); see [Operating](operating.md#traces).

| variable | default | meaning |
|---|---|---|
| `OTEL_EXPORTER_OTLP_ENDPOINT` | unset: no traces | OTLP/HTTP collector base URL (`http://collector:4318`); setting it turns traces on. `https://` is refused: no TLS client is built in |
| `OTEL_EXPORTER_OTLP_PROTOCOL` | `http/protobuf` | `http/protobuf` or `http/json`; `grpc` is not built in and stops the start-up |
| `OTEL_SERVICE_NAME` | the binary's name | `service.name` of the spans |
| `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` | `parentbased_always_on` | standard samplers, e.g. `parentbased_traceidratio` with `0.01` |
";

fn render_binary(out: &mut String, binary: &str, command: &clap::Command) {
    let _ = writeln!(out, "\n## {binary}\n");
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = writeln!(out, "{}\n", one_sentence_per_line(&about.to_string()));
    }
    // Arguments in definition order, grouped by their help heading (the flattened Redis flags
    // carry one); the ungrouped ones first.
    let mut headings: Vec<Option<&str>> = Vec::new();
    for arg in command.get_arguments() {
        if !headings.contains(&arg.get_help_heading()) {
            headings.push(arg.get_help_heading());
        }
    }
    for heading in headings {
        if let Some(h) = heading {
            let _ = writeln!(out, "### {binary}: {h}\n");
        }
        out.push_str("| variable | flag | default | meaning |\n|---|---|---|---|\n");
        for arg in command.get_arguments() {
            if arg.get_help_heading() != heading || arg.is_hide_set() {
                continue;
            }
            let Some(long) = arg.get_long() else { continue };
            if long == "help" || long == "version" {
                continue;
            }
            let env = arg
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_else(|| "—".into());
            let flag = match arg.get_action().takes_values() {
                true => {
                    let value = arg
                        .get_value_names()
                        .and_then(|v| v.first())
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
                    format!("`--{long} <{value}>`")
                }
                false => format!("`--{long}`"),
            };
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| format!("`{}`", v.to_string_lossy()))
                .collect();
            let default = if arg.is_hide_default_value_set() || defaults.is_empty() {
                "—".to_owned()
            } else {
                defaults.join(", ")
            };
            let mut meaning = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            // clap drops the closing period of a one-paragraph help; the table puts it back.
            if meaning.ends_with(|c: char| c.is_alphanumeric() || c == ')' || c == '`') {
                meaning.push('.');
            }
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| format!("`{}`", v.get_name()))
                .collect();
            let boolean = values.iter().all(|v| v == "`true`" || v == "`false`");
            if !values.is_empty() && !boolean {
                let _ = write!(meaning, " One of: {}.", values.join(", "));
            }
            let _ = writeln!(out, "| {env} | {flag} | {default} | {} |", cell(&meaning));
        }
        out.push('\n');
    }
}

/// Text for one table cell: one line, pipes escaped, paragraphs kept apart with `<br>`.
fn cell(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("<br>")
        .replace('|', "\\|")
}

/// A paragraph as one sentence per line (the docs' Markdown style); paragraphs stay apart.
fn one_sentence_per_line(text: &str) -> String {
    text.split("\n\n")
        .map(|p| {
            let flat = p.split_whitespace().collect::<Vec<_>>().join(" ");
            flat.replace(". ", ".\n")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

// ---------------------------------------------------------------------------------------------
// Links and anchors.

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

// ---------------------------------------------------------------------------------------------
// curl examples.

/// One `curl` command of the docs, as a shell would pass it to curl.
#[derive(Debug, Clone)]
pub struct CurlExample {
    /// Where it is: `file:line`.
    pub at: String,
    /// The command as written (continuation lines joined).
    pub text: String,
    /// Its words after the shell's quote removal, with `$VARIABLES` left as written.
    pub words: Vec<String>,
}

impl CurlExample {
    /// The request method: `-X`, else `POST` with a body, `HEAD` with `-I`, else `GET`.
    pub fn method(&self) -> String {
        if let Some(m) = self.value_of(&["-X", "--request"]) {
            return m.to_ascii_uppercase();
        }
        if self.body().is_some() {
            return "POST".into();
        }
        if self.words.iter().any(|w| w == "-I" || w == "--head") {
            return "HEAD".into();
        }
        "GET".into()
    }

    /// The URL: the first word that is not an option or an option's value.
    pub fn url(&self) -> Option<String> {
        let mut words = self.words.iter().skip(1);
        while let Some(w) = words.next() {
            if TAKES_VALUE.contains(&w.as_str()) {
                words.next();
            } else if !w.starts_with('-') {
                return Some(w.clone());
            }
        }
        None
    }

    /// Every `-H` header, as `(lower-case name, value)`.
    pub fn headers(&self) -> Vec<(String, String)> {
        self.values_of(&["-H", "--header"])
            .into_iter()
            .filter_map(|h| {
                let (n, v) = h.split_once(':')?;
                Some((n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            })
            .collect()
    }

    /// The request body of `-d`/`--data`/`--data-raw`/`--json`.
    pub fn body(&self) -> Option<String> {
        self.value_of(&["-d", "--data", "--data-raw", "--data-binary", "--json"])
    }

    fn value_of(&self, names: &[&str]) -> Option<String> {
        self.values_of(names).into_iter().last()
    }

    fn values_of(&self, names: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        let mut words = self.words.iter();
        while let Some(w) = words.next() {
            if names.contains(&w.as_str()) {
                if let Some(v) = words.next() {
                    out.push(v.clone());
                }
            }
        }
        out
    }
}

/// curl's options that take a value (those the docs use, and the common ones).
const TAKES_VALUE: [&str; 16] = [
    "-X",
    "--request",
    "-H",
    "--header",
    "-d",
    "--data",
    "--data-raw",
    "--data-binary",
    "--json",
    "-o",
    "--output",
    "-w",
    "--write-out",
    "--max-time",
    "-m",
    "-u",
];

/// Every `curl` command in the shell code blocks (`sh`, `bash`, `shell`, `console`) of a
/// Markdown file, and in its inline code spans that start with `curl `.
pub fn curl_examples(file: &str, markdown: &str) -> Vec<CurlExample> {
    let mut out = Vec::new();
    let mut in_shell: Option<bool> = None;
    let mut pending = String::new();
    let mut pending_line = 0;
    for (i, line) in markdown.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") {
            in_shell = match in_shell {
                Some(_) => None,
                None => {
                    let lang = t.trim_start_matches('`').trim();
                    Some(matches!(lang, "sh" | "bash" | "shell" | "console"))
                }
            };
            continue;
        }
        match in_shell {
            Some(true) => {
                if pending.is_empty() {
                    pending_line = i + 1;
                }
                let code = strip_comment(line);
                if let Some(cont) = code.trim_end().strip_suffix('\\') {
                    pending.push_str(cont);
                    pending.push(' ');
                    continue;
                }
                pending.push_str(&code);
                let command = std::mem::take(&mut pending);
                for words in commands(&command) {
                    if words.first().is_some_and(|w| w == "curl") {
                        out.push(CurlExample {
                            at: format!("{file}:{pending_line}"),
                            text: command.trim().to_owned(),
                            words,
                        });
                    }
                }
            }
            Some(false) => {}
            None => {
                let mut rest = line;
                while let Some(start) = rest.find("`curl ") {
                    rest = &rest[start + 1..];
                    let Some(end) = rest.find('`') else { break };
                    for words in commands(&rest[..end]) {
                        if words.first().is_some_and(|w| w == "curl") {
                            out.push(CurlExample {
                                at: format!("{file}:{}", i + 1),
                                text: rest[..end].to_owned(),
                                words,
                            });
                        }
                    }
                    rest = &rest[end + 1..];
                }
            }
        }
    }
    out
}

/// A line without its shell comment (a `#` at the start of a word, outside quotes).
fn strip_comment(line: &str) -> String {
    let mut out = String::new();
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for c in line.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single && prev != '\\' => double = !double,
            '#' if !single && !double && prev.is_whitespace() => break,
            _ => {}
        }
        out.push(c);
        prev = c;
    }
    out
}

/// The simple commands of a line (split at `;`, `|`, `&&`, `||`, `&` and inside `$(…)`),
/// each as its words after quote removal.
pub fn commands(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut has_word = false;
    let mut chars = line.chars().peekable();
    let finish = |words: &mut Vec<String>, word: &mut String, has_word: &mut bool| {
        if *has_word {
            words.push(std::mem::take(word));
            *has_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                has_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                has_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                if !matches!(n, '"' | '\\' | '$' | '`') {
                                    word.push('\\');
                                }
                                word.push(n);
                            }
                        }
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                has_word = true;
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                // A command substitution: its commands are examples too; in this word it
                // stands for its output, written `$(…)`.
                chars.next();
                let mut depth = 1;
                let mut inner = String::new();
                for c in chars.by_ref() {
                    match c {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    inner.push(c);
                }
                out.extend(commands(&inner));
                word.push_str("$(…)");
                has_word = true;
            }
            ';' | '|' | '&' => {
                finish(&mut words, &mut word, &mut has_word);
                if !words.is_empty() {
                    out.push(std::mem::take(&mut words));
                }
            }
            c if c.is_whitespace() => finish(&mut words, &mut word, &mut has_word),
            c => {
                has_word = true;
                word.push(c);
            }
        }
    }
    finish(&mut words, &mut word, &mut has_word);
    if !words.is_empty() {
        out.push(words);
    }
    // `VAR=value cmd …`, `do cmd …`: the command is what follows the assignments and the
    // shell's keywords.
    out.into_iter()
        .map(|w| {
            let skip = w
                .iter()
                .take_while(|w| {
                    (w.contains('=') && !w.starts_with('-') && !w.contains("://"))
                        || ["do", "then", "else", "time", "!"].contains(&w.as_str())
                })
                .count();
            w[skip..].to_vec()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// `$NAME` and `${NAME}` in `text` replaced from `vars`; the names not found.
pub fn expand(text: &str, vars: &HashMap<&str, String>) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut missing = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let braced = chars.peek() == Some(&'{');
        if braced {
            chars.next();
        }
        let mut name = String::new();
        while let Some(&n) = chars.peek() {
            if n.is_ascii_alphanumeric() || n == '_' {
                name.push(n);
                chars.next();
            } else {
                break;
            }
        }
        // `${NAME:-default}`: the default when NAME is not known.
        let mut default = None;
        if braced {
            let mut rest = String::new();
            for n in chars.by_ref() {
                if n == '}' {
                    break;
                }
                rest.push(n);
            }
            default = rest.strip_prefix(":-").map(str::to_owned);
        }
        if name.is_empty() {
            out.push('$');
            continue;
        }
        match (vars.get(name.as_str()), default) {
            (Some(v), _) => out.push_str(v),
            (None, Some(d)) => out.push_str(&d),
            (None, None) => missing.push(name),
        }
    }
    (out, missing)
}

/// The path and query of `url` (`http://host:port/a/b?c` → `/a/b`, `c`), with its origin.
pub fn split_url(url: &str) -> Option<(String, String, String)> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (origin, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    Some((origin.to_owned(), path.to_owned(), query.to_owned()))
}

/// The path template of `doc` (an OpenAPI document) that `path` matches, if any.
pub fn match_template(doc: &serde_json::Value, path: &str) -> Option<String> {
    let given: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    doc["paths"].as_object()?.keys().find_map(|template| {
        let parts: Vec<&str> = template.split('/').collect();
        let fits = parts.len() == given.len()
            && parts
                .iter()
                .zip(&given)
                .all(|(t, g)| t == g || (t.starts_with('{') && !g.is_empty()));
        fits.then(|| template.clone())
    })
}

/// Stand-ins for the variables the examples use, as a reader who followed the docs has them
/// (`make run` writes the first four to `target/usher-run.env`).
pub fn example_variables() -> HashMap<&'static str, String> {
    let mut vars = HashMap::new();
    for (name, value) in [
        ("DISPATCHER", "http://dispatcher.test".to_owned()),
        ("GATEWAY", "http://gateway.test".to_owned()),
        ("BOOKING", "http://booking.test".to_owned()),
        ("USHER_ADMIN_TOKEN", "admin-token".to_owned()),
        ("USHER_SERVICE_TOKEN", "service-token".to_owned()),
        ("TOKEN", "eyJ.entry.token".to_owned()),
        ("SEED", "ab".repeat(32)),
        ("RANDOMNESS", "cd".repeat(32)),
    ] {
        vars.insert(name, value);
    }
    vars
}

/// Which server an example's origin is: the variables' stand-ins, and `make run`'s ports.
fn server_of(origin: &str) -> Option<&'static str> {
    let port = origin.rsplit_once(':').map(|(_, p)| p);
    match (origin, port) {
        ("dispatcher.test", _) | (_, Some("8081")) => Some("dispatcher"),
        ("gateway.test", _) | (_, Some("8080" | "8090")) => Some("gateway"),
        ("booking.test", _) | (_, Some("8082")) => Some("booking"),
        _ => None,
    }
}

/// The booking demo's routes (it serves no API description).
const BOOKING_ROUTES: [(&str, &str); 3] = [
    ("POST", "/api/bookings"),
    ("POST", "/entry"),
    ("GET", "/api/seats"),
];

/// What [`check_curl`] found right with an example.
#[derive(Debug)]
pub enum Checked {
    /// It talks to no usher server (e.g. drand's public API): not checked.
    NotUsher,
    /// Its route, method and credentials are right; its JSON body, if any, still to be
    /// validated against the route's schema: `{"document", "path", "method", "at", "body"}`.
    Fine(Option<serde_json::Value>),
}

/// Checks one example against `documents` (`{"dispatcher": <OpenAPI>, "gateway": <OpenAPI>}`):
/// every variable is one the docs define, the route and method are served, a route that
/// needs a token gets `Authorization: Bearer`, and a body is JSON sent as
/// `content-type: application/json` (the servers answer `400` to one without it).
pub fn check_curl(ex: &CurlExample, documents: &serde_json::Value) -> Result<Checked, Vec<String>> {
    let vars = example_variables();
    let mut problems = Vec::new();
    let mut fail = |why: String| problems.push(format!("{}: {why}\n    {}", ex.at, ex.text));
    let Some(raw_url) = ex.url() else {
        fail("no URL".into());
        return Err(problems);
    };
    let mut unknown = Vec::new();
    let (url, missing) = expand(&raw_url, &vars);
    unknown.extend(missing);
    let headers: Vec<(String, String)> = ex
        .headers()
        .into_iter()
        .map(|(n, v)| {
            let (v, missing) = expand(&v, &vars);
            unknown.extend(missing);
            (n, v)
        })
        .collect();
    let body = ex.body().map(|b| {
        let (b, missing) = expand(&b, &vars);
        unknown.extend(missing);
        b
    });
    if !unknown.is_empty() {
        fail(format!(
            "unknown variables {unknown:?} (use those of target/usher-run.env)"
        ));
        return Err(problems);
    }
    let Some((origin, path, _query)) = split_url(&url) else {
        fail(format!("not a URL: {url}"));
        return Err(problems);
    };
    let Some(server) = server_of(&origin) else {
        return Ok(Checked::NotUsher);
    };
    let method = ex.method();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let body_json = match &body {
        None => None,
        Some(b) => {
            if header("content-type") != Some("application/json") {
                fail("a JSON body needs -H 'content-type: application/json' (the servers answer 400 without it)".into());
            }
            match serde_json::from_str::<serde_json::Value>(b) {
                Ok(v) => Some(v),
                Err(e) => {
                    fail(format!("the body is not JSON ({e}): {b}"));
                    None
                }
            }
        }
    };
    if server == "booking" {
        if !BOOKING_ROUTES.contains(&(method.as_str(), path.as_str())) {
            fail(format!("the booking demo serves no {method} {path}"));
        }
        return if problems.is_empty() {
            Ok(Checked::Fine(None))
        } else {
            Err(problems)
        };
    }
    let doc = &documents[server];
    let Some(template) = match_template(doc, &path) else {
        fail(format!("the {server} serves no path {path}"));
        return Err(problems);
    };
    let op = &doc["paths"][&template][method.to_ascii_lowercase()];
    if op.is_null() {
        fail(format!("the {server} serves no {method} {template}"));
        return Err(problems);
    }
    let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
    let bearer =
        header("authorization").is_some_and(|v| v.to_ascii_lowercase().starts_with("bearer "));
    if secured && !bearer {
        fail(format!(
            "{method} {template} needs -H \"Authorization: Bearer …\""
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Checked::Fine(body_json.map(|body| {
        serde_json::json!({
            "document": server, "path": template, "method": method.to_ascii_lowercase(),
            "at": ex.at, "body": body,
        })
    })))
}
