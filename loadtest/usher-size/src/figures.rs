//! The measured costs a plan is computed from, read out of BENCHMARKS.md.
//!
//! Nothing here is a hand-copied number: each [`Figure`] names the section of BENCHMARKS.md,
//! the row it sits in (a table row by its first cell, or a paragraph or bullet by how it
//! starts) and the text right before the number. [`Costs::from_markdown`] reads every figure
//! and fails, naming the row, when a section, a row or a number is missing, so a rewritten
//! BENCHMARKS.md changes the plan (or stops it loudly) instead of drifting from it.
//!
//! The binary reads the BENCHMARKS.md it was built with ([`BUILT_IN`]) unless told another
//! file (`--benchmarks`, say one `make bench` wrote on bigger machines).

use serde::Serialize;

/// The BENCHMARKS.md of the tree this binary was built from.
pub const BUILT_IN: &str = include_str!("../../../BENCHMARKS.md");

/// Where one number sits in BENCHMARKS.md.
#[derive(Debug, Clone, Copy)]
pub struct Locator {
    /// The `## ` heading of its section.
    pub section: &'static str,
    /// How its row starts: `| first cell |` for a table row, the first words otherwise.
    pub row: &'static str,
    /// The text right before the number, searched inside the row.
    pub after: &'static str,
    /// What the row is called in a plan's "source" column.
    pub label: &'static str,
}

/// One number read from BENCHMARKS.md, with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub value: f64,
    /// The number as BENCHMARKS.md writes it (`4.23`, `10,203`, `3–7`, `six`).
    pub text: String,
    /// `Section: row`, as a plan cites it.
    pub source: String,
}

/// Why a figure could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FigureError {
    #[error("BENCHMARKS.md has no section \"## {0}\"")]
    NoSection(&'static str),
    #[error("BENCHMARKS.md, section \"{section}\": no row starting {row:?}")]
    NoRow {
        section: &'static str,
        row: &'static str,
    },
    #[error("BENCHMARKS.md, section \"{section}\": {count} rows start {row:?}; expected one")]
    ManyRows {
        section: &'static str,
        row: &'static str,
        count: usize,
    },
    #[error("BENCHMARKS.md, \"{section}: {label}\": no {after:?} followed by a number in the row")]
    NoNumber {
        section: &'static str,
        label: &'static str,
        after: &'static str,
    },
}

/// Every cost a plan uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Costs {
    /// Cores of the machine the load figures were measured on (all servers shared them).
    pub machine_vcpus: Figure,
    /// Gateways in the load runs (the figures below are over all of them).
    pub load_gateways: Figure,
    /// Joins per second sustained over all the load run's gateways.
    pub join_rate: Figure,
    /// Browsers held with updates over all the load run's gateways.
    pub held: Figure,
    /// Gateway RSS per held connection, KiB.
    pub kib_per_connection: Figure,
    /// RSS of all the load run's gateways before any connection, MiB.
    pub idle_mib_all_gateways: Figure,
    /// Redis commands per second with the held browsers waiting.
    pub waiting_commands_per_s: Figure,
    /// Redis bytes per waiting place.
    pub bytes_per_waiting: Figure,
    /// Redis bytes per away place (instead of its waiting bytes: it leaves the waiting set).
    pub bytes_per_away: Figure,
    /// Redis bytes per place of a `bind` queue, on top.
    pub bytes_per_bound: Figure,
    /// Gateway CPU per join, µs.
    pub gateway_us_per_join: Figure,
    /// Redis CPU per join through a gateway, µs.
    pub redis_us_per_join: Figure,
    /// Redis CPU per admission (one master, one queue), µs.
    pub redis_us_per_admission: Figure,
    /// Dispatcher CPU for one admission burst, ms (a range counts as its upper end).
    pub dispatcher_ms_per_burst: Figure,
    /// Places in that burst.
    pub burst_places: Figure,
    /// Dispatcher replicas in the fault test that lost and duplicated nothing.
    pub dispatcher_replicas: Figure,
    /// Milliseconds until every browser of a killed gateway resumed on the other.
    pub gateway_failover_ms: Figure,
}

macro_rules! locators {
    ($($field:ident: $section:literal, $row:literal, $after:literal, $label:literal;)*) => {
        /// Where each cost of [`Costs`] is read, in field order.
        pub const LOCATORS: &[(&str, Locator)] = &[$(
            (stringify!($field), Locator { section: $section, row: $row, after: $after, label: $label }),
        )*];

        impl Costs {
            /// Reads every cost out of a BENCHMARKS.md text.
            pub fn from_markdown(md: &str) -> Result<Self, FigureError> {
                Ok(Self { $($field: read(md, &Locator { section: $section, row: $row, after: $after, label: $label })?,)* })
            }
        }
    };
}

