//! The waiting-room page's files: the built-in ones (compiled into the binary) or a template
//! directory (`USHER_PAGE_DIR`), read once at startup; the language a request gets; and the
//! page rendered for one queue.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The language every template must have, and the one a request gets when none of its
/// languages is available.
pub const FALLBACK_LANG: &str = "en";

/// What the page for an unknown queue says when the template has no `unknown_queue` string.
const UNKNOWN_QUEUE: &str =
    "There is no waiting line at this address. Please check the link you followed.";

/// The built-in page: the documented example of a template directory.
const BUILT_IN: &[(&str, &[u8])] = &[
    ("index.html", include_bytes!("../../page/index.html")),
    ("page.css", include_bytes!("../../page/page.css")),
    ("page.js", include_bytes!("../../page/page.js")),
    ("pow-worker.js", include_bytes!("../../page/pow-worker.js")),
    ("i18n/en.json", include_bytes!("../../page/i18n/en.json")),
    ("i18n/ko.json", include_bytes!("../../page/i18n/ko.json")),
];

/// Why a template cannot be used. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("USHER_PAGE_DIR: cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("USHER_PAGE_DIR: {0} is missing")]
    Missing(&'static str),
    #[error("USHER_PAGE_DIR: {file} must be UTF-8 text")]
    NotText { file: String },
    #[error("USHER_PAGE_DIR: {file} must be a JSON object of strings: {reason}")]
    BadStrings { file: String, reason: String },
}

/// An asset served at `/q/assets/{name}`.
#[derive(Debug)]
pub struct Asset {
    pub content_type: &'static str,
    pub bytes: Vec<u8>,
}

/// A loaded template.
#[derive(Debug)]
pub struct Template {
    index: String,
    /// Language tag → its strings (a JSON object), rendered into the page.
    strings: BTreeMap<String, Map<String, Value>>,
    assets: BTreeMap<String, Asset>,
    /// A digest of every file, appended to asset URLs (`?v=`) so browsers may cache assets
    /// for long and still never mix two versions.
    version: String,
}

impl Template {
    /// The built-in page, or the template directory `dir`.
    pub fn load(dir: Option<&Path>) -> Result<Self, PageError> {
        match dir {
            None => Self::from_files(
                BUILT_IN
                    .iter()
                    .map(|(n, b)| ((*n).to_owned(), b.to_vec()))
                    .collect(),
            ),
            Some(dir) => Self::from_files(read_dir(dir)?),
        }
    }

