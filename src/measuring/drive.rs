//! One run's life, the same for `bench sweep`, `bench soak` and `bench load`: open the run (`open`),
//! drive its work until it ends or a signal stops it (`drive`), then settle it (`settle`) before
//! the verb closes it its own way (its run.json status, messages and exit code).
//!
//! The work runs as its own task and the signal watcher stays on the caller's thread: an interrupt
//! is heard however busy the work is, at any point of the run (preflight and calibration
//! included), and every record already appended stays on disk (records are appended with one
//! write and an fsync each, so stopping the work between two awaits never leaves half a record).
//! Settling is what every verb owes the user alike: slot files a warm cell left on the server's
//! disk are removed, the run's lock is released, and a new run that measured nothing is removed
//! whole, so a typo in --server costs nothing and leaves no directory to clean up.

use std::future::Future;

use super::Journal;
use crate::exit::{self, Failure};
use crate::progress::Progress;
use ttft_results::store::{self, RunLock};

/// How a run's work ended.
pub(crate) enum Ended<T> {
    /// The work returned: finished, or stopped for a reason of its own (a server gone).
    Done(T),
    /// Ctrl-C or SIGTERM stopped it.
    Signal,
    /// It failed (the server unreachable, a write refused, ...).
    Failed(Failure),
}

/// How a signal stops the work.
pub(crate) enum OnSignal {
    /// At once: the work's records are whole at every await.
    Abort,
    /// By asking it to finish what is in flight (load's writer appends the requests that
    /// finished); work that does not stop within the grace is aborted.
    Ask(tokio::sync::watch::Sender<bool>),
}

/// Runs `work` as its own task until it ends or a signal stops it. `verb` names the run in the
/// message of a work task that panicked.
pub(crate) async fn drive<T: Send + 'static>(
    verb: &str,
    work: impl Future<Output = Result<T, Failure>> + Send + 'static,
    on_signal: OnSignal,
) -> Ended<T> {
    let mut task = tokio::spawn(work);
    tokio::select! {
        joined = &mut task => match joined {
            Ok(Ok(done)) => Ended::Done(done),
            Ok(Err(failure)) => Ended::Failed(failure),
            Err(e) => Ended::Failed(Failure::internal(format!("the {verb} stopped unexpectedly: {e}"))),
        },
        _ = super::shutdown_signal() => {
            match on_signal {
                OnSignal::Abort => task.abort(),
                OnSignal::Ask(stop) => {
                    let _ = stop.send(true);
                }
            }
            if tokio::time::timeout(super::ABORT_GRACE, &mut task).await.is_err() {
                task.abort();
            }
            Ended::Signal
        }
    }
}

/// What became of a run once its work ended.
pub(crate) enum Settled<T> {
    /// The run stays: the verb closes it (run.json's status, its messages, its exit code).
    Kept(Ended<T>),
    /// A new run that measured nothing was removed; the verb exits with this.
    Removed(Result<exit::Outcome, Failure>),
}

/// Closes the progress and gives the terminal back from the live view (before anything below
/// speaks), removes slot files left on the server's disk (said on the progress), releases the
/// run's lock, and removes a new run that measured nothing. A run that was resumed, holds a
/// record, or whose work ran to its end is kept.
pub(crate) fn settle<T>(
    ended: Ended<T>,
    journal: &Journal,
    resumed: bool,
    lock: RunLock,
    progress: &Progress,
    view: Option<&mut crate::live::View>,
) -> Settled<T> {
    progress.finish();
    if let Some(view) = view {
        view.finish();
    }
    if let Some(line) = super::slot_files::remove_leftovers().line() {
        progress.note(&line);
    }
    drop(lock);
    let records = journal.dir().join(store::MEASUREMENTS_FILE);
    let empty = std::fs::metadata(records).map_or(true, |m| m.len() == 0);
    if resumed || !empty || matches!(ended, Ended::Done(_)) {
        return Settled::Kept(ended);
    }
    let _ = std::fs::remove_dir_all(journal.dir());
    Settled::Removed(match ended {
        Ended::Failed(failure) => Err(failure),
        _ => {
            eprintln!("interrupted before anything was measured; nothing was kept");
            Ok(exit::Outcome::Interrupted)
        }
    })
}
