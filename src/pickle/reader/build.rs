//! The containers and objects the machine builds: lists, dicts, tuples and sets from marked
//! items, and the constructions `REDUCE` may name, of which only plain data gets a value.

use super::super::literals::decimal_to_twos_complement_le;
use super::super::value::{ContainerKind, ObjectKind, Value, View};
use super::{Machine, Result, MAX_DECIMAL_DIGITS};

impl Machine<'_, '_> {
    pub(super) fn new_container(&mut self, kind: ContainerKind, items: &[Value]) -> Result<Value> {
        if let ContainerKind::Tuple = kind {
            if let Some(t) = self.doc.push_scalar_tuple(items) {
                return Ok(t);
            }
        }
        let c = self.doc.new_container(kind);
        self.extend(c, items)?;
        Ok(c)
    }

    pub(super) fn extend(&mut self, c: Value, new: &[Value]) -> Result<()> {
        self.doc
            .extend(c, new)
            .map_err(|m| self.cursor.error(m.to_string()))
    }

    /// SETITEMS / APPENDS / ADDITEMS: the values above the last MARK go straight from the
    /// stack into the container below it (no intermediate copy: every event dict of a
    /// snapshot passes here).
    pub(super) fn add_marked(&mut self, want_dict: bool) -> Result<()> {
        let Some(mark) = self.marks.pop() else {
            return self.err("MARK expected: an opcode needs a marked group but there is no MARK");
        };
        let floor = self.marks.last().copied().unwrap_or(0);
        if mark <= floor {
            return self.err("stack underflow: no container below the MARK");
        }
        if want_dict && !(self.stack.len() - mark).is_multiple_of(2) {
            return self.err("SETITEMS: odd number of items after MARK");
        }
        let target = self.items_target(self.stack[mark - 1], want_dict)?;
        let r = self.doc.extend(target, &self.stack[mark..]);
        self.stack.truncate(mark);
        r.map_err(|m| self.cursor.error(m.to_string()))
    }

    /// The dict or list that SETITEM(S)/APPEND(S) add to: the value itself, or the item
    /// collection of an opaque object (a dict or list subclass rebuilt by REDUCE).
    pub(super) fn items_target(&mut self, target: Value, want_dict: bool) -> Result<Value> {
        if (want_dict && target.is_dict()) || (!want_dict && (target.is_list() || target.is_set()))
        {
            return Ok(target);
        }
        if let Some(oid) = target.object_id() {
            let existing = self.doc.objects[oid].items;
            if existing != Value::NONE {
                return Ok(existing);
            }
            let kind = if want_dict {
                ContainerKind::Dict
            } else {
                ContainerKind::List
            };
            let c = self.doc.new_container(kind);
            self.doc.objects[oid].items = c;
            return Ok(c);
        }
        let (op, what) = if want_dict {
            ("SETITEMS", "dict")
        } else {
            ("APPENDS", "list")
        };
        self.err(format!(
            "{op} on {} where a {what} was expected",
            self.doc.type_name_with_article(target)
        ))
    }

    /// TUPLE / LIST / DICT / FROZENSET: a container of everything above the last MARK.
    pub(super) fn build_from_mark(&mut self, kind: ContainerKind) -> Result<()> {
        self.pop_mark()?;
        if matches!(kind, ContainerKind::Dict) && !self.scratch.len().is_multiple_of(2) {
            return self.err("DICT: odd number of items after MARK");
        }
        let items = std::mem::take(&mut self.scratch);
        let v = self.new_container(kind, &items);
        self.scratch = items;
        self.stack.push(v?);
        Ok(())
    }

    /// Plain-data constructions get their data value; anything else an inert object.
    pub(super) fn reduce_as(
        &mut self,
        kind: ObjectKind,
        callable: Value,
        args: Value,
    ) -> Result<Value> {
        if let View::Global { module, name } = self.doc.view(callable) {
            let args_items: Vec<Value> = self
                .doc
                .as_seq(args)
                .map(|s| s.to_vec())
                .unwrap_or_default();
            match (module, name) {
                ("collections", "defaultdict" | "OrderedDict") => {
                    // The items follow through SETITEMS; the default factory is not data.
                    return Ok(self.doc.new_container(ContainerKind::Dict));
                }
                ("builtins" | "__builtin__", "set" | "frozenset") => {
                    let items = match args_items.first() {
                        Some(v) => self.doc.as_seq(*v).map(|s| s.to_vec()).unwrap_or_default(),
                        None => Vec::new(),
                    };
                    return self.new_container(ContainerKind::Set, &items);
                }
                ("builtins" | "__builtin__", "list") if args_items.is_empty() => {
                    return Ok(self.doc.new_container(ContainerKind::List));
                }
                ("builtins" | "__builtin__", "dict") if args_items.is_empty() => {
                    return Ok(self.doc.new_container(ContainerKind::Dict));
                }
                ("builtins" | "__builtin__", "bytearray" | "bytes") => {
                    if let Some(b) = args_items.first().and_then(|v| match self.doc.view(*v) {
                        View::Bytes(b) => Some(b.to_vec()),
                        _ => None,
                    }) {
                        return Ok(self.doc.push_bytes(&b));
                    }
                    if args_items.is_empty() {
                        return Ok(self.doc.push_bytes(&[]));
                    }
                }
                ("_codecs", "encode") => {
                    // protocol 2 writes bytes as _codecs.encode(text, 'latin1')
                    if let [text, enc] = args_items[..] {
                        if let (Some(t), Some("latin1" | "latin-1")) =
                            (self.doc.as_str(text), self.doc.as_str(enc))
                        {
                            let b: Option<Vec<u8>> =
                                t.chars().map(|c| u8::try_from(c as u32).ok()).collect();
                            if let Some(b) = b {
                                return Ok(self.doc.push_bytes(&b));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(self.doc.object(kind, callable, args))
    }

    /// An int too wide for i64, from protocol 0 decimal text.
    pub(super) fn big_decimal(&mut self, text: &str) -> Result<Value> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return self.err("INT/LONG: not a decimal number");
        }
        if digits.len() > MAX_DECIMAL_DIGITS {
            return self.err(format!("INT/LONG: more than {MAX_DECIMAL_DIGITS} digits"));
        }
        Ok(self
            .doc
            .int_from_le(&decimal_to_twos_complement_le(negative, digits)))
    }
}
