//! The order of a k-way merge's sources (index runs, memtables): a binary heap of
//! source positions keyed by each source's current entry, so each entry merged costs
//! O(log k) comparisons instead of a look at all k sources. A merge that fell behind
//! an overwrite had 30 inputs, and scanning them all twice per key was most of its time.

/// Sources with an entry, smallest current entry first. The comparison `less(a, b)`
/// (whether source `a`'s current entry comes before source `b`'s) is passed to each
/// call, so the caller can move its sources on between calls; it must be a strict
/// total order, e.g. ties on the key broken by source position.
pub struct MergeOrder {
    heap: Vec<usize>,
}

impl MergeOrder {
    /// Orders those of the sources `0..n` for which `live(i)` (they have an entry).
    pub fn new(
        n: usize,
        live: impl Fn(usize) -> bool,
        less: impl Fn(usize, usize) -> bool,
    ) -> MergeOrder {
        let mut o = MergeOrder {
            heap: (0..n).filter(|&i| live(i)).collect(),
        };
        for i in (0..o.heap.len() / 2).rev() {
            o.sift_down(i, &less);
        }
        o
    }

    /// The source whose current entry is the smallest; `None` once all are done.
    pub fn first(&self) -> Option<usize> {
        self.heap.first().copied()
    }

    /// Puts the first source back in its place after it moved to its next entry;
    /// `live` says whether it has one.
    pub fn advanced(&mut self, live: bool, less: impl Fn(usize, usize) -> bool) {
        if self.heap.is_empty() {
            return;
        }
        if !live {
            self.heap.swap_remove(0);
        }
        self.sift_down(0, &less);
    }

    fn sift_down(&mut self, mut i: usize, less: &impl Fn(usize, usize) -> bool) {
        let h = &mut self.heap;
        loop {
            let left = 2 * i + 1;
            if left >= h.len() {
                return;
            }
            let right = left + 1;
            let child = if right < h.len() && less(h[right], h[left]) {
                right
            } else {
                left
            };
            if !less(h[child], h[i]) {
                return;
            }
            h.swap(i, child);
            i = child;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MergeOrder;
    use proptest::prelude::*;

    /// Merges sorted lists through a `MergeOrder`, returning (value, source) pairs.
    fn merge(lists: &[Vec<u8>]) -> Vec<(u8, usize)> {
        let mut pos = vec![0usize; lists.len()];
        let cur = |pos: &[usize], i: usize| lists[i].get(pos[i]).copied();
        let less = |pos: &[usize], a: usize, b: usize| (cur(pos, a), a) < (cur(pos, b), b);
        let mut order = MergeOrder::new(
            lists.len(),
            |i| cur(&pos, i).is_some(),
            |a, b| less(&pos, a, b),
        );
        let mut out = Vec::new();
        while let Some(i) = order.first() {
            out.push((cur(&pos, i).expect("ordered sources have an entry"), i));
            pos[i] += 1;
            order.advanced(cur(&pos, i).is_some(), |a, b| less(&pos, a, b));
        }
        out
    }

    proptest! {
        /// Every entry comes out once, in key order, equal keys newest source first.
        #[test]
        fn merging_sorted_sources_yields_every_entry_in_order(
            mut lists in proptest::collection::vec(proptest::collection::vec(0u8..20, 0..12), 0..10),
        ) {
            for l in &mut lists {
                l.sort();
            }
            let mut want: Vec<(u8, usize)> = lists
                .iter()
                .enumerate()
                .flat_map(|(i, l)| l.iter().map(move |&v| (v, i)))
                .collect();
            want.sort();
            prop_assert_eq!(merge(&lists), want);
        }
    }
}