    fn from_files(files: Vec<(String, Vec<u8>)>) -> Result<Self, PageError> {
        let mut digest = Sha256::new();
        let (mut index, mut strings, mut assets) = (None, BTreeMap::new(), BTreeMap::new());
        for (name, bytes) in files {
            digest.update(name.as_bytes());
            digest.update(&bytes);
            if name == "index.html" {
                index = Some(text(&name, bytes)?);
            } else if let Some(lang) = name
                .strip_prefix("i18n/")
                .and_then(|n| n.strip_suffix(".json"))
            {
                if is_language_tag(lang) {
                    let parsed = parse_strings(&name, &bytes)?;
                    strings.insert(lang.to_owned(), parsed);
                }
            } else if let Some(content_type) = content_type(&name).filter(|_| !name.contains('/')) {
                assets.insert(
                    name,
                    Asset {
                        content_type,
                        bytes,
                    },
                );
            }
        }
        let index = index.ok_or(PageError::Missing("index.html"))?;
        if !strings.contains_key(FALLBACK_LANG) {
            return Err(PageError::Missing("i18n/en.json"));
        }
        let version = digest
            .finalize()
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Self {
            index,
            strings,
            assets,
            version,
        })
    }

    pub fn asset(&self, name: &str) -> Option<&Asset> {
        self.assets.get(name)
    }

    /// The language to answer in: `?lang=` when the template has it, else the first language
    /// of `Accept-Language` (by weight, then order) that it has, else English.
    pub fn language(&self, query: Option<&str>, accept: Option<&str>) -> &str {
        let has = |tag: &str| self.strings.get_key_value(tag).map(|(k, _)| k.as_str());
        if let Some(l) = query.map(str::to_ascii_lowercase).and_then(|l| has(&l)) {
            return l;
        }
        let mut wanted: Vec<(f32, usize, String)> = accept
            .unwrap_or("")
            .split(',')
            .enumerate()
            .filter_map(|(i, part)| {
                let mut it = part.split(';');
                let tag = it.next()?.trim();
                let primary = tag.split('-').next()?.to_ascii_lowercase();
                let q = it
                    .find_map(|p| p.trim().strip_prefix("q="))
                    .map_or(Some(1.0), |q| q.trim().parse::<f32>().ok())?;
                (q > 0.0).then_some((q, i, primary))
            })
            .collect();
        wanted.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        wanted
            .iter()
            .find_map(|(_, _, l)| has(l))
            .unwrap_or(FALLBACK_LANG)
    }

    /// The strings of `lang` (a language [`Self::language`] returned).
    pub fn strings(&self, lang: &str) -> &Map<String, Value> {
        self.strings
            .get(lang)
            .or_else(|| self.strings.get(FALLBACK_LANG))
            .unwrap_or_else(|| unreachable!("load() requires the fallback language"))
    }

    /// `index.html` with its placeholders filled: `{{lang}}`, `{{title}}` (HTML-escaped),
    /// `{{config}}` (JSON safe inside a `<script type="application/json">` element) and `{{v}}`
    /// (the assets' version).
    pub fn render(&self, lang: &str, title: &str, config: &Value) -> String {
        let json = config
            .to_string()
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026");
        self.index
            .replace("{{lang}}", lang)
            .replace("{{title}}", &escape_html(title))
            .replace("{{v}}", &self.version)
            .replace("{{config}}", &json)
    }

    /// The short page for a queue that does not exist: the language's `unknown_queue` string
    /// (English when a template directory lacks it), with the page's stylesheet and no script.
    pub fn render_unknown(&self, lang: &str) -> String {
        let text = self
            .strings(lang)
            .get("unknown_queue")
            .and_then(Value::as_str)
            .unwrap_or(UNKNOWN_QUEUE);
        format!(
            "<!doctype html>\n<html lang=\"{lang}\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{text}</title>\n<link rel=\"stylesheet\" href=\"/q/assets/page.css?v={v}\">\n\
             </head>\n<body data-state=\"unknown\">\n<main class=\"card\">\n\
             <p id=\"message\" class=\"message\">{text}</p>\n</main>\n</body>\n</html>\n",
            lang = escape_html(lang),
            text = escape_html(text),
            v = self.version,
        )
    }

    /// Total size of the files a browser loads (the page and its assets, strings of one
    /// language): the built-in page keeps it under 37 KB (30 KB before the browser-key code of
    /// `bind` queues, issue 23; 32 KB before the maintenance, ended and opening-time texts of
    /// issue 24; 34 KB before its invitations; 35 KB before its inventory and lane lines).
    #[cfg(test)]
    pub fn weight(&self, lang: &str) -> usize {
        self.index.len()
            + self.assets.values().map(|a| a.bytes.len()).sum::<usize>()
            + Value::Object(self.strings(lang).clone()).to_string().len()
    }
}

fn read_dir(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, PageError> {
    let read =
        |path: PathBuf| std::fs::read(&path).map_err(|source| PageError::Read { path, source });
    let list = |path: &Path| -> Result<Vec<PathBuf>, PageError> {
        let entries = std::fs::read_dir(path).map_err(|source| PageError::Read {
            path: path.to_owned(),
            source,
        })?;
        Ok(entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect())
    };
    let mut files = Vec::new();
    for (prefix, sub) in [("", dir.to_owned()), ("i18n/", dir.join("i18n"))] {
        if prefix.is_empty() || sub.is_dir() {
            for path in list(&sub)? {
                let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned)
                else {
                    continue;
                };
                files.push((format!("{prefix}{name}"), read(path)?));
            }
        }
    }
    files.sort();
    Ok(files)
}

fn text(name: &str, bytes: Vec<u8>) -> Result<String, PageError> {
    String::from_utf8(bytes).map_err(|_| PageError::NotText {
        file: name.to_owned(),
    })
}

