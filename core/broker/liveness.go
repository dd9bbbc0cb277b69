package broker

import (
	"context"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// DefaultSilenceTimeout is WORKER_SILENCE_TIMEOUT: how long a keepalive
// worker's session may stay silent (no result, heartbeat or readiness
// message) before the broker ends it and re-dispatches its stages as for a
// dead worker. The worker is asked to send something every third of it.
const DefaultSilenceTimeout = 10 * time.Second

// streamCutKey carries a request's stream cuts (withStreamAbort).
type streamCutKey struct{}

// streamCut cuts one request's stream from the handler's side. Only a
// deadline reaches into the transport: cancelling a context does not
// unblock a stream's Receive, and the handler's own context ends only when
// the peer does.
type streamCut struct {
	rc     *http.ResponseController
	mu     sync.Mutex
	served bool
}

// abort cuts the stream at once: its read and write deadlines are set in
// the past, so a Receive blocked on a silent peer and a Send blocked on a
// full flow-control window both return an error.
func (c *streamCut) abort() { c.cut(true) }

// endReads ends only the reading: a blocked Receive returns an error, and
// the handler can still send what it has (acks, its final status).
func (c *streamCut) endReads() { c.cut(false) }

// cut sets the deadlines in the past, unless the handler has returned: the
// server then frees the response writer (HTTP/2 pools its state for the
// next stream), so a late deadline would dereference nil or cut an
// unrelated stream.
func (c *streamCut) cut(writes bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.served {
		return
	}
	past := time.Unix(1, 0)
	_ = c.rc.SetReadDeadline(past)
	if writes {
		_ = c.rc.SetWriteDeadline(past)
	}
}

// withStreamAbort gives each request's context its streamCut.
func withStreamAbort(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &streamCut{rc: http.NewResponseController(w)}
		defer func() {
			c.mu.Lock()
			c.served = true
			c.mu.Unlock()
		}()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), streamCutKey{}, c)))
	})
}

// streamCutOf is the streamCut withStreamAbort put in ctx (nil when the
// handler is mounted without it).
func streamCutOf(ctx context.Context) *streamCut {
	c, _ := ctx.Value(streamCutKey{}).(*streamCut)
	return c
}

// keepaliveEvery is the cadence a keepalive worker is asked to send at: a
// third of the silence timeout, so two lost beats do not end a session.
func keepaliveEvery(silence time.Duration) time.Duration { return silence / 3 }

// handlingMessage is what a session's heard holds while the broker handles
// a message of its worker (silenceWatch).
const handlingMessage = math.MaxInt64

// silenceWatch ends a session whose worker has gone silent: heard is
// stamped (UnixNano) each time the broker has handled a message and listens
// again, and holds handlingMessage while it handles one (writing a
// redelivered result on a slow database, say): the broker's own time is
// never counted as the worker's silence. When the broker has listened for
// timeout and heard nothing, it logs once and aborts the stream, which ends
// the session (its waiting stages are re-dispatched to another worker or
// wait for this one to reconnect, as for a vanished worker). It returns
// when ctx ends.
func silenceWatch(ctx context.Context, heard *atomic.Int64, timeout time.Duration, abort func(), log zerolog.Logger) {
	tick := time.NewTicker(max(timeout/8, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			at := heard.Load()
			if at == handlingMessage {
				continue
			}
			quiet := now.Sub(time.Unix(0, at))
			if quiet < timeout || ctx.Err() != nil {
				continue
			}
			log.Warn().Dur("silent_for", quiet).Dur("timeout", timeout).
				Msg("worker silent past WORKER_SILENCE_TIMEOUT; ending its session (its stages are re-dispatched)")
			abort()
			return
		}
	}
}
