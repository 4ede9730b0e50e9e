//! Notifications of changes to the files and folders Turna serves from, so an edited file is
//! served at once rather than at the next poll (`turna local` and the static layer).
//!
//! A named file is watched through its folder, so editors that save by writing a new file and
//! renaming it over the old one are seen too; a named folder is watched recursively. A writer
//! is given a moment to finish: a change is reported once no event came for [`QUIET`], or
//! [`AFTER_CLOSE`] after the last writer closed a file, renamed or removed one, and at the
//! latest [`MAX_WAIT`] after the first event.
//!
//! Where notifications cannot be had (inotify watches exhausted, a file system without them),
//! [`FileWatch::changed`] never returns and the caller's poll is all there is; that is logged.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind};
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Quiet time after an event that may be followed by more writes to the same file.
pub const QUIET: Duration = Duration::from_millis(10);
/// Quiet time after an event that ends a write: a close after writing, a rename, a removal.
pub const AFTER_CLOSE: Duration = Duration::from_millis(1);
/// The longest a change waits while events keep coming.
pub const MAX_WAIT: Duration = Duration::from_millis(100);

/// What one event says about the writes in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// More may come: data written, a file created.
    Writing,
    /// A write ended: a file closed after writing, renamed, removed; or events were lost.
    Finished,
}

/// Watches files and folders for changes.
pub struct FileWatch {
    events: mpsc::UnboundedReceiver<Step>,
    /// Dropping it stops the notifications.
    _watcher: Option<notify::RecommendedWatcher>,
}

impl std::fmt::Debug for FileWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWatch")
            .field("watching", &self._watcher.is_some())
            .finish()
    }
}

impl FileWatch {
    /// Starts watching `paths` (files or folders). Fails soft: without notifications it logs a
    /// warning and [`FileWatch::changed`] waits forever.
    pub fn new(paths: &[PathBuf]) -> FileWatch {
        let (sender, events) = mpsc::unbounded_channel();
        let watcher = match watch(paths, sender) {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::warn!(%error, "no file notifications; changes are found by polling only");
                None
            }
        };
        FileWatch {
            events,
            _watcher: watcher,
        }
    }

    /// Whether notifications are on.
    pub fn is_watching(&self) -> bool {
        self._watcher.is_some()
    }

    /// Returns once the files changed and the writes settled (see the module's text).
    pub async fn changed(&mut self) {
        let Some(mut step) = self.events.recv().await else {
            return std::future::pending().await;
        };
        let latest = Instant::now() + MAX_WAIT;
        loop {
            let quiet = match step {
                Step::Writing => QUIET,
                Step::Finished => AFTER_CLOSE,
            };
            let until = (Instant::now() + quiet).min(latest);
            match tokio::time::timeout_at(until, self.events.recv()).await {
                Ok(Some(next)) => step = next,
                // The watcher is gone: report what was seen.
                Ok(None) | Err(_) => return,
            }
        }
    }
}

