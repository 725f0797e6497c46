//! The consistent-hash ring of the Collector's loadbalancing exporter
//! (`consistent_hashing.go`), so that a causeway tier and a Collector tier
//! in front of the same backends send a trace to the same one: 36,000
//! positions, 100 points per backend at CRC32-IEEE(endpoint ‖ i as
//! little-endian u32) mod 36,000 (a taken position probes up to 10 slots
//! forward, else the point is skipped); a key goes to the first point at or
//! after CRC32(identifier) mod 36,000. Removing one of N backends moves
//! only the keys it owned (about 1/N); adding one takes about 1/(N+1).

use causeway_core::partition::Key;

const POSITIONS: u32 = 36_000;
const POINTS_PER_BACKEND: u32 = 100;
const PROBES: u32 = 10;

/// A ring over backends `0..n`.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// (position, backend), sorted by position.
    points: Vec<(u32, u32)>,
}

impl Ring {
    /// The ring of `endpoints` (backend `i` is `endpoints[i]`).
    pub fn new(endpoints: &[String]) -> Ring {
        let mut taken = vec![false; POSITIONS as usize];
        let mut points = Vec::with_capacity(endpoints.len() * POINTS_PER_BACKEND as usize);
        for (b, ep) in endpoints.iter().enumerate() {
            for i in 0..POINTS_PER_BACKEND {
                let mut h = crc32fast::Hasher::new();
                h.update(ep.as_bytes());
                h.update(&i.to_le_bytes());
                let start = h.finalize() % POSITIONS;
                if let Some(pos) = (0..PROBES)
                    .map(|k| (start + k) % POSITIONS)
                    .find(|p| !taken[*p as usize])
                {
                    taken[pos as usize] = true;
                    points.push((pos, b as u32));
                }
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// Whether no backend is on the ring.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The backend of `key` (0 on an empty ring).
    pub fn backend(&self, key: &Key) -> usize {
        if self.points.is_empty() {
            return 0;
        }
        let pos = match key {
            Key::Trace(id) => crc32fast::hash(id),
            Key::Resource(h) => crc32fast::hash(&h.to_be_bytes()),
        } % POSITIONS;
        let i = self.points.partition_point(|p| p.0 < pos);
        self.points.get(i).unwrap_or(&self.points[0]).1 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u32) -> Vec<Key> {
        (0..n)
            .map(|i| {
                let mut id = [0u8; 16];
                id[..4].copy_from_slice(&i.to_be_bytes());
                id[4..8].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
                id[12..].copy_from_slice(&i.rotate_left(13).to_be_bytes());
                Key::Trace(id)
            })
            .collect()
    }

    fn eps(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn spreads_evenly_and_a_removed_backend_moves_only_its_keys() {
        let three = eps(&["10.0.0.1:4317", "10.0.0.2:4317", "10.0.0.3:4317"]);
        let r3 = Ring::new(&three);
        let keys = ids(30_000);
        let mut counts = [0usize; 3];
        for k in &keys {
            counts[r3.backend(k)] += 1;
        }
        for c in counts {
            assert!((7_000..13_000).contains(&c), "uneven: {counts:?}");
        }
        // Remove the third: keys of the other two stay where they were.
        let two = eps(&["10.0.0.1:4317", "10.0.0.2:4317"]);
        let r2 = Ring::new(&two);
        let mut moved = 0;
        for k in &keys {
            let before = &three[r3.backend(k)];
            let after = &two[r2.backend(k)];
            if before != after {
                moved += 1;
                assert_eq!(
                    before, "10.0.0.3:4317",
                    "a key of a remaining backend moved"
                );
            }
        }
        assert_eq!(moved, counts[2]);
        // Add a fourth: it takes about a quarter, from everyone.
        let four = eps(&[
            "10.0.0.1:4317",
            "10.0.0.2:4317",
            "10.0.0.3:4317",
            "10.0.0.4:4317",
        ]);
        let r4 = Ring::new(&four);
        let moved = keys
            .iter()
            .filter(|k| three[r3.backend(k)] != four[r4.backend(k)])
            .count();
        assert!(
            moved < keys.len() * 35 / 100,
            "{moved} of {} moved",
            keys.len()
        );
        for k in keys
            .iter()
            .filter(|k| three[r3.backend(k)] != four[r4.backend(k)])
        {
            assert_eq!(four[r4.backend(k)], "10.0.0.4:4317");
        }
    }

    #[test]
    fn points_sit_where_the_collectors_ring_puts_them() {
        // One backend: its 100 points at CRC32(endpoint ‖ i as LE u32) mod 36000.
        let r = Ring::new(&eps(&["gateway-0.gateway:4317"]));
        let mut want: Vec<u32> = (0..100u32)
            .map(|i| {
                let mut b = b"gateway-0.gateway:4317".to_vec();
                b.extend_from_slice(&i.to_le_bytes());
                crc32fast::hash(&b) % 36_000
            })
            .collect();
        want.sort_unstable();
        want.dedup();
        let got: Vec<u32> = r.points.iter().map(|p| p.0).collect();
        assert_eq!(got.len(), 100);
        assert!(
            want.iter().all(|w| got.contains(w)),
            "positions differ from the formula"
        );
        // A key goes to the first point at or after CRC32(trace id) mod 36000.
        let key = Key::Trace([7; 16]);
        let pos = crc32fast::hash(&[7; 16]) % 36_000;
        let two = Ring::new(&eps(&["a:1", "b:1"]));
        let first = two
            .points
            .iter()
            .find(|p| p.0 >= pos)
            .unwrap_or(&two.points[0]);
        assert_eq!(two.backend(&key), first.1 as usize);
        assert!(Ring::default().is_empty());
    }
}
