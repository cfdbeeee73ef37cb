//! rampart's end-to-end tests, one test binary with a module per topic: each starts real origins
//! and the real `rampart` binary on 127.0.0.1 port 0 and speaks to it with real clients
//! (`support/` has the harness). One binary builds and links once for the whole suite.
#![allow(clippy::unwrap_used)]

mod support;

mod acme;
mod attacks;
mod cache;
mod cache_coalescing;
mod cache_disk;
mod cache_freshness;
mod cache_memory;
mod cache_purge;
mod cache_statuses;
mod cache_tags;
mod check;
mod check_scale;
mod compression;
mod connections;
mod dashboard;
mod docs_check;
mod fleet;
mod h2_conformance;
mod h2spec;
mod hardening;
mod http3;
mod http3_browser;
mod http3_cut;
mod http_rules;
mod logs;
mod metrics;
mod migration;
mod minification;
mod origin_client;
mod origin_h2;
mod packaging;
mod parking;
mod path_rules;
mod process;
mod proxy_protocol;
mod proxying;
mod redis;
mod reload;
mod rfc;
mod routing;
mod screening;
mod slow_readers;
mod tls;
mod tracing;
mod upgrade;
mod webp;
mod websocket;