/// Watches each folder of `paths` recursively and the folder of each file, passing on the
/// events that concern them.
fn watch(paths: &[PathBuf], sender: mpsc::UnboundedSender<Step>) -> notify::Result<notify::RecommendedWatcher> {
    let mut folders = BTreeSet::new();
    let mut files = BTreeSet::new();
    let mut parents = BTreeSet::new();
    for path in paths {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        if path.is_dir() {
            folders.insert(path);
        } else {
            let parent = path.parent().map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
            parents.insert(parent);
            files.insert(path);
        }
    }
    let relevant = {
        let folders = folders.clone();
        move |path: &Path| files.contains(path) || folders.iter().any(|f| path.starts_with(f))
    };
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let step = match event {
            Ok(event) if event.need_rescan() => Some(Step::Finished),
            Ok(event) if event.paths.iter().any(|p| relevant(p)) => step(&event.kind),
            Ok(_) => None,
            Err(error) => {
                tracing::warn!(%error, "file notification error");
                Some(Step::Finished)
            }
        };
        if let Some(step) = step {
            // Err: the FileWatch is gone, and so is its interest.
            let _ = sender.send(step);
        }
    })?;
    for folder in &folders {
        watcher.watch(folder, RecursiveMode::Recursive)?;
    }
    for parent in parents.iter().filter(|p| !folders.iter().any(|f| p.starts_with(f))) {
        watcher.watch(parent, RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// What an event of `kind` says; `None` for reads and opens, which change nothing.
fn step(kind: &EventKind) -> Option<Step> {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Some(Step::Finished),
        EventKind::Access(_) => None,
        EventKind::Modify(ModifyKind::Name(_)) | EventKind::Remove(_) => Some(Step::Finished),
        EventKind::Create(CreateKind::Folder) => Some(Step::Finished),
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Any | EventKind::Other => Some(Step::Writing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn within(watch: &mut FileWatch, limit: Duration) -> bool {
        tokio::time::timeout(limit, watch.changed()).await.is_ok()
    }

    #[tokio::test]
    async fn reports_writes_renames_and_new_files_of_a_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.yaml"), "a").expect("write");
        let mut watch = FileWatch::new(&[dir.path().into()]);
        assert!(watch.is_watching());
        assert!(
            !within(&mut watch, Duration::from_millis(50)).await,
            "nothing changed yet"
        );

        std::fs::write(dir.path().join("a.yaml"), "b").expect("write");
        assert!(within(&mut watch, Duration::from_secs(2)).await, "a write");
        // Saved the way many editors do: a new file renamed over the old one.
        std::fs::write(dir.path().join(".a.yaml.swp"), "c").expect("write");
        std::fs::rename(dir.path().join(".a.yaml.swp"), dir.path().join("a.yaml")).expect("rename");
        assert!(within(&mut watch, Duration::from_secs(2)).await, "a rename");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        assert!(within(&mut watch, Duration::from_secs(2)).await, "a new folder");
        std::fs::write(dir.path().join("sub/b.yaml"), "b").expect("write");
        assert!(
            within(&mut watch, Duration::from_secs(2)).await,
            "a file in a new folder"
        );
    }

    #[tokio::test]
    async fn a_named_file_is_watched_through_its_folder_and_its_neighbours_are_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("routes.yaml");
        std::fs::write(&file, "a").expect("write");
        let mut watch = FileWatch::new(std::slice::from_ref(&file));
        std::fs::write(dir.path().join("other.yaml"), "x").expect("write");
        assert!(!within(&mut watch, Duration::from_millis(100)).await, "another file");

        let replacement = dir.path().join("routes.yaml.new");
        std::fs::write(&replacement, "b").expect("write");
        std::fs::rename(&replacement, &file).expect("rename");
        assert!(within(&mut watch, Duration::from_secs(2)).await, "replaced by a rename");
        // The watch follows the name, not the replaced file.
        std::fs::write(&file, "c").expect("write");
        assert!(
            within(&mut watch, Duration::from_secs(2)).await,
            "written after the rename"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn writes_in_progress_wait_for_quiet_but_not_longer_than_max_wait() {
        let (sender, events) = mpsc::unbounded_channel();
        let mut watch = FileWatch { events, _watcher: None };
        // A writer that keeps writing every 5 ms is reported at MAX_WAIT.
        let writer = tokio::spawn(async move {
            loop {
                if sender.send(Step::Writing).is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let started = Instant::now();
        watch.changed().await;
        assert_eq!(started.elapsed(), MAX_WAIT);
        writer.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_write_is_reported_after_a_short_quiet() {
        let (sender, events) = mpsc::unbounded_channel();
        let mut watch = FileWatch { events, _watcher: None };
        sender.send(Step::Writing).expect("send");
        sender.send(Step::Finished).expect("send");
        let started = Instant::now();
        watch.changed().await;
        assert_eq!(started.elapsed(), AFTER_CLOSE);
        sender.send(Step::Writing).expect("send");
        let started = Instant::now();
        watch.changed().await;
        assert_eq!(started.elapsed(), QUIET);
    }
}
