//! What rampart counts and records: the metrics (counters, histograms, the dashboard's recent
//! lists) and the access log. Written from every layer, so it imports none of them.

pub mod access_log;
pub mod metrics;
