//! What the documentation tests need (`tests/browsers/docs.rs`): the configuration reference
//! rendered from the binaries' clap definitions (here), a checker for relative links and anchors
//! in Markdown ([`links`]), and a reader of the `curl` examples the docs show ([`curl`]).
//!
//! The reference is generated, never copied by hand: `docs/configuration.md` is the output of
//! [`configuration_reference`], and a test fails when the committed page differs from it.
//! `make docs` (the `config_reference` test with `USHER_BLESS=1`) writes the page again.

use std::fmt::Write as _;

use clap::CommandFactory;

pub mod curl;
pub mod links;

pub use curl::*;
pub use links::*;

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
