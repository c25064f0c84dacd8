//! Statistics over raw per-record values (never over averages).
