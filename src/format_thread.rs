//! Long outputs made on two threads: this one reads and fills batches, handing them over in
//! order; a second thread turns each into text; this one writes the texts to the output in the
//! same order. Batches and texts come back to be used again, and at most four batches wait, so
//! memory stays bounded however long the output (`trace`'s listing, `export`'s events).

use std::io::{self, Write};
use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender};

/// The reading side: batches handed over, texts written.
pub struct Handover<'w, B, T> {
    w: &'w mut dyn Write,
    to_format: SyncSender<(B, T)>,
    formatted: Receiver<(B, T)>,
    spare_batches: Vec<B>,
    spare_texts: Vec<T>,
    /// Batches handed over, their texts not written yet.
    pending: usize,
}

impl<B: Default, T: Default + AsRef<[u8]>> Handover<'_, B, T> {
    /// A batch to fill: one handed back (as it was written: the caller empties it), or a new
    /// one.
    pub fn batch(&mut self) -> B {
        self.spare_batches.pop().unwrap_or_default()
    }

    /// Hand `batch` over, and write the texts made since.
    pub fn send(&mut self, batch: B) -> io::Result<()> {
        let text = self.spare_texts.pop().unwrap_or_default();
        // (the second thread only stops early when this side has gone)
        let _ = self.to_format.send((batch, text));
        self.pending += 1;
        while let Ok((batch, text)) = self.formatted.try_recv() {
            self.pending -= 1;
            self.w.write_all(text.as_ref())?;
            self.spare_batches.push(batch);
            self.spare_texts.push(text);
        }
        Ok(())
    }
}

/// Run `read`, which hands its batches over through the [`Handover`] it is given; on a second
/// thread `format` writes each batch's text into a text used before (`format` empties it
/// first); the texts are written to `w` in the order of their batches.
pub fn write_formatted<B, T>(
    w: &mut dyn Write,
    format: impl Fn(&B, &mut T) + Send,
    read: impl FnOnce(&mut Handover<'_, B, T>) -> io::Result<()>,
) -> io::Result<()>
where
    B: Default + Send,
    T: Default + AsRef<[u8]> + Send,
{
    std::thread::scope(|scope| {
        let (to_format, batches) = sync_channel::<(B, T)>(4);
        let (to_write, formatted) = channel::<(B, T)>();
        scope.spawn(move || {
            for (batch, mut text) in batches {
                format(&batch, &mut text);
                if to_write.send((batch, text)).is_err() {
                    return;
                }
            }
        });
        let mut handover = Handover {
            w,
            to_format,
            formatted,
            spare_batches: Vec::new(),
            spare_texts: Vec::new(),
            pending: 0,
        };
        read(&mut handover)?;
        let Handover {
            w,
            to_format,
            formatted,
            mut pending,
            ..
        } = handover;
        drop(to_format);
        while pending > 0 {
            match formatted.recv() {
                Ok((_, text)) => {
                    pending -= 1;
                    w.write_all(text.as_ref())?;
                }
                Err(_) => break,
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts come out in the order of their batches, whatever the second thread's pace, with
    /// batches handed back emptied by the reader before use.
    #[test]
    fn texts_are_written_in_the_order_of_their_batches() {
        let mut out = Vec::new();
        write_formatted(
            &mut out,
            |batch: &Vec<u32>, text: &mut String| {
                text.clear();
                for n in batch {
                    text.push_str(&format!("{n},"));
                }
            },
            |h| {
                for start in (0..10_000u32).step_by(7) {
                    let mut batch = h.batch();
                    batch.clear();
                    batch.extend(start..(start + 7).min(10_000));
                    h.send(batch)?;
                }
                Ok(())
            },
        )
        .unwrap();
        let want: String = (0..10_000).map(|n| format!("{n},")).collect();
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
