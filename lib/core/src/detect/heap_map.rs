//! A bounded map from string ids to slots, ordered by a `u64` priority in a min-heap.
//!
//! Both bounded structures of this crate have the same shape: a fixed number of slots, found by
//! id, where the slot with the smallest priority is the one to replace when the map is full. The
//! Space-Saving sketch ([`super::SpaceSaving`]) orders counters by count; admission
//! ([`crate::guard`]) orders token buckets by the time they are full again. This type holds that
//! shared machinery once: an open-addressed index (linear probing, load ≤ 3/4, backward-shift
//! deletion), a slab of slots, and an indexed 4-ary min-heap over the slab.
//!
//! The heap keeps a copy of each priority next to the slot number, so sifting touches only the
//! heap array. Both users only ever *raise* a priority in the hot path (a count grows, a bucket's
//! full-again time moves later), so [`HeapMap::raise_priority`] just writes the slot: the heap copy
//! becomes a stale lower bound, which keeps the heap order valid. The root is kept exact (a stale
//! root is refreshed and sifted down until the root's copy is current), so [`HeapMap::min`] is
//! always the true minimum.
//!
//! Ids are hashed with std's `RandomState` (SipHash with per-process random keys, so chosen ids
//! cannot force probe collisions); the hash decides only where an id sits in the index, never
//! which slot is the minimum, so every result is the same from run to run.
//!
//! Costs: find is O(1) expected; a raise is O(1) unless it hits the root; inserting, replacing
//! and removing are O(log₄ n) plus the deferred refreshes. Memory: `n × (size_of::<Slot<V>>() +
//! 16 + id allocation)` plus an index of at most `2n` four-byte cells, never more than `capacity`
//! slots.

use std::hash::{BuildHasher, RandomState};

/// Marker for an empty index cell.
const EMPTY: u32 = u32::MAX;
/// Smallest index size once anything is stored.
const MIN_INDEX: usize = 16;
/// Children per heap node.
const ARITY: usize = 4;

/// One stored slot: an id, its hash, its priority and the caller's value.
#[derive(Debug, Clone)]
pub(crate) struct Slot<V> {
    /// The id, at most the owner's maximum id length.
    pub(crate) id: String,
    /// Hash of `id` under the owning map's hasher.
    hash: u64,
    /// The current priority (the heap's copy may be lower).
    pub(crate) priority: u64,
    /// Position of this slot in the heap.
    heap_pos: u32,
    /// The caller's payload.
    pub(crate) value: V,
}

/// A heap entry: a lower bound of the slot's priority (exact at the root) and the slot number.
#[derive(Debug, Clone, Copy)]
struct Node {
    priority: u64,
    slot: u32,
}

/// A bounded id → slot map with a min-heap over slot priorities.
#[derive(Debug, Clone)]
pub(crate) struct HeapMap<V> {
    capacity: usize,
    slots: Vec<Slot<V>>,
    heap: Vec<Node>,
    index: Vec<u32>,
    hasher: RandomState,
}

