//! The eviction order of a [`BoundedMap`](super::BoundedMap):
//! one S3-FIFO over the entries of all its shards, so that what the map
//! keeps does not depend on how many shards it has.
//!
//! It is quick_cache's S3-FIFO (`quick_cache::unsync`, the policy the L1
//! is compared with), step for step: a new entry enters the hot ring while
//! the hot ring is under its target (97% of the capacity) and the cold ring
//! otherwise; room is made by advancing the cold ring: its oldest entry,
//! if referenced since it entered, is promoted to the hot ring (which then
//! evicts by CLOCK while over its target), else it is evicted and its hash
//! kept as a ghost. A new entry whose hash is a ghost enters the hot ring.
//! Ghosts are bounded by half the estimated entry count.
//!
//! This order only holds hashes, weights and ring links. The entries and
//! their reference counts live in the map's shards, which a hit reads under
//! its shard's read lock; the order asks the shards through [`Residents`]
//! when it needs a reference count or evicts. Only inserts, removals and
//! evictions touch it (under the map's one mutex): a hit never does.

use hashbrown::HashTable;

/// What a hit raises a reference count to, at most.
pub(crate) const MAX_REFERENCES: u16 = 2;

/// Weight share of the hot ring, and ghosts per estimated entry
/// (quick_cache's defaults).
const HOT_ALLOCATION: f64 = 0.97;
const GHOST_ALLOCATION: f64 = 0.5;

/// The end of no list: node ids are `u32` (the map refuses an entry
/// beyond `u32::MAX - 1` nodes).
const NIL: u32 = u32::MAX;

/// The map's side of eviction: reference counts and the entries themselves.
pub(crate) trait Residents {
    /// Whether the entry of node `node` (hash `hash`) was referenced since
    /// it was last asked; if it was, one reference is taken away.
    fn take_reference(&mut self, hash: u64, node: u32) -> bool;
    /// Removes the entry of node `node` from its shard, handing it to the
    /// caller of the insert that made room.
    fn evict(&mut self, hash: u64, node: u32);
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ring {
    Hot,
    Cold,
    Ghost,
    /// A free node, on no ring.
    Free,
}

struct Node {
    hash: u64,
    weight: u64,
    prev: u32,
    next: u32,
    ring: Ring,
}

/// One S3-FIFO's rings over node ids. Each ring is circular; its head is
/// its oldest node, a node joins before the head (at the tail).
pub(crate) struct Order {
    nodes: Vec<Node>,
    free: Vec<u32>,
    hot: Option<u32>,
    cold: Option<u32>,
    ghost: Option<u32>,
    /// Ghost node ids by hash.
    ghosts: HashTable<u32>,
    weight_hot: u64,
    weight_cold: u64,
    residents: usize,
    ghost_count: usize,
    capacity: u64,
    target_hot: u64,
    ghost_capacity: usize,
}

impl Order {
    /// The order of a map of about `estimated_items` entries and at most
    /// `capacity` total weight.
    pub(crate) fn new(estimated_items: usize, capacity: u64) -> Self {
        let target_hot =
            ((capacity as f64 * HOT_ALLOCATION) as u64).clamp(capacity.min(1), capacity);
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            hot: None,
            cold: None,
            ghost: None,
            ghosts: HashTable::new(),
            weight_hot: 0,
            weight_cold: 0,
            residents: 0,
            ghost_count: 0,
            capacity,
            target_hot,
            ghost_capacity: (estimated_items as f64 * GHOST_ALLOCATION) as usize,
        }
    }

    /// Whether an entry of `weight` may enter at all (no heavier than the
    /// hot ring's target).
    pub(crate) fn admits(&self, weight: u64) -> bool {
        weight <= self.target_hot
    }

    /// The number of entries held.
    pub(crate) fn len(&self) -> usize {
        self.residents
    }

    /// The total weight held; never above the capacity once an insert
    /// returns.
    pub(crate) fn weight(&self) -> u64 {
        self.weight_hot + self.weight_cold
    }

