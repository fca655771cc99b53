//! heatsink's integration tests against the local AWS stack live in `tests/it/` (one binary,
//! one module per area); their harness is the internal test kit, `heatsink-testkit`.
