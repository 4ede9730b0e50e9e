//! Where lines go: appended to one buffer shared by every request, which a thread of its own
//! writes out when it fills or every [`FLUSH_EVERY`]. A request pays a short lock and the copy
//! of its line, never a system call or a thread wake-up; a slow output fills the buffer and the
//! lines beyond [`MAX_BUFFERED`] are dropped (counted) instead of stalling requests.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

/// The longest a line waits in the buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// The writer is woken before the timer from this many buffered bytes on.
const WAKE_AT: usize = 64 * 1024;
/// Lines that would grow the buffer past this are dropped.
const MAX_BUFFERED: usize = 4 * 1024 * 1024;

#[derive(Debug)]
pub struct Sink {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    buffer: Mutex<String>,
    filled: Condvar,
    dropped: Counter,
}

impl Sink {
    /// Appends to `path` (created when missing), or writes to standard output.
    pub fn open(path: Option<&Path>, dropped: Counter) -> std::io::Result<Self> {
        let output: Box<dyn Write + Send> = match path {
            Some(path) => Box::new(OpenOptions::new().create(true).append(true).open(path)?),
            None => Box::new(std::io::stdout()),
        };
        let shared = Arc::new(Shared {
            dropped,
            ..Shared::default()
        });
        let writer = shared.clone();
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write(&writer, output))?;
        Ok(Sink { shared })
    }

    /// Appends what `line` writes (one whole line).
    pub fn send(&self, line: impl FnOnce(&mut String)) {
        let Ok(mut buffer) = self.shared.buffer.lock() else {
            return;
        };
        if buffer.len() >= MAX_BUFFERED {
            drop(buffer);
            self.shared.dropped.inc();
            return;
        }
        let before = buffer.len();
        line(&mut buffer);
        if before < WAKE_AT && buffer.len() >= WAKE_AT {
            self.shared.filled.notify_one();
        }
    }
}

/// Takes the buffer when it fills or the timer runs out and writes it. Runs for the life of
/// the process; a failing output is warned about once until it works again.
fn write(shared: &Shared, mut output: Box<dyn Write + Send>) {
    let mut spare = String::new();
    let mut failing = false;
    loop {
        {
            let Ok(buffer) = shared.buffer.lock() else { return };
            let Ok((mut buffer, _)) = shared
                .filled
                .wait_timeout_while(buffer, FLUSH_EVERY, |b| b.len() < WAKE_AT)
            else {
                return;
            };
            if buffer.is_empty() {
                continue;
            }
            std::mem::swap(&mut *buffer, &mut spare);
        }
        match output.write_all(spare.as_bytes()).and_then(|()| output.flush()) {
            Ok(()) => failing = false,
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "writing the access log failed");
            }
            Err(_) => {}
        }
        spare.clear();
        // A burst's large buffer is not kept for good.
        if spare.capacity() > 4 * WAKE_AT {
            spare.shrink_to(WAKE_AT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_beyond_the_buffer_are_dropped_and_counted() {
        let dropped = Counter::default();
        let shared = Arc::new(Shared {
            dropped: dropped.clone(),
            ..Shared::default()
        });
        // No writer: nothing drains the buffer.
        let sink = Sink { shared };
        let line = "x".repeat(1023) + "\n";
        for _ in 0..MAX_BUFFERED / 1024 + 10 {
            sink.send(|b| b.push_str(&line));
        }
        assert_eq!(dropped.get(), 10);
    }
}
