//! Any bytes as a torch.profiler trace: the streaming reader errors or reads, never panics
//! or runs away; reading in chunks of any size (values cut anywhere) gives what one chunk
//! gives, the same trace or the same error at the same place; and text that serde_json reads
//! as a trace (`traceEvents` an array of objects) is read, with as many events.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memtrack::formats::profiler_trace::scan::{self, ScanError};
use memtrack::formats::profiler_trace::source::Source;
use memtrack::model::profile::ProfileTrace;

fn read(text: &[u8], chunk: usize) -> Result<ProfileTrace, ScanError> {
    let mut source = Source::plain_in_chunks(Box::new(std::io::Cursor::new(text.to_vec())), chunk);
    scan::read(&mut source, &mut |_| {}, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&k, text)) = data.split_first() else { return };
    let whole = read(text, 1 << 20);
    let part = read(text, 1 + k as usize % 17);
    match (&whole, &part) {
        (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "chunks change the trace"),
        (Err(a), Err(b)) => assert_eq!(
            (std::mem::discriminant(a), a.offset()),
            (std::mem::discriminant(b), b.offset()),
            "chunks change the error: {a:?} / {b:?}"
        ),
        _ => panic!("chunks change success: {whole:?} / {part:?}"),
    }
    if let Ok(serde_json::Value::Object(top)) = serde_json::from_slice::<serde_json::Value>(text) {
        if let Some(serde_json::Value::Array(events)) = top.get("traceEvents") {
            if events.iter().all(|e| e.is_object()) {
                match &whole {
                    Ok(t) => assert_eq!(t.events, events.len() as u64),
                    // figures no allocator reports, or a kept field past its bound
                    Err(ScanError::BadEvent { .. } | ScanError::ItemTooLarge { .. }) => {}
                    Err(e) => panic!("serde_json reads a trace the reader refuses: {e:?}"),
                }
            }
        }
    }
});
