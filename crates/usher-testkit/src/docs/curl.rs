//! The `curl` examples of the docs: read from Markdown as a shell would split them, and
//! checked against the servers' API descriptions.

use std::collections::HashMap;

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
        (
            "USHER_ADMIN_TOKEN",
            "admin-token-0123456789abcdef012345".to_owned(),
        ),
        (
            "USHER_SERVICE_TOKEN",
            "service-token-0123456789abcdef0123".to_owned(),
        ),
        ("TOKEN", "eyJ.entry.token".to_owned()),
        // Invitations (docs/sale-day.md): the shop's JWK, an invitation, a join code.
        (
            "JWK",
            r#"{"kty":"OKP","crv":"Ed25519","kid":"shop-2026","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#
                .to_owned(),
        ),
        ("INVITATION", "eyJ.invitation.jwt".to_owned()),
        ("JOIN_CODE", "Jc2tq0m0N5Dc0Jm2Ruv8pQ".to_owned()),
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
