//! Fuzzing of every decoder of outside bytes, in bounded time, on stable Rust: property tests
//! (proptest) with structure-aware generators, each case checked for the invariant "no panic,
//! no allocation beyond the decoder's stated bound (`docs/bounds.md`), a typed error".
//!
//! A binary of its own, because its global allocator is the allocation [`meter`], and because
//! `make test` runs it once (the integration binary `it` runs once per emulator lane). Cases per
//! decoder: `HEATSINK_FUZZ_CASES` (default 1,000, about 20 s in all in a debug build); each test
//! prints what its cases found (`cargo test --test fuzz -- --nocapture`): cases, accepted,
//! refusals by error, the largest allocation against the input.

mod change;
#[path = "../common/hostile.rs"]
mod hostile;
mod kpl;
mod lambda;
mod meter;
mod stored;
mod token;

use std::collections::BTreeMap;
use std::fmt::Debug;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

#[global_allocator]
static METER: meter::Meter = meter::Meter;

/// Cases per decoder: `HEATSINK_FUZZ_CASES`, default 1,000.
pub fn cases() -> u32 {
    std::env::var("HEATSINK_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// What one decoder's cases found.
#[derive(Debug, Default)]
pub struct Tally {
    /// Cases run.
    pub cases: u64,
    /// Inputs decoded.
    pub accepted: u64,
    /// Inputs refused, by error kind.
    pub refused: BTreeMap<String, u64>,
    /// The largest allocation peak seen over the input's size (inputs of 1 KiB and more, so a
    /// fixed cost does not read as a ratio), and that input's size.
    pub worst: (f64, usize),
}

impl Tally {
    /// Counts a decoded input.
    pub fn accept(&mut self) {
        self.accepted += 1;
    }

    /// Counts a refusal by its error's kind (the variant: the Debug text up to the first
    /// non-identifier character).
    pub fn refuse(&mut self, e: &impl Debug) {
        let text = format!("{e:?}");
        let kind: String = text
            .trim_start_matches('"')
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        *self.refused.entry(kind).or_default() += 1;
    }

    /// Checks an allocation `peak` for an input of `input` bytes against `bound`, and keeps
    /// the worst ratio.
    pub fn allocated(
        &mut self,
        peak: usize,
        input: usize,
        bound: usize,
    ) -> Result<(), TestCaseError> {
        let ratio = peak as f64 / input.max(1) as f64;
        if input >= 1_024 && ratio > self.worst.0 {
            self.worst = (ratio, input);
        }
        if peak > bound {
            return Err(TestCaseError::fail(format!(
                "allocated {peak} bytes at once for {input} bytes of input, over the bound {bound}"
            )));
        }
        Ok(())
    }
}

/// Runs `check` on `cases()` inputs of `strategy` (a fixed seed, so a run is repeatable),
/// prints what the cases found and returns it; a failing case fails the test with proptest's
/// shrunk input.
pub fn fuzz<S: Strategy>(
    name: &str,
    strategy: S,
    check: impl FnMut(S::Value, &mut Tally) -> Result<(), TestCaseError>,
) -> Tally
where
    S::Value: Debug,
{
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let tally = std::cell::RefCell::new(Tally::default());
    let check = std::cell::RefCell::new(check);
    let result = runner.run(&strategy, |input| {
        let mut t = tally.borrow_mut();
        t.cases += 1;
        (check.borrow_mut())(input, &mut t)
    });
    let tally = tally.into_inner();
    println!(
        "fuzz {name}: {} cases, {} accepted, refused {:?}, largest allocation {:.1} x input ({} bytes)",
        tally.cases, tally.accepted, tally.refused, tally.worst.0, tally.worst.1
    );
    if let Err(e) = result {
        panic!("fuzz {name}: {e}");
    }
    tally
}
