//! The layer's response body: the inner service's body, and what the request holds until
//! its response ends (SPEC N4): its lease, renewed by a task of its own (N5) until the
//! request's `max_duration` (N7), and the renewals of the holds its handler took (G5).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

use crate::lease::LeaseHandle;

/// A boxed error, as tower and hyper use.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error a [`LeaseBody`] ends with when its request reached its in-flight policy's
/// `max_duration` (SPEC N7): the server then closes the connection, so a streamed
/// response stops where it was (no final chunk) and a response not yet started is not
/// sent at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxDurationExceeded;

impl fmt::Display for MaxDurationExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request reached its in-flight policy's max_duration (SPEC N7)")
    }
}

impl std::error::Error for MaxDurationExceeded {}

/// Holds a request's lease (SPEC N4) and renews it every `lease / 2` while the request
/// runs (N5), firing at the deadline (N7); the holds taken on its decision are renewed by
/// tasks of their own (G5). Dropping it stops every renewal and releases the lease
/// (spawned on the tokio runtime: a `Drop` never blocks).
pub(super) struct LeaseGuard {
    pub(super) lease: LeaseHandle,
    renewal: Option<tokio::task::JoinHandle<()>>,
}

impl LeaseGuard {
    /// `None` when the request holds nothing until its end (no lease, no `settle_later`
    /// policy).
    pub(super) fn start(lease: LeaseHandle) -> Option<LeaseGuard> {
        if !lease.has_scope() {
            return None;
        }
        lease.drive_holds();
        let renewal = crate::lease::spawn_lease_renewal(lease.clone());
        Some(LeaseGuard { lease, renewal })
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(task) = self.renewal.take() {
            task.abort();
        }
        self.lease.finish_in_background();
    }
}

pin_project_lite::pin_project! {
    /// The response body of a request through the layer: the inner service's body, and
    /// the request's lease (SPEC N4), released when the body ends, fails or is dropped (a
    /// client that disconnects mid-stream). At the request's `max_duration` (N7) it ends
    /// with [`MaxDurationExceeded`], and the server closes the connection. Without a lease
    /// it is the inner body.
    pub struct LeaseBody<B> {
        #[pin]
        inner: B,
        guard: Option<LeaseGuard>,
        // The request reached its deadline before its handler answered: nothing is sent.
        cut: bool,
    }
}

impl<B: fmt::Debug> fmt::Debug for LeaseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseBody")
            .field("inner", &self.inner)
            .field("lease", &self.guard.as_ref().map(|g| &g.lease))
            .finish()
    }
}

impl<B> LeaseBody<B> {
    pub(super) fn new(inner: B, guard: Option<LeaseGuard>) -> LeaseBody<B> {
        LeaseBody {
            inner,
            guard,
            cut: false,
        }
    }

    /// A body that fails at once (SPEC N7: the response had not started at the
    /// deadline): the server sends nothing and closes the connection.
    pub(super) fn cut(inner: B) -> LeaseBody<B> {
        LeaseBody {
            inner,
            guard: None,
            cut: true,
        }
    }

    /// The inner body.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B> Body for LeaseBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.project();
        if *this.cut {
            return Poll::Ready(Some(Err(Box::new(MaxDurationExceeded))));
        }
        // SPEC N7: the renewal timer ended the request; this wakes a body waiting for its
        // next chunk too.
        if let Some(g) = this.guard.as_ref()
            && g.lease.poll_timed_out(cx).is_ready()
        {
            drop(this.guard.take());
            *this.cut = true;
            return Poll::Ready(Some(Err(Box::new(MaxDurationExceeded))));
        }
        let polled = this.inner.poll_frame(cx);
        match polled {
            Poll::Ready(None) => {
                // SPEC N4: the body is sent: the lease ends now.
                drop(this.guard.take());
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                drop(this.guard.take());
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.cut && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // A cut body has no length: a server that wrote `content-length: 0` would send
        // the head without polling it.
        if self.cut {
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}