fn parse_strings(name: &str, bytes: &[u8]) -> Result<Map<String, Value>, PageError> {
    let bad = |reason: String| PageError::BadStrings {
        file: name.to_owned(),
        reason,
    };
    let map: Map<String, Value> = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    if let Some((k, _)) = map.iter().find(|(_, v)| !v.is_string()) {
        return Err(bad(format!("{k:?} is not a string")));
    }
    Ok(map)
}

/// `en`, `ko`, `pt`: two or three ASCII letters (the primary subtag of a language tag).
fn is_language_tag(s: &str) -> bool {
    (2..=3).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase())
}

/// The content type of an asset a template may ship; `None` for any other file.
fn content_type(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1;
    Some(match ext {
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        _ => return None,
    })
}

fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built_in() -> Template {
        Template::load(None).expect("the built-in page loads")
    }

    #[test]
    fn the_built_in_page_stays_under_37_kb() {
        let t = built_in();
        for lang in ["en", "ko"] {
            assert!(
                t.weight(lang) < 37 * 1024,
                "{lang}: {} bytes",
                t.weight(lang)
            );
        }
    }

    #[test]
    fn every_language_has_exactly_the_english_strings() {
        let t = built_in();
        let en: Vec<_> = t.strings("en").keys().collect();
        let ko: Vec<_> = t.strings("ko").keys().collect();
        assert_eq!(en, ko);
    }

    #[test]
    fn the_language_comes_from_the_query_then_accept_language() {
        let t = built_in();
        assert_eq!(t.language(Some("ko"), Some("en-US")), "ko");
        assert_eq!(t.language(Some("KO"), None), "ko");
        assert_eq!(t.language(Some("xx"), Some("ko-KR,ko;q=0.9")), "ko");
        assert_eq!(t.language(None, Some("fr-FR, ko;q=0.8, en;q=0.5")), "ko");
        assert_eq!(t.language(None, Some("en;q=0.4, ko;q=0.9")), "ko");
        assert_eq!(t.language(None, Some("ko;q=0, en")), "en");
        assert_eq!(t.language(None, Some("de")), "en");
        assert_eq!(t.language(None, None), "en");
        assert_eq!(t.language(None, Some(";;,q=x")), "en");
    }

    #[test]
    fn rendering_escapes_the_title_and_the_config() {
        let t = built_in();
        let html = t.render(
            "en",
            "<b>Tour</b>",
            &serde_json::json!({"title": "</script><script>alert(1)</script>"}),
        );
        assert!(html.contains("&lt;b&gt;Tour&lt;/b&gt;"));
        assert!(!html.contains("</script><script>alert"));
        assert!(!html.contains("{{"), "every placeholder is filled");
    }

    #[test]
    fn a_template_directory_needs_an_index_and_english() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = Template::load(Some(dir.path())).expect_err("empty");
        assert!(e.to_string().contains("index.html"), "{e}");
        std::fs::write(dir.path().join("index.html"), "<p>{{title}}</p>").expect("write");
        let e = Template::load(Some(dir.path())).expect_err("no strings");
        assert!(e.to_string().contains("i18n/en.json"), "{e}");
        std::fs::create_dir(dir.path().join("i18n")).expect("mkdir");
        std::fs::write(dir.path().join("i18n/en.json"), r#"{"a": 1}"#).expect("write");
        let e = Template::load(Some(dir.path())).expect_err("not strings");
        assert!(e.to_string().contains("not a string"), "{e}");
        std::fs::write(dir.path().join("i18n/en.json"), r#"{"a": "b"}"#).expect("write");
        std::fs::write(dir.path().join("brand.css"), "p{}").expect("write");
        std::fs::write(dir.path().join("notes.txt"), "private").expect("write");
        let t = Template::load(Some(dir.path())).expect("loads");
        assert!(t.asset("brand.css").is_some());
        assert!(t.asset("notes.txt").is_none(), "only known asset types");
        assert_eq!(t.render("en", "x", &Value::Null), "<p>x</p>");
    }
}
