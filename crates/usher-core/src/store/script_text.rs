//! A script's text: the shared definitions it uses (the status constants, `lua/lanes.lua`,
//! `lua/record.lua`, `lua/prelude.lua`), in their order, then its own `lua/<name>.lua`.
//!
//! Why not every shared definition in every script: Redis runs a script's whole chunk on
//! every call (EVALSHA keeps nothing between calls), so each `local function` of the shared
//! files is a closure made, and its upvalues looked up, on every call of every script. Those
//! files hold a hundred definitions and a join uses a third of them: the rest cost the join
//! about an eighth of its time in Redis (BENCHMARKS.md, "Where the time goes"), and a hot
//! queue's joins all run on one Redis thread.
//!
//! The rule is textual and conservative: a definition goes in when its name appears as a
//! word in the script's code or in a definition that goes in (full-line comments aside). A
//! word in a string or trailing comment only takes in a definition that is not needed, never
//! leaves out one that is. It relies on the shared files' layout, which the tests check: at
//! the top level only comments, one-line `local <names> = ...`, one-line functions, and
//! `local function <name>(` blocks that end at the first line that is exactly `end`.

/// One top-level definition of the shared Lua: the names it defines and its text.
#[derive(Debug)]
struct Definition<'a> {
    names: Vec<&'a str>,
    text: &'a str,
}

/// The top-level definitions of `shared`, in order.
///
/// # Panics
/// On a top-level line that is neither a comment nor a definition, or a function without its
/// `end` (the shared files are the crate's own: `tests::every_shared_line_is_in_a_definition`
/// runs this on them).
fn definitions(shared: &str) -> Vec<Definition<'_>> {
    let lines: Vec<(usize, &str)> = shared
        .split_inclusive('\n')
        .scan(0, |at, l| {
            let start = *at;
            *at += l.len();
            Some((start, l))
        })
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (start, line) = lines[i];
        let bare = line.trim_end();
        if let Some(rest) = bare.strip_prefix("local function ") {
            let name = rest.split('(').next().unwrap_or_default().trim();
            // A one-line function ends on its own line; a block at its first bare `end`.
            let close = if bare.ends_with(" end") {
                i
            } else {
                (i + 1..lines.len())
                    .find(|&j| lines[j].1.trim_end() == "end")
                    .unwrap_or_else(|| panic!("shared Lua: `local function {name}` has no `end`"))
            };
            let (end_at, end_line) = lines[close];
            out.push(Definition {
                names: vec![name],
                text: &shared[start..end_at + end_line.len()],
            });
            i = close + 1;
        } else if let Some((names, _)) = bare.strip_prefix("local ").and_then(|d| d.split_once('='))
        {
            out.push(Definition {
                names: names.split(',').map(str::trim).collect(),
                text: line,
            });
            i += 1;
        } else if bare.is_empty() || bare.starts_with("--") {
            i += 1;
        } else {
            panic!("shared Lua: unexpected top-level line {bare:?}");
        }
    }
    out
}

/// The identifiers in the code of `text` (full-line comments skipped).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| !w.is_empty())
}

/// The script whose own text is `body`: the definitions of `shared` it uses, then `body`.
pub(super) fn compose(shared: &str, body: &str) -> String {
    let defs = definitions(shared);
    let mut needed: std::collections::HashSet<&str> = words(body).collect();
    let mut taken = vec![false; defs.len()];
    // Until no definition is added: each one taken in brings the names it uses.
    let mut grew = true;
    while grew {
        grew = false;
        for (d, taken) in defs.iter().zip(taken.iter_mut()) {
            if !*taken && d.names.iter().any(|n| needed.contains(n)) {
                *taken = true;
                needed.extend(words(d.text));
                grew = true;
            }
        }
    }
    let mut out: String = defs
        .iter()
        .zip(&taken)
        .filter(|(_, t)| **t)
        .map(|(d, _)| d.text)
        .collect();
    out.push_str(body);
    out
}

#[cfg(test)]
mod tests {
    use super::{compose, definitions};
    use crate::store::scripts::{shared_text, SOURCES};

    /// Nothing shared is dropped by a parse that misread the layout: every line of code of the
    /// shared text is in exactly one definition.
    #[test]
    fn every_shared_line_is_in_a_definition() {
        let shared = shared_text();
        let code = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
                .map(str::to_owned)
                .collect()
        };
        let defs = definitions(&shared);
        let parsed: String = defs.iter().map(|d| d.text).collect();
        assert_eq!(code(&parsed), code(&shared));
        // ... and no definition swallowed the next one (say, after a one-line function).
        for d in &defs {
            let heads = d.text.lines().filter(|l| l.starts_with("local ")).count();
            assert_eq!(heads, 1, "one definition read as {:?}: {}", d.names, d.text);
        }
    }

    /// A script gets what it uses, what that uses in turn, and nothing else.
    #[test]
    fn a_script_gets_the_definitions_it_uses() {
        let shared = "local A = 1\nlocal B = 2\n-- uses_c in a comment\nlocal function c()\n  \
                      return A\nend\nlocal function d()\n  return B\nend\n";
        let s = compose(shared, "return c()\n");
        assert_eq!(
            s,
            "local A = 1\nlocal function c()\n  return A\nend\nreturn c()\n"
        );
        let join = SOURCES
            .iter()
            .find(|(f, _)| *f == "join.lua")
            .expect("join");
        let s = compose(&shared_text(), join.1);
        for used in [
            "local function closed_reply(",
            "local function lanes_of(",
            "PLACE_WAITING",
        ] {
            assert!(s.contains(used), "join.lua lost {used}");
        }
        assert!(
            !s.contains("local function place_drawn("),
            "join.lua kept the draw's helper"
        );
    }
}