locators! {
    machine_vcpus: "Load", "Measured by `make bench`", "Machine: ", "the machine of `make bench`";
    load_gateways: "Load", "| gateway memory |", "MiB over ", "gateway memory (gateways in the run)";
    join_rate: "Load", "| join rate |", "sustained (first to last join) | ", "join rate";
    held: "Load", "| concurrent SSE connections |", "updates | ", "concurrent SSE connections";
    kib_per_connection: "Load", "| gateway memory |", "connection | ", "gateway memory";
    idle_mib_all_gateways: "Load", "| gateway memory |", "gateways, ", "gateway memory (before any connection)";
    waiting_commands_per_s: "Load", "| Redis cost of waiting |", "with 100,000 waiting | ", "Redis cost of waiting";
    bytes_per_waiting: "Load", "| Redis memory |", "per waiting place | ", "Redis memory";
    bytes_per_away: "Load", "| tick behind away places |", "), ", "tick behind away places";
    bytes_per_bound: "Abuse", "Redis memory (`MEMORY USAGE`", "`bound` ", "Redis memory (`bound` per place)";
    gateway_us_per_join: "Where the time goes", "- **A join**", "gateway ≈ ", "A join (gateway)";
    redis_us_per_join: "Where the time goes", "- **A join**", "Redis ≈ ", "A join (Redis)";
    redis_us_per_admission: "Redis Cluster", "| 1 master, 1 queue (1): its ceiling |", "µs / ", "1 master, 1 queue (Redis CPU per admission)";
    dispatcher_ms_per_burst: "Where the time goes", "- **An admission burst**", "dispatcher ", "An admission burst (dispatcher)";
    burst_places: "Where the time goes", "- **An admission burst**", "burst** of ", "An admission burst (places)";
    dispatcher_replicas: "Fault tolerance", "| `kill -9` a dispatcher replica", "0.7 s (", "kill -9 a dispatcher replica";
    gateway_failover_ms: "Fault tolerance", "| `kill -9` the gateway holding every browser |", "other gateway within ", "kill -9 the gateway holding every browser";
}

/// Reads the number that follows `loc.after` in the one row `loc` names.
pub fn read(md: &str, loc: &Locator) -> Result<Figure, FigureError> {
    let section = section(md, loc.section).ok_or(FigureError::NoSection(loc.section))?;
    let rows = rows(section, loc.row);
    let row = match rows.as_slice() {
        [] => {
            return Err(FigureError::NoRow {
                section: loc.section,
                row: loc.row,
            })
        }
        [one] => one,
        many => {
            return Err(FigureError::ManyRows {
                section: loc.section,
                row: loc.row,
                count: many.len(),
            })
        }
    };
    let no_number = || FigureError::NoNumber {
        section: loc.section,
        label: loc.label,
        after: loc.after,
    };
    let start = row.find(loc.after).ok_or_else(no_number)? + loc.after.len();
    let (value, text) = number_at(&row[start..]).ok_or_else(no_number)?;
    Ok(Figure {
        value,
        text,
        source: format!("{}: {}", loc.section, loc.label),
    })
}

/// The text of the section under `## {name}`, up to the next `## ` heading.
fn section<'a>(md: &'a str, name: &str) -> Option<&'a str> {
    let heading = format!("## {name}\n");
    let start = md
        .match_indices(&heading)
        .find(|(i, _)| *i == 0 || md[..*i].ends_with('\n'))?
        .0
        + heading.len();
    let rest = &md[start..];
    Some(rest.find("\n## ").map_or(rest, |end| &rest[..end]))
}

/// Every row of `section` that starts with `start`: a line, with the indented lines that
/// continue it (a bullet wrapped over several lines), joined by spaces.
fn rows(section: &str, start: &str) -> Vec<String> {
    let lines: Vec<&str> = section.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with(start) {
            continue;
        }
        let mut row = (*line).to_owned();
        for next in &lines[i + 1..] {
            if next.starts_with("  ") && !next.trim().is_empty() {
                row.push(' ');
                row.push_str(next.trim());
            } else {
                break;
            }
        }
        found.push(row);
    }
    found
}

