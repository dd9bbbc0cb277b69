package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/coder/websocket"
)

// wsImpl accepts gqlgen websocket connections on coder/websocket (gqlgen's
// own adapter, plus keep-alive). Every KeepAlive it sends a websocket-level
// ping frame: every websocket library answers those by itself (browsers,
// gorilla/websocket and so genqlient's client, which ignore the GraphQL
// protocol's own ping messages), so intermediaries see traffic both ways. A
// missing pong is tolerated: a client is dropped only when the TCP
// connection fails, never for not answering.
type wsImpl struct {
	accept    websocket.AcceptOptions
	keepAlive time.Duration
	// unfinished bounds the operations of one connection not yet finished
	// (see wsConn.admit); 0 = unbounded.
	unfinished int
}

var _ transport.WebsocketImplementation = wsImpl{}

func (i wsImpl) Accept(w http.ResponseWriter, r *http.Request, o transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	for k, vs := range o.ResponseHeader {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	opts := i.accept
	opts.Subprotocols = slices.Clone(opts.Subprotocols)
	for _, p := range o.Subprotocols {
		if !slices.Contains(opts.Subprotocols, p) {
			opts.Subprotocols = append(opts.Subprotocols, p)
		}
	}
	c, err := websocket.Accept(w, r, &opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	conn := &wsConn{c: c, stop: cancel, done: ctx.Done()}
	if i.unfinished > 0 {
		conn.slots = make(chan struct{}, i.unfinished)
		conn.unfinished = map[string]int{}
	}
	if s, ok := r.Context().Value(wsSessionKey{}).(*wsSession); ok {
		s.accepted(conn)
	}
	if i.keepAlive > 0 {
		go conn.pinger(ctx, i.keepAlive)
	}
	return conn, nil
}

// wsSession hands the connection Accept made back to serveGraphQL, which
// closes it once gqlgen's transport returned: gqlgen stops reading a
// connection on paths that do not close it (its init returns without a
// word on a connection_init payload it cannot decode), and a connection
// nobody reads would hold its descriptor and pinger forever.
type wsSession struct {
	mu   sync.Mutex
	conn *wsConn
	// tls is the upgrade's TLS state (nil: plain HTTP), for the
	// connection to verify its client certificate again.
	tls *tls.ConnectionState
}

// closeUnauthorized closes the session's connection with 4401 and msg.
func (s *wsSession) closeUnauthorized(msg string) {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		_ = c.WriteClose(closeUnauthorized, msg)
	}
}

type wsSessionKey struct{}

func withWSSession(ctx context.Context) (context.Context, *wsSession) {
	s := &wsSession{}
	return context.WithValue(ctx, wsSessionKey{}, s), s
}

func (s *wsSession) accepted(c *wsConn) {
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
}

// end closes the connection (a no-op when gqlgen closed it already).
func (s *wsSession) end() {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

type wsConn struct {
	c    *websocket.Conn
	stop context.CancelFunc
	done <-chan struct{} // closed by stop

	// slots holds a token per unfinished operation (nil: unbounded); the
	// read loop takes one for each operation it starts and waits while
	// none is free. unfinished counts, per id, the operations the server
	// has not ended yet (an id may be reused once its client stopped it).
	slots      chan struct{}
	unfinished map[string]int

	mu       sync.Mutex
	deadline *time.Timer
	closing  bool

	// ids are the live operation ids the client started; only the read
	// loop adds (and client stops remove), the writer removes an id the
	// server completed.
	idsMu sync.Mutex
	ids   map[string]bool
}

var (
	_ transport.WebsocketConn          = (*wsConn)(nil)
	_ transport.WebsocketReadLimiter   = (*wsConn)(nil)
	_ transport.WebsocketReadDeadliner = (*wsConn)(nil)
)

// pinger sends a ping frame every interval until the connection closes.
// Ping waits for the pong (read by the transport's read loop) at most one
// interval, and its failure is ignored.
func (c *wsConn) pinger(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, every)
			_ = c.c.Ping(pctx)
			cancel()
		}
	}
}

func (c *wsConn) NextReader() (int, io.Reader, error) {
	typ, data, err := c.c.Read(context.Background())
	if err != nil {
		switch websocket.CloseStatus(err) {
		case websocket.StatusNormalClosure, websocket.StatusNoStatusRcvd, websocket.StatusGoingAway:
			return int(typ), nil, transport.ErrWebsocketClosed
		}
		return int(typ), nil, err
	}
	if typ != websocket.MessageText {
		// Neither subprotocol sends binary frames, and gqlgen would decode
		// one unchecked: refuse it rather than let it past inspect.
		_ = c.WriteClose(closeBadRequest, "binary frames are not part of the protocol: send text frames")
		return int(typ), nil, errWSProtocol
	}
	if err := c.inspect(data); err != nil {
		return int(typ), nil, err
	}
	return int(typ), bytes.NewReader(data), nil
}