impl<V> HeapMap<V> {
    /// Creates an empty map that will never hold more than `capacity` slots (allocates lazily).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.min(EMPTY as usize - 1),
            slots: Vec::new(),
            heap: Vec::new(),
            index: Vec::new(),
            hasher: RandomState::new(),
        }
    }

    /// The maximum number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The number of stored slots.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether `len() == capacity()`.
    pub(crate) fn is_full(&self) -> bool {
        self.slots.len() >= self.capacity
    }

    /// Hashes an id with this map's hasher.
    pub(crate) fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    /// Finds the slot holding `id` (whose hash is `hash`).
    pub(crate) fn find(&self, hash: u64, id: &str) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        let mask = self.index.len() - 1;
        let mut pos = hash as usize & mask;
        loop {
            let cell = self.index[pos];
            if cell == EMPTY {
                return None;
            }
            let slot = &self.slots[cell as usize];
            if slot.hash == hash && slot.id == id {
                return Some(cell as usize);
            }
            pos = (pos + 1) & mask;
        }
    }

    /// The slot at `at`.
    pub(crate) fn slot(&self, at: usize) -> &Slot<V> {
        &self.slots[at]
    }

    /// The caller's value of the slot at `at`, mutably (the priority is changed with
    /// [`Self::raise_priority`] or [`Self::set_priority`]).
    pub(crate) fn value_mut(&mut self, at: usize) -> &mut V {
        &mut self.slots[at].value
    }

    /// All slots, in slab order.
    pub(crate) fn slots(&self) -> &[Slot<V>] {
        &self.slots
    }

    /// The slot with the smallest priority.
    pub(crate) fn min(&self) -> Option<usize> {
        self.heap.first().map(|node| node.slot as usize)
    }

    /// Raises the priority of the slot at `at` to `priority` (never lowers it): O(1) unless the
    /// slot is the root.
    pub(crate) fn raise_priority(&mut self, at: usize, priority: u64) {
        let slot = &mut self.slots[at];
        slot.priority = slot.priority.max(priority);
        if slot.heap_pos == 0 {
            self.settle_root();
        }
    }

    /// Sets the priority of the slot at `at` to any value and restores heap order.
    pub(crate) fn set_priority(&mut self, at: usize, priority: u64) {
        self.slots[at].priority = priority;
        let pos = self.slots[at].heap_pos as usize;
        self.heap[pos].priority = priority;
        let pos = self.sift_up(pos);
        self.sift_down(pos);
        self.settle_root();
    }

    /// Adds a slot for an id not present; the caller checks `!is_full()` first.
    pub(crate) fn push(&mut self, hash: u64, id: &str, priority: u64, value: V) -> usize {
        debug_assert!(!self.is_full());
        let at = self.slots.len();
        grow_bounded(&mut self.slots, self.capacity);
        grow_bounded(&mut self.heap, self.capacity);
        self.slots.push(Slot {
            id: id.to_owned(),
            hash,
            priority,
            heap_pos: self.heap.len() as u32,
            value,
        });
        self.heap.push(Node {
            priority,
            slot: at as u32,
        });
        self.index_insert(hash, at as u32);
        self.sift_up(self.heap.len() - 1);
        at
    }

    /// Reuses the slot at `at` for a new id (not present), keeping its id allocation.
    pub(crate) fn replace(&mut self, at: usize, hash: u64, id: &str, priority: u64, value: V) {
        self.index_remove(at as u32);
        let slot = &mut self.slots[at];
        slot.id.clear();
        slot.id.push_str(id);
        if slot.id.capacity() > 2 * id.len().max(16) {
            slot.id.shrink_to(id.len());
        }
        slot.hash = hash;
        slot.value = value;
        self.index_insert(hash, at as u32);
        self.set_priority(at, priority);
    }

    /// Removes the slot at `at`; the last slot moves into its place (slot numbers change).
    pub(crate) fn remove(&mut self, at: usize) -> Slot<V> {
        self.index_remove(at as u32);
        // Take the slot out of the heap: the last heap node moves into its position.
        let pos = self.slots[at].heap_pos as usize;
        let last_node = self.heap.len() - 1;
        self.heap.swap(pos, last_node);
        self.heap.pop();
        if pos < self.heap.len() {
            let moved = self.heap[pos].slot as usize;
            self.slots[moved].heap_pos = pos as u32;
            let pos = self.sift_up(pos);
            self.sift_down(pos);
        }
        // Take the slot out of the slab: the last slot moves to `at`.
        let last = self.slots.len() - 1;
        if at != last {
            let moved_hash = self.slots[last].hash;
            self.index_repoint(moved_hash, last as u32, at as u32);
            let heap_pos = self.slots[last].heap_pos as usize;
            self.heap[heap_pos].slot = at as u32;
        }
        let removed = self.slots.swap_remove(at);
        self.settle_root();
        removed
    }

    /// Removes every slot, keeping allocations.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.heap.clear();
        self.index.fill(EMPTY);
    }

    /// Approximate heap bytes owned, plus `size_of::<Self>()`.
    pub(crate) fn footprint_bytes(&self) -> usize {
        size_of::<Self>()
            + self.slots.capacity() * size_of::<Slot<V>>()
            + self
                .slots
                .iter()
                .map(|slot| allocation_bytes(slot.id.capacity()))
                .sum::<usize>()
            + self.heap.capacity() * size_of::<Node>()
            + self.index.capacity() * size_of::<u32>()
    }

    /// An upper bound of [`Self::footprint_bytes`] for `capacity` slots with ids of at most
    /// `max_id_bytes` bytes.
    pub(crate) fn max_footprint_bytes(capacity: usize, max_id_bytes: usize) -> usize {
        let index = index_size_for(capacity);
        size_of::<Self>()
            + capacity * (size_of::<Slot<V>>() + size_of::<Node>())
            // An id keeps its largest capacity, at most twice `max(len, 16)` of any id it held.
            + capacity * allocation_bytes(2 * max_id_bytes.max(16))
            + index * size_of::<u32>()
    }

    /// Makes the root's heap copy exact: while it is stale, refresh it and sift it down.
    fn settle_root(&mut self) {
        while let Some(root) = self.heap.first() {
            let current = self.slots[root.slot as usize].priority;
            if root.priority == current {
                return;
            }
            self.heap[0].priority = current;
            self.sift_down(0);
        }
    }

    /// Moves the node at `pos` up to its place; returns where it landed.
    fn sift_up(&mut self, mut pos: usize) -> usize {
        let node = self.heap[pos];
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            if self.heap[parent].priority <= node.priority {
                break;
            }
            self.place(pos, self.heap[parent]);
            pos = parent;
        }
        self.place(pos, node);
        pos
    }

    /// Moves the node at `pos` down to its place; returns where it landed.
    fn sift_down(&mut self, mut pos: usize) -> usize {
        let node = self.heap[pos];
        let len = self.heap.len();
        loop {
            let first = ARITY * pos + 1;
            if first >= len {
                break;
            }
            let mut child = first;
            for candidate in first + 1..(first + ARITY).min(len) {
                if self.heap[candidate].priority < self.heap[child].priority {
                    child = candidate;
                }
            }
            if node.priority <= self.heap[child].priority {
                break;
            }
            self.place(pos, self.heap[child]);
            pos = child;
        }
        self.place(pos, node);
        pos
    }

    fn place(&mut self, pos: usize, node: Node) {
        self.heap[pos] = node;
        self.slots[node.slot as usize].heap_pos = pos as u32;
    }

    fn index_insert(&mut self, hash: u64, at: u32) {
        let wanted = index_size_for(self.slots.len());
        if self.index.len() < wanted {
            self.rebuild_index(wanted);
            // The rebuild already placed every slot, including `at`.
            return;
        }
        let mask = self.index.len() - 1;
        let mut pos = hash as usize & mask;
        while self.index[pos] != EMPTY {
            pos = (pos + 1) & mask;
        }
        self.index[pos] = at;
    }

    fn rebuild_index(&mut self, size: usize) {
        self.index.clear();
        self.index.resize(size, EMPTY);
        let mask = size - 1;
        for (at, slot) in self.slots.iter().enumerate() {
            let mut pos = slot.hash as usize & mask;
            while self.index[pos] != EMPTY {
                pos = (pos + 1) & mask;
            }
            self.index[pos] = at as u32;
        }
    }

    fn index_position(&self, hash: u64, at: u32) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        let mask = self.index.len() - 1;
        let mut pos = hash as usize & mask;
        loop {
            match self.index[pos] {
                EMPTY => return None,
                cell if cell == at => return Some(pos),
                _ => pos = (pos + 1) & mask,
            }
        }
    }

    fn index_repoint(&mut self, hash: u64, from: u32, to: u32) {
        if let Some(pos) = self.index_position(hash, from) {
            self.index[pos] = to;
        }
    }

    fn index_remove(&mut self, at: u32) {
        let hash = self.slots[at as usize].hash;
        let Some(mut hole) = self.index_position(hash, at) else {
            return;
        };
        let mask = self.index.len() - 1;
        self.index[hole] = EMPTY;
        let mut pos = hole;
        loop {
            pos = (pos + 1) & mask;
            let cell = self.index[pos];
            if cell == EMPTY {
                return;
            }
            let home = self.slots[cell as usize].hash as usize & mask;
            // The cell may move back into the hole unless its home lies cyclically in (hole, pos].
            let stays = if hole <= pos {
                hole < home && home <= pos
            } else {
                hole < home || home <= pos
            };
            if !stays {
                self.index[hole] = cell;
                self.index[pos] = EMPTY;
                hole = pos;
            }
        }
    }
}

