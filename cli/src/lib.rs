//! The `heatsink` command line as a library: one module per subcommand ([`cmd`]), and the
//! pieces every command shares (one-line failures, progress bars, plain tables, bounded flag
//! parsers), which the demo crate reuses so its output reads like the operator's.
//!
//! The binary (`src/main.rs`) parses the arguments and calls [`cmd`]; nothing here is a stable
//! API for other programs.

pub mod cmd;
