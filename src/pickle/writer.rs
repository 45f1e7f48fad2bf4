//! A streaming pickle writer (protocol 4) for the files memtrack writes.
//!
//! Why not serde-pickle: its dicts are `BTreeMap`s, so key order is lost (Python dicts keep
//! it, and `show_traces` draws markers in it), and a 1M-op stats file would first be built as
//! a tree of millions of values. This writes opcodes as the caller walks its model, batches
//! dict and list items 1000 at a time as Python's pickler does, and shares repeated strings
//! (op names appear in three series) through the memo.

use std::collections::HashMap;

const BATCH: usize = 1000;

pub struct Writer {
    out: Vec<u8>,
    strings: HashMap<String, u32>,
    memo_len: u32,
    /// Per open dict or list: where its current batch starts in `out`, and how many items it
    /// holds so far.
    open: Vec<(usize, usize)>,
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            out: vec![0x80, 4],
            strings: HashMap::new(),
            memo_len: 0,
            open: Vec::new(),
        }
    }

    pub fn none(&mut self) {
        self.out.push(b'N');
    }

    pub fn bool(&mut self, b: bool) {
        self.out.push(if b { 0x88 } else { 0x89 });
    }

    pub fn int(&mut self, i: i64) {
        if (0..256).contains(&i) {
            self.out.extend([b'K', i as u8]);
        } else if (0..65536).contains(&i) {
            self.out.push(b'M');
            self.out.extend((i as u16).to_le_bytes());
        } else if let Ok(i) = i32::try_from(i) {
            self.out.push(b'J');
            self.out.extend(i.to_le_bytes());
        } else {
            self.out.extend([0x8a, 8]); // LONG1: 8 bytes of two's complement
            self.out.extend(i.to_le_bytes());
        }
    }

    pub fn float(&mut self, f: f64) {
        self.out.push(b'G');
        self.out.extend(f.to_be_bytes());
    }

    /// A string, shared through the memo when written before.
    pub fn str(&mut self, s: &str) {
        if let Some(&id) = self.strings.get(s) {
            if id < 256 {
                self.out.extend([b'h', id as u8]);
            } else {
                self.out.push(b'j');
                self.out.extend(id.to_le_bytes());
            }
            return;
        }
        if s.len() < 256 {
            self.out.extend([0x8c, s.len() as u8]);
        } else if let Ok(n) = u32::try_from(s.len()) {
            self.out.push(b'X');
            self.out.extend(n.to_le_bytes());
        } else {
            self.out.push(0x8d);
            self.out.extend((s.len() as u64).to_le_bytes());
        }
        self.out.extend(s.as_bytes());
        self.out.push(0x94); // MEMOIZE
        self.strings.insert(s.to_string(), self.memo_len);
        self.memo_len += 1;
    }

    pub fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.str(s),
            None => self.none(),
        }
    }

    pub fn opt_int(&mut self, i: Option<i64>) {
        match i {
            Some(i) => self.int(i),
            None => self.none(),
        }
    }

    /// A tuple of the last `n` values written (n <= 3).
    pub fn tuple(&mut self, n: usize) {
        match n {
            0 => self.out.push(b')'),
            1..=3 => self.out.push(0x84 + n as u8),
            _ => panic!("tuple() takes at most 3 items; write longer sequences as lists"),
        }
    }

    /// A `key: value` entry of the innermost open dict, the value written by `value`.
    pub fn entry(&mut self, key: &str, value: impl FnOnce(&mut Writer)) {
        self.str(key);
        value(self);
        self.end_entry();
    }

    pub fn begin_dict(&mut self) {
        self.out.push(b'}');
        self.open.push((self.out.len(), 0));
    }

    /// After each key and value of the innermost open dict.
    pub fn end_entry(&mut self) {
        self.end_item(b'u');
    }

    pub fn end_dict(&mut self) {
        self.close(b'u');
    }

    pub fn begin_list(&mut self) {
        self.out.push(b']');
        self.open.push((self.out.len(), 0));
    }

    /// A list of `items`, each written by `item`.
    pub fn list<T>(
        &mut self,
        items: impl IntoIterator<Item = T>,
        mut item: impl FnMut(&mut Writer, T),
    ) {
        self.begin_list();
        for x in items {
            item(self, x);
            self.end_element();
        }
        self.end_list();
    }

    /// After each item of the innermost open list.
    pub fn end_element(&mut self) {
        self.end_item(b'e');
    }

    pub fn end_list(&mut self) {
        self.close(b'e');
    }

    fn end_item(&mut self, many: u8) {
        let (start, n) = self.open.last_mut().expect("an open dict or list");
        *n += 1;
        if *n == BATCH {
            let start = *start;
            self.flush_batch(start, BATCH, many);
            *self.open.last_mut().unwrap() = (self.out.len(), 0);
        }
    }

    fn close(&mut self, many: u8) {
        let (start, n) = self.open.pop().expect("an open dict or list");
        self.flush_batch(start, n, many);
    }

    /// Python's batching: MARK items SETITEMS/APPENDS for several items, SETITEM/APPEND for
    /// one, nothing for none. The MARK goes in front of the batch once its size is known.
    fn flush_batch(&mut self, start: usize, n: usize, many: u8) {
        match n {
            0 => {}
            1 => self.out.push(if many == b'u' { b's' } else { b'a' }),
            _ => {
                self.out.insert(start, b'(');
                self.out.push(many);
            }
        }
    }

    /// The finished pickle.
    pub fn finish(mut self) -> Vec<u8> {
        assert!(self.open.is_empty(), "every dict and list is closed");
        self.out.push(b'.');
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pickle::{parse, View};

    #[test]
    fn round_trips_through_the_reader_keeping_order_and_sharing() {
        let mut w = Writer::new();
        w.begin_dict();
        w.str("z");
        w.int(-70000);
        w.end_entry();
        w.str("a");
        w.begin_list();
        for i in 0..2500 {
            w.str(if i % 2 == 0 { "even" } else { "odd" });
            w.float(i as f64);
            w.tuple(2);
            w.end_element();
        }
        w.end_list();
        w.end_entry();
        w.str("empty");
        w.begin_dict();
        w.end_dict();
        w.end_entry();
        w.str("big");
        w.int(i64::MIN);
        w.end_entry();
        w.end_dict();
        let doc = parse(&w.finish()).unwrap();
        let d = doc.as_dict(doc.root()).unwrap();
        let keys: Vec<&str> = d.iter().map(|(k, _)| doc.as_str(k).unwrap()).collect();
        assert_eq!(keys, ["z", "a", "empty", "big"]);
        assert_eq!(doc.as_int(d.get("z").unwrap()), Some(-70000));
        assert_eq!(doc.as_int(d.get("big").unwrap()), Some(i64::MIN));
        let items = doc.as_seq(d.get("a").unwrap()).unwrap();
        assert_eq!(items.len(), 2500);
        let first = doc.as_seq(items[0]).unwrap();
        let third = doc.as_seq(items[2]).unwrap();
        assert_eq!(first[0], third[0], "the repeated string is shared");
        assert_eq!(
            doc.as_f64(doc.as_seq(items[2499]).unwrap()[1]),
            Some(2499.0)
        );
        assert!(matches!(doc.view(d.get("empty").unwrap()), View::Dict(items) if items.is_empty()));
    }
}
