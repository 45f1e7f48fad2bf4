//! Bytes by category per device: the storages the agent reported (appeared, changed category
//! or size, died) and the current totals they add up to (MemTracker's `_update_snap`).

use super::fields::{Row, Storage, TOTAL};
use super::state::Replay;

impl Replay {
    pub(super) fn row(&mut self, dev: i32) -> &mut Row {
        let k = match self.curr.binary_search_by_key(&dev, |(d, _)| *d) {
            Ok(k) => k,
            Err(k) => {
                self.curr.insert(k, (dev, [0; 8]));
                k
            }
        };
        &mut self.curr[k].1
    }

    pub(super) fn drop_if_zero(&mut self, dev: i32) {
        if let Ok(k) = self.curr.binary_search_by_key(&dev, |(d, _)| *d) {
            if self.curr[k].1[TOTAL] == 0 {
                self.curr.remove(k);
            }
        }
    }

    pub(super) fn add(&mut self, key: i64, cat: i64, dev: i64, bytes: i64) {
        // a key seen again without its death reported: count the old one as gone
        if self.storages.contains_key(&key) {
            self.del(key);
        }
        let cat = (cat.clamp(0, 6)) as usize;
        let dev = dev.clamp(-1, i32::MAX as i64) as i32;
        let op = self.ops.len() as u32;
        self.log_device(dev, key, bytes);
        self.storages.insert(
            key,
            Storage {
                cat,
                dev,
                bytes,
                op,
            },
        );
        if bytes > 0 {
            let r = self.row(dev);
            r[cat] += bytes;
            r[TOTAL] += bytes;
            self.dirty = true;
        }
    }

    pub(super) fn del(&mut self, key: i64) {
        if let Some(s) = self.storages.remove(&key) {
            self.log_device(s.dev, key, 0);
            if s.bytes > 0 {
                let r = self.row(s.dev);
                r[s.cat] -= s.bytes;
                r[TOTAL] -= s.bytes;
                self.drop_if_zero(s.dev);
            }
        }
    }

    pub(super) fn recategorize(&mut self, key: i64, cat: i64) {
        let cat = (cat.clamp(0, 6)) as usize;
        let Some(s) = self.storages.get_mut(&key) else {
            return;
        };
        if s.cat == cat {
            return;
        }
        let (old, dev, bytes) = (s.cat, s.dev, s.bytes);
        s.cat = cat;
        let r = self.row(dev);
        r[old] -= bytes;
        r[cat] += bytes;
    }

    pub(super) fn resize(&mut self, key: i64, bytes: i64) {
        let Some(s) = self.storages.get_mut(&key) else {
            return;
        };
        let change = bytes - s.bytes;
        s.bytes = bytes;
        let (cat, dev) = (s.cat, s.dev);
        if change != 0 {
            // a resized storage is a new block where an allocator is modelled
            self.log_device(dev, key, 0);
            self.log_device(dev, key, bytes);
        }
        let r = self.row(dev);
        r[cat] += change;
        r[TOTAL] += change;
        if change > 0 {
            self.dirty = true;
        }
        self.drop_if_zero(dev);
    }
}

impl Replay {
    /// An estimated run's device allocation (`bytes` > 0) or free (0) of storage `key`.
    fn log_device(&mut self, dev: i32, key: i64, bytes: i64) {
        if let Some(e) = self.estimated.as_mut().filter(|_| dev >= 0) {
            e.event(self.ops.len(), key, bytes);
        }
    }
}