/// Index cells for `n` slots: a power of two with load ≤ 3/4.
fn index_size_for(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    (n + n.div_ceil(3)).next_power_of_two().max(MIN_INDEX)
}

/// Grows `vec` by doubling, never past `limit` elements of capacity.
fn grow_bounded<T>(vec: &mut Vec<T>, limit: usize) {
    if vec.len() == vec.capacity() {
        let extra = vec
            .capacity()
            .max(4)
            .min(limit.saturating_sub(vec.len()))
            .max(1);
        vec.reserve_exact(extra);
    }
}

/// Approximate bytes a heap allocation of `len` bytes costs (a glibc-like allocator: 8-byte
/// header, 16-byte granules, 32-byte minimum); `0` for no allocation.
pub(crate) fn allocation_bytes(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        ((len + 8).div_ceil(16) * 16).max(32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn check_invariants<V>(map: &HeapMap<V>) {
        for (at, slot) in map.slots.iter().enumerate() {
            assert_eq!(map.find(slot.hash, &slot.id), Some(at));
            let node = map.heap[slot.heap_pos as usize];
            assert_eq!(node.slot as usize, at);
            assert!(
                node.priority <= slot.priority,
                "the heap copy is a lower bound"
            );
        }
        for pos in 1..map.heap.len() {
            assert!(map.heap[(pos - 1) / ARITY].priority <= map.heap[pos].priority);
        }
        if let Some(root) = map.heap.first() {
            assert_eq!(root.priority, map.slots[root.slot as usize].priority);
        }
        assert_eq!(map.heap.len(), map.slots.len());
        assert!(map.len() <= map.capacity());
        assert!(map.footprint_bytes() <= HeapMap::<V>::max_footprint_bytes(map.capacity(), 64));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Upsert(u8, u64),
        Raise(u8, u64),
        Remove(u8),
        ReplaceMin(u8, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..40, 0u64..50).prop_map(|(k, p)| Op::Upsert(k, p)),
            (0u8..40, 0u64..20).prop_map(|(k, d)| Op::Raise(k, d)),
            (0u8..40).prop_map(Op::Remove),
            (0u8..40, 0u64..50).prop_map(|(k, p)| Op::ReplaceMin(k, p)),
        ]
    }

    proptest! {
        #[test]
        fn the_map_agrees_with_a_model_and_keeps_heap_order(ops in prop::collection::vec(op(), 0..200)) {
            let mut map: HeapMap<u8> = HeapMap::new(24);
            let mut model: HashMap<String, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Upsert(k, p) => {
                        let id = format!("key-{k}");
                        let hash = map.hash(&id);
                        match map.find(hash, &id) {
                            Some(at) => { map.set_priority(at, p); model.insert(id, p); }
                            None if !map.is_full() => { map.push(hash, &id, p, k); model.insert(id, p); }
                            None => {}
                        }
                    }
                    Op::Raise(k, delta) => {
                        let id = format!("key-{k}");
                        if let Some(at) = map.find(map.hash(&id), &id) {
                            let p = map.slot(at).priority + delta;
                            map.raise_priority(at, p);
                            model.insert(id, p);
                        }
                    }
                    Op::Remove(k) => {
                        let id = format!("key-{k}");
                        let hash = map.hash(&id);
                        if let Some(at) = map.find(hash, &id) {
                            let slot = map.remove(at);
                            prop_assert_eq!(&slot.id, &id);
                            model.remove(&id);
                        }
                    }
                    Op::ReplaceMin(k, p) => {
                        let id = format!("key-{k}");
                        let hash = map.hash(&id);
                        if map.find(hash, &id).is_none() && let Some(at) = map.min() {
                            let min = map.slot(at).priority;
                            prop_assert_eq!(Some(&min), model.values().min());
                            let old = map.slot(at).id.clone();
                            map.replace(at, hash, &id, p, k);
                            model.remove(&old);
                            model.insert(id, p);
                        }
                    }
                }
                check_invariants(&map);
                prop_assert_eq!(map.len(), model.len());
                for (id, p) in &model {
                    let at = map.find(map.hash(id), id);
                    prop_assert!(at.is_some());
                    prop_assert_eq!(map.slot(at.unwrap_or_default()).priority, *p);
                }
            }
        }
    }
}