// Close codes of the protocol checks (graphql-transport-ws).
const (
	closeBadRequest    = 4400
	closeDuplicateID   = 4409
	maxCloseReasonSize = 100
)

var errWSProtocol = errors.New("websocket protocol violation")

// inspect enforces what gqlgen does not: a connection_init payload must be
// a JSON object (gqlgen neither acks nor closes otherwise, leaking the
// connection), and an operation id may not be reused while its operation
// runs (gqlgen would overwrite it, and the first could never be stopped).
// A violation closes the connection (4400, 4409) and ends the read loop.
func (c *wsConn) inspect(data []byte) error {
	var m struct {
		Type    string          `json:"type"`
		ID      string          `json:"id"`
		Payload json.RawMessage `json:"payload"`
	}
	if !json.Valid(data) {
		return nil // gqlgen answers invalid JSON itself
	}
	_ = json.Unmarshal(data, &m) // valid JSON of another shape leaves m empty
	switch m.Type {
	case "connection_init":
		if p := bytes.TrimSpace(m.Payload); len(p) > 0 && p[0] != '{' && !bytes.Equal(p, []byte("null")) {
			_ = c.WriteClose(closeBadRequest, "connection_init payload must be a JSON object")
			return errWSProtocol
		}
	case "subscribe", "start":
		c.idsMu.Lock()
		dup := c.ids[m.ID]
		if !dup {
			if c.ids == nil {
				c.ids = map[string]bool{}
			}
			c.ids[m.ID] = true
		}
		c.idsMu.Unlock()
		if dup {
			reason := "Subscriber for " + m.ID + " already exists"
			_ = c.WriteClose(closeDuplicateID, reason[:min(len(reason), maxCloseReasonSize)])
			return errWSProtocol
		}
		return c.admit(m.ID)
	case "complete", "stop":
		c.forget(m.ID)
	}
	return nil
}

func (c *wsConn) forget(id string) {
	c.idsMu.Lock()
	delete(c.ids, id)
	c.idsMu.Unlock()
}

// admit takes a slot for operation id before gqlgen starts it (a goroutine
// each, refused ones included, which then wait to write their answer). With
// every slot taken the read loop waits, reading nothing more, until an
// operation ends: a client that sends without reading stalls itself
// instead of growing the server's goroutines and buffered responses.
func (c *wsConn) admit(id string) error {
	if c.slots == nil {
		return nil
	}
	select {
	case c.slots <- struct{}{}:
	case <-c.done:
		return transport.ErrWebsocketClosed
	}
	c.idsMu.Lock()
	c.unfinished[id]++
	c.idsMu.Unlock()
	return nil
}

// finished frees the slot of an operation the server ended (its complete
// or error message was written); an id ended twice (an error, then a
// complete) frees one slot.
func (c *wsConn) finished(id string) {
	if c.slots == nil {
		return
	}
	c.idsMu.Lock()
	n := c.unfinished[id]
	if n > 1 {
		c.unfinished[id] = n - 1
	} else {
		delete(c.unfinished, id)
	}
	c.idsMu.Unlock()
	if n > 0 {
		<-c.slots
	}
}

func (c *wsConn) WriteJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// gqlgen's messages end with their type: a complete or error ends the
	// operation, and its id may be used again.
	if bytes.HasSuffix(b, []byte(`"type":"complete"}`)) || bytes.HasSuffix(b, []byte(`"type":"error"}`)) {
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(b, &m) == nil {
			c.forget(m.ID)
			// The slot is freed once this last write is done: until then
			// the operation's goroutine and its answer are still held.
			defer c.finished(m.ID)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.c.Write(ctx, websocket.MessageText, b)
}

// WriteClose starts the close handshake in the background: coder/websocket
// waits up to 5s for the peer's close frame, which must not stall the
// transport's teardown.
func (c *wsConn) WriteClose(code int, msg string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopDeadlineLocked()
	if c.closing {
		return nil
	}
	c.closing = true
	c.stop()
	go func() { _ = c.c.Close(websocket.StatusCode(code), msg) }()
	return nil
}

func (c *wsConn) Close() error {
	c.mu.Lock()
	c.stopDeadlineLocked()
	closing := c.closing
	c.closing = true
	c.mu.Unlock()
	c.stop()
	if closing {
		return nil
	}
	return c.c.CloseNow()
}

func (c *wsConn) Subprotocol() string { return c.c.Subprotocol() }

func (c *wsConn) SetReadLimit(n int64) { c.c.SetReadLimit(n) }

// SetReadDeadline is used by gqlgen only for its ping/pong keep-alive, which
// this handler does not enable; it is implemented for completeness.
func (c *wsConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopDeadlineLocked()
	if t.IsZero() {
		return nil
	}
	c.deadline = time.AfterFunc(time.Until(t), func() { _ = c.c.CloseNow() })
	return nil
}

func (c *wsConn) stopDeadlineLocked() {
	if c.deadline != nil {
		c.deadline.Stop()
		c.deadline = nil
	}
}