/// The number at the start of `s`: digits with `,` thousands and a `.` fraction, a range
/// `a–b` (its upper end: a cost plans for the worst measured), or a small number in words.
fn number_at(s: &str) -> Option<(f64, String)> {
    const WORDS: [&str; 12] = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve",
    ];
    if let Some(n) = WORDS.iter().position(|w| {
        s.strip_prefix(w)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric()))
    }) {
        return Some(((n + 1) as f64, WORDS[n].to_owned()));
    }
    let plain = |s: &str| -> Option<(f64, usize)> {
        let len = s
            .find(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.'))
            .unwrap_or(s.len());
        let digits = s[..len].trim_end_matches(['.', ',']);
        let value = digits.replace(',', "").parse::<f64>().ok()?;
        Some((value, digits.len()))
    };
    let (low, len) = plain(s)?;
    if let Some(rest) = s[len..].strip_prefix('–') {
        if let Some((high, high_len)) = plain(rest) {
            let text = &s[..len + '–'.len_utf8() + high_len];
            return Some((high.max(low), text.to_owned()));
        }
    }
    Some((low, s[..len].to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_written() {
        assert_eq!(number_at("10,203/s"), Some((10_203.0, "10,203".into())));
        assert_eq!(number_at("4.23 KiB"), Some((4.23, "4.23".into())));
        assert_eq!(number_at("3–7)"), Some((7.0, "3–7".into())));
        assert_eq!(number_at("six gateways"), Some((6.0, "six".into())));
        assert_eq!(number_at("93.7 B."), Some((93.7, "93.7".into())));
        assert_eq!(number_at("sixty"), None);
        assert_eq!(number_at("n/a"), None);
    }

    /// Every figure of the BENCHMARKS.md in this tree is found, in its one row, and is the
    /// number that row shows: a renamed row or a reworded cell fails here, naming the row.
    #[test]
    fn every_figure_is_read_from_this_trees_benchmarks() {
        let costs = Costs::from_markdown(BUILT_IN).expect("BENCHMARKS.md has every figure");
        let json = serde_json::to_value(&costs).expect("costs as JSON");
        for (field, loc) in LOCATORS {
            let figure = &json[field];
            let value = figure["value"].as_f64().expect("a value");
            assert!(value > 0.0, "{field}: {figure}");
            // The number's own text sits in the row right after the text before it.
            let row = rows(section(BUILT_IN, loc.section).expect("section"), loc.row);
            let text = figure["text"].as_str().expect("text");
            assert!(
                row[0].contains(&format!("{}{text}", loc.after)),
                "{field}: {text:?} not after {:?} in {:?}",
                loc.after,
                row[0]
            );
        }
        // The figures the plan's arithmetic leans on hardest, spelled out.
        assert_eq!(costs.machine_vcpus.value, 2.0);
        assert_eq!(costs.dispatcher_replicas.value, 2.0);
        assert!(costs.bytes_per_away.value > costs.bytes_per_waiting.value);
    }

    #[test]
    fn a_missing_row_section_or_number_is_named() {
        let loc = LOCATORS[2].1; // join rate
        let without_row = BUILT_IN.replace("| join rate |", "| joins |");
        assert_eq!(
            read(&without_row, &loc),
            Err(FigureError::NoRow {
                section: "Load",
                row: "| join rate |"
            })
        );
        let without_section = BUILT_IN.replace("## Load\n", "## Loads\n");
        assert_eq!(
            read(&without_section, &loc),
            Err(FigureError::NoSection("Load"))
        );
        let md = "## Load\n\n| join rate | target | sustained (first to last join) | n/a |\n";
        let err = read(md, &loc).expect_err("no number");
        assert!(err.to_string().contains("join rate"), "{err}");
        let twice = "## Load\n| join rate | 1 |\n| join rate | 2 |\n";
        assert!(matches!(
            read(twice, &loc),
            Err(FigureError::ManyRows { count: 2, .. })
        ));
    }

    #[test]
    fn a_changed_figure_changes_the_cost() {
        // Whatever `make bench` measured last: the number before " KiB (" in the row.
        let row = BUILT_IN
            .lines()
            .find(|l| l.starts_with("| gateway memory |"))
            .expect("the gateway memory row");
        let measured = row
            .split(" KiB (")
            .next()
            .and_then(|head| head.rsplit("| ").next())
            .expect("a figure in KiB");
        let md = BUILT_IN.replace(&format!("| {measured} KiB ("), "| 5.5 KiB (");
        assert_ne!(md, BUILT_IN, "the figure {measured} was found and changed");
        let costs = Costs::from_markdown(&md).expect("costs");
        assert_eq!(costs.kib_per_connection.value, 5.5);
        assert_eq!(costs.kib_per_connection.source, "Load: gateway memory");
    }
}