    /// Forgets the ghost of `hash` if there is one; whether there was (the
    /// entry being inserted then enters the hot ring: see [`Self::push`]).
    pub(crate) fn take_ghost(&mut self, hash: u64) -> bool {
        let nodes = &self.nodes;
        let Ok(found) = self
            .ghosts
            .find_entry(hash, |&id| nodes[id as usize].hash == hash)
        else {
            return false;
        };
        let (id, _) = found.remove();
        self.unlink(id);
        self.ghost_count -= 1;
        self.release(id);
        true
    }

    /// Whether a new entry of `weight`, not a ghost, would enter the hot
    /// ring: the hot ring is under its target (the map is filling up).
    /// Asked before [`Self::make_room`], as quick_cache does.
    pub(crate) fn enters_hot(&self, weight: u64) -> bool {
        self.weight_hot + weight <= self.target_hot
    }

    /// Evicts until an entry of `weight` fits.
    pub(crate) fn make_room(&mut self, weight: u64, residents: &mut impl Residents) {
        while self.weight() + weight > self.capacity && self.advance_cold(residents) {}
    }

    /// Evicts until the weight is within the capacity.
    pub(crate) fn shrink(&mut self, residents: &mut impl Residents) {
        self.make_room(0, residents);
    }

    /// A node for a new entry of `hash` and `weight`, on the hot ring or
    /// the cold one; `None` when no node id is left (the entry is then
    /// refused).
    pub(crate) fn push(&mut self, hash: u64, weight: u64, hot: bool) -> Option<u32> {
        let ring = if hot { Ring::Hot } else { Ring::Cold };
        let id = match self.free.pop() {
            Some(id) => id,
            None => u32::try_from(self.nodes.len())
                .ok()
                .filter(|&id| id != NIL)?,
        };
        let node = Node {
            hash,
            weight,
            prev: id,
            next: id,
            ring,
        };
        // A freed node's place, or a new one at the end.
        match self.nodes.get_mut(id as usize) {
            Some(place) => *place = node,
            None => self.nodes.push(node),
        }
        self.link(id);
        if hot {
            self.weight_hot += weight;
        } else {
            self.weight_cold += weight;
        }
        self.residents += 1;
        Some(id)
    }

    /// The entry of `node` was replaced by one of `weight`.
    pub(crate) fn reweigh(&mut self, node: u32, weight: u64) {
        let entry = &mut self.nodes[node as usize];
        let old = std::mem::replace(&mut entry.weight, weight);
        match entry.ring {
            Ring::Hot => self.weight_hot = self.weight_hot - old + weight,
            Ring::Cold => self.weight_cold = self.weight_cold - old + weight,
            Ring::Ghost | Ring::Free => {}
        }
    }

    /// The entry of `node` was removed from its shard: its node goes.
    pub(crate) fn forget(&mut self, node: u32) {
        let Some(entry) = self.nodes.get(node as usize) else {
            return;
        };
        let weight = entry.weight;
        match entry.ring {
            Ring::Hot => self.weight_hot -= weight,
            Ring::Cold => self.weight_cold -= weight,
            Ring::Ghost | Ring::Free => return,
        }
        self.unlink(node);
        self.residents -= 1;
        self.release(node);
    }

    /// Forgets every entry and ghost.
    pub(crate) fn clear(&mut self) {
        *self = Self {
            ghost_capacity: self.ghost_capacity,
            ..Self::new(0, self.capacity)
        };
    }

    /// One step of the cold ring: promotes its oldest entry if referenced,
    /// else evicts it to a ghost; with the cold ring empty, a step of the
    /// hot ring. False when nothing is left to evict.
    fn advance_cold(&mut self, residents: &mut impl Residents) -> bool {
        let Some(id) = self.cold else {
            return self.advance_hot(residents);
        };
        let Node { hash, weight, .. } = self.nodes[id as usize];
        self.unlink(id);
        self.weight_cold -= weight;
        if residents.take_reference(hash, id) {
            self.nodes[id as usize].ring = Ring::Hot;
            self.link(id);
            self.weight_hot += weight;
            while self.weight_hot > self.target_hot && self.advance_hot(residents) {}
            return true;
        }
        residents.evict(hash, id);
        self.residents -= 1;
        self.nodes[id as usize].ring = Ring::Ghost;
        self.link(id);
        let nodes = &self.nodes;
        self.ghosts
            .insert_unique(hash, id, |&ghost| nodes[ghost as usize].hash);
        self.ghost_count += 1;
        if self.ghost_count > self.ghost_capacity {
            self.drop_oldest_ghost();
        }
        true
    }

