//! [`Tasks`]: the one `JoinSet` that owns the background tasks: each named, the
//! first to end reported, all stopped together within one deadline.
use std::future::Future;
use std::time::Duration;
use tokio::task::JoinSet;

#[derive(Default)]
pub struct Tasks {
    set: JoinSet<&'static str>,
}

impl Tasks {
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.set.spawn(async move {
            task.await;
            name
        });
    }

    /// The first task to end: before the process stops, none should (each runs
    /// until its stop token), so this is a failure to report. Pending forever if
    /// there are no tasks.
    pub async fn first_ended(&mut self) -> String {
        match self.set.join_next().await {
            Some(Ok(name)) => format!("background task '{name}' ended"),
            Some(Err(e)) if e.is_panic() => format!("a background task panicked: {e}"),
            Some(Err(e)) => format!("a background task was cancelled: {e}"),
            None => std::future::pending().await,
        }
    }

    /// Waits for the tasks (already told to stop) until `deadline`, then aborts the
    /// rest.
    pub async fn stop(mut self, deadline: Duration) {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            match tokio::time::timeout_at(until, self.set.join_next()).await {
                Ok(None) => return,
                Ok(Some(Err(e))) if e.is_panic() => tracing::error!(error = %e, "a background task panicked"),
                Ok(Some(_)) => {}
                Err(_) => {
                    tracing::warn!(
                        left = self.set.len(),
                        "background tasks still running at the shutdown deadline; aborting them"
                    );
                    self.set.shutdown().await;
                    return;
                }
            }
        }
    }

    /// Stops every task at once (crash tests).
    pub fn abort(mut self) {
        self.set.abort_all();
        self.set.detach_all();
    }
}
