//! An allocation meter: the global allocator of this test binary counts, per thread, the bytes
//! live and the peak while a decoder runs, so a property can assert "no allocation beyond the
//! stated bound" of the decoder it calls.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting the calling thread's bytes while a [`measure`] is open.
pub struct Meter;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: no counting while the thread's locals are torn down.
    let _ = ON.try_with(|on| {
        if on.get() {
            let live = LIVE.with(|l| {
                l.set(l.get() + delta);
                l.get()
            });
            PEAK.with(|p| p.set(p.get().max(live)));
        }
    });
}

fn size(layout: Layout) -> isize {
    isize::try_from(layout.size()).unwrap_or(isize::MAX)
}

// SAFETY: every call is forwarded to `System` unchanged; the counting touches only
// thread-locals with const initialisers, which never allocate.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(size(layout));
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(size(layout));
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-size(layout));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as the allocator may do it: both blocks live at once.
        count(isize::try_from(new_size).unwrap_or(isize::MAX));
        // SAFETY: as above.
        let out = unsafe { System.realloc(ptr, layout, new_size) };
        count(-size(layout));
        out
    }
}

/// Runs `f` on this thread and returns its result and the peak of bytes it held at once
/// (allocated and not yet freed, including what it returns).
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    ON.with(|on| on.set(true));
    let out = f();
    ON.with(|on| on.set(false));
    let peak = PEAK.with(Cell::get);
    (out, usize::try_from(peak).unwrap_or(0))
}

#[test]
fn the_meter_sees_what_a_closure_holds_at_its_peak_and_nothing_else() {
    let before = vec![0u8; 1 << 20];
    let ((), peak) = measure(|| {
        let a = vec![0u8; 300_000];
        let b = vec![0u8; 200_000];
        drop(a);
        drop(b);
        let _c = vec![0u8; 100_000];
    });
    assert_eq!(peak, 500_000);
    drop(before);
    let (kept, peak) = measure(|| vec![0u8; 4_096]);
    assert_eq!((kept.len(), peak), (4_096, 4_096));
}