    /// One eviction by CLOCK on the hot ring: referenced entries lose a
    /// reference and are passed over, the first unreferenced one is evicted
    /// and the ring's head moves past it. False with the hot ring empty.
    fn advance_hot(&mut self, residents: &mut impl Residents) -> bool {
        let Some(mut id) = self.hot else {
            return false;
        };
        // Each pass takes a reference from every entry it passes over, and
        // hits raise none above MAX_REFERENCES: this ends, but bound it all
        // the same against hits racing the sweep.
        let limit = self
            .residents
            .saturating_mul(usize::from(MAX_REFERENCES) + 2);
        for _ in 0..=limit {
            let Node { hash, next, .. } = self.nodes[id as usize];
            if !residents.take_reference(hash, id) {
                return self.evict_hot(id, residents);
            }
            id = next;
        }
        self.evict_hot(id, residents)
    }

    fn evict_hot(&mut self, id: u32, residents: &mut impl Residents) -> bool {
        let Node {
            hash, weight, next, ..
        } = self.nodes[id as usize];
        residents.evict(hash, id);
        self.weight_hot -= weight;
        self.residents -= 1;
        self.unlink(id);
        // The hand moves past the evicted entry: those passed over are now
        // the newest of the ring.
        if self.hot.is_some() {
            self.hot = Some(next);
        }
        self.release(id);
        true
    }

    fn drop_oldest_ghost(&mut self) {
        let Some(id) = self.ghost else {
            return;
        };
        let hash = self.nodes[id as usize].hash;
        if let Ok(found) = self.ghosts.find_entry(hash, |&ghost| ghost == id) {
            found.remove();
        }
        self.unlink(id);
        self.ghost_count -= 1;
        self.release(id);
    }

    fn head(&mut self, ring: Ring) -> Option<&mut Option<u32>> {
        match ring {
            Ring::Hot => Some(&mut self.hot),
            Ring::Cold => Some(&mut self.cold),
            Ring::Ghost => Some(&mut self.ghost),
            Ring::Free => None,
        }
    }

    /// Puts `id` at the tail of its ring.
    fn link(&mut self, id: u32) {
        let ring = self.nodes[id as usize].ring;
        let Some(&mut head) = self.head(ring) else {
            return;
        };
        match head {
            None => {
                let node = &mut self.nodes[id as usize];
                node.prev = id;
                node.next = id;
                if let Some(head) = self.head(ring) {
                    *head = Some(id);
                }
            }
            Some(head) => {
                let tail = self.nodes[head as usize].prev;
                let node = &mut self.nodes[id as usize];
                node.prev = tail;
                node.next = head;
                self.nodes[tail as usize].next = id;
                self.nodes[head as usize].prev = id;
            }
        }
    }

    /// Takes `id` off its ring (its ring's head moves to the next node if
    /// it was the head).
    fn unlink(&mut self, id: u32) {
        let Node {
            prev, next, ring, ..
        } = self.nodes[id as usize];
        let alone = next == id;
        if !alone {
            self.nodes[prev as usize].next = next;
            self.nodes[next as usize].prev = prev;
        }
        if let Some(head) = self.head(ring) {
            if *head == Some(id) {
                *head = (!alone).then_some(next);
            }
        }
        let node = &mut self.nodes[id as usize];
        node.prev = id;
        node.next = id;
    }

    fn release(&mut self, id: u32) {
        self.nodes[id as usize].ring = Ring::Free;
        self.free.push(id);
    }
}
