//! Integration tests that drive outside tools: Chromium through Playwright, k6, nginx, and the
//! OpenAPI validator (all installed by `scripts/ensure-browser.sh`); the docs' checks are here
//! because their curl examples are validated against the OpenAPI documents.
//!
//! One binary, one module per area: `cargo test -p usher-testkit --test browsers <area>::`.

mod admission_tls;
mod bind;
mod browser;
mod dashboard;
mod docs;
mod inventory_page;
mod invitations_page;
mod k6;
mod lanes_page;
mod nginx_auth;
mod open_door_nginx;
mod openapi;
mod pow_page;
mod report_page;
mod states_page;
