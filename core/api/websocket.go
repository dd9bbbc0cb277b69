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
	"strconv"
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
	// closeCode and closeMsg are a close asked for before the connection
	// was accepted (Drain during the handshake): accepted applies it.
	closeCode int
	closeMsg  string
}

// closeUnauthorized closes the session's connection with 4401 and msg.
func (s *wsSession) closeUnauthorized(msg string) { s.closeWith(closeUnauthorized, msg) }

// closeWith closes the session's connection with code and msg, at once or,
// while the handshake is still under way, as soon as it is accepted.
func (s *wsSession) closeWith(code int, msg string) {
	s.mu.Lock()
	c := s.conn
	if c == nil {
		s.closeCode, s.closeMsg = code, msg
	}
	s.mu.Unlock()
	if c != nil {
		_ = c.WriteClose(code, msg)
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
	code, msg := s.closeCode, s.closeMsg
	s.mu.Unlock()
	if code != 0 {
		_ = c.WriteClose(code, msg)
	}
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
	// none is free.
	slots chan struct{}

	mu       sync.Mutex
	deadline *time.Timer
	closing  bool

	// The client's operation ids are never shown to gqlgen: each operation
	// the client starts gets an id of the connection's own, never used
	// again, and the messages are translated both ways (see ops). idsMu
	// guards seq, live and ops.
	idsMu sync.Mutex
	seq   uint64
	// live maps a client id in use to its operation's own id: from the
	// client's subscribe until the client stops it or the server ends it.
	live map[string]string
	// ops are the operations the server has not ended yet, by their own
	// id.
	ops map[string]wsOp
}

// wsOp is one operation gqlgen runs: the id its client gave it, and whether
// it holds a slot.
type wsOp struct {
	client string
	slot   bool
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
	data, err = c.inspect(data)
	if err != nil {
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
// It returns the message gqlgen is to read: a subscribe or a complete with
// the operation's own id in place of the client's (see start).
func (c *wsConn) inspect(data []byte) ([]byte, error) {
	var m wsMessage
	if !json.Valid(data) {
		return data, nil // gqlgen answers invalid JSON itself
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return data, nil //nolint:nilerr // valid JSON of another shape: gqlgen refuses it itself
	}
	switch m.Type {
	case "connection_init":
		if p := bytes.TrimSpace(m.Payload); len(p) > 0 && p[0] != '{' && !bytes.Equal(p, []byte("null")) {
			_ = c.WriteClose(closeBadRequest, "connection_init payload must be a JSON object")
			return nil, errWSProtocol
		}
	case "subscribe", "start":
		own, err := c.start(m.ID)
		if err != nil {
			return nil, err
		}
		m.ID = own
		return json.Marshal(m)
	case "complete", "stop":
		m.ID = c.stopped(m.ID)
		return json.Marshal(m)
	}
	return data, nil
}

// wsMessage is a client message of either subprotocol.
type wsMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// start gives the operation the client starts as id its own id, after
// taking a slot for it (admit). An id in use closes the connection (4409).
//
// gqlgen keys its running operations by id and forgets one by its id once
// it wrote its complete: an operation the client started again under the
// same id in between (after stopping the first, or after its error) was
// forgotten instead, so the client could never stop it and it held its
// slot until the connection closed. Under ids never used twice, no
// operation's end touches another's.
func (c *wsConn) start(client string) (string, error) {
	c.idsMu.Lock()
	_, dup := c.live[client]
	c.idsMu.Unlock()
	if dup {
		reason := "Subscriber for " + client + " already exists"
		_ = c.WriteClose(closeDuplicateID, reason[:min(len(reason), maxCloseReasonSize)])
		return "", errWSProtocol
	}
	if err := c.admit(); err != nil {
		return "", err
	}
	c.idsMu.Lock()
	defer c.idsMu.Unlock()
	if c.live == nil {
		c.live, c.ops = map[string]string{}, map[string]wsOp{}
	}
	c.seq++
	own := strconv.FormatUint(c.seq, 10)
	c.live[client] = own
	c.ops[own] = wsOp{client: client, slot: c.slots != nil}
	return own, nil
}

// stopped frees client id for reuse and returns the own id of the
// operation the client stops ("" when none runs under it: gqlgen then stops
// nothing). The operation holds its slot until the server ends it.
func (c *wsConn) stopped(client string) string {
	c.idsMu.Lock()
	defer c.idsMu.Unlock()
	own := c.live[client]
	delete(c.live, client)
	return own
}

// admit takes a slot for an operation before gqlgen starts it (a goroutine
// each, refused ones included, which then wait to write their answer). With
// every slot taken the read loop waits, reading nothing more, until an
// operation ends: a client that sends without reading stalls itself
// instead of growing the server's goroutines and buffered responses.
func (c *wsConn) admit() error {
	if c.slots == nil {
		return nil
	}
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-c.done:
		return transport.ErrWebsocketClosed
	}
}

// opMessageEnd is how gqlgen's messages of an operation end (both
// subprotocols marshal payload, id, then type); ending reports the types
// that end it.
var opMessageEnd = []struct {
	suffix []byte
	ending bool
}{
	{[]byte(`","type":"next"}`), false},
	{[]byte(`","type":"data"}`), false},
	{[]byte(`","type":"complete"}`), true},
	{[]byte(`","type":"error"}`), true},
}

// outgoing translates a message gqlgen writes back to the client's id. It
// returns nil for one the client must not see: a message of an operation
// the server already ended (gqlgen writes a complete after an error), or of
// one the client stopped whose id it has since given to another operation.
// A message that ends an operation frees its id and its slot (release,
// called once the message is written: until then the operation's goroutine
// and its answer are still held).
func (c *wsConn) outgoing(b []byte) (out []byte, release func()) {
	for _, e := range opMessageEnd {
		if !bytes.HasSuffix(b, e.suffix) {
			continue
		}
		head := b[:len(b)-len(e.suffix)]
		at := bytes.LastIndex(head, []byte(`"id":"`))
		if at < 0 {
			return b, nil
		}
		own := string(head[at+len(`"id":"`):])
		c.idsMu.Lock()
		op, ok := c.ops[own]
		current := ok && (c.live[op.client] == own || c.live[op.client] == "")
		if ok && e.ending {
			delete(c.ops, own)
			if c.live[op.client] == own {
				delete(c.live, op.client)
			}
			if op.slot {
				release = func() { <-c.slots }
			}
		}
		c.idsMu.Unlock()
		if !current {
			return nil, release
		}
		client, _ := json.Marshal(op.client)
		out = make([]byte, 0, len(b)+len(client))
		out = append(append(append(out, head[:at]...), `"id":`...), client...)
		return append(out, b[len(head)+1:]...), release // the suffix less its opening quote
	}
	return b, nil
}

func (c *wsConn) WriteJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b, release := c.outgoing(b)
	if release != nil {
		defer release()
	}
	if b == nil {
		return nil
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
