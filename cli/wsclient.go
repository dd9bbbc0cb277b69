package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/gorilla/websocket"
)

// WSOptions configure a WSClient.
type WSOptions struct {
	// Endpoint is the websocket URL of the GraphQL endpoint
	// (ws://host:port/graphql or wss://…).
	Endpoint string
	// Dialer dials the connection (TLS settings live on it); nil uses a
	// copy of websocket.DefaultDialer.
	Dialer *websocket.Dialer
	// Header is sent on the upgrade request (Authorization, User-Agent).
	Header http.Header
	// InitPayload is the connection_init payload (the server also reads
	// the bearer token from its Authorization key).
	InitPayload map[string]any
	// AckTimeout bounds the wait for connection_ack (default 10s).
	AckTimeout time.Duration
	// PingInterval is how often the client pings the server; a connection
	// that shows no traffic for two intervals is considered dead and is
	// re-dialled (default 15s).
	PingInterval time.Duration
	// MinBackoff and MaxBackoff bound the jittered, doubling wait between
	// reconnect attempts (defaults 100ms and 5s).
	MinBackoff, MaxBackoff time.Duration
}

// WSClient is a graphql.WebSocketClient on gorilla/websocket speaking the
// graphql-transport-ws protocol. Unlike genqlient's own client it
//
//   - reconnects with backoff when the connection drops and re-subscribes
//     every live subscription (Reconnected signals each time, so a caller
//     can re-query what it may have missed);
//   - closes each subscription's data channel exactly once, from the one
//     goroutine that sends on it, so Unsubscribe and a server "complete"
//     can race without a "close of closed channel" panic, and a consumer
//     that stops reading never strands a goroutine;
//   - makes Close idempotent: it ends every subscription, waits for every
//     goroutine it started and closes the error channel.
type WSClient struct {
	opts WSOptions

	mu      sync.Mutex // guards the fields below and serializes writes
	conn    *websocket.Conn
	subs    map[string]*wsSub
	nextID  uint64
	started bool
	closed  bool

	dead error // set when the server refused a reconnect for good

	errs        chan error
	reconnected chan struct{}
	// ctx is cancelled by Close; done is its Done channel.
	ctx        context.Context
	cancel     context.CancelFunc
	done       <-chan struct{}
	wg         sync.WaitGroup
	reconnects int
}

var _ graphql.WebSocketClient = (*WSClient)(nil)

// wsSub is one live subscription.
type wsSub struct {
	id      string
	req     *graphql.Request
	out     reflect.Value // the consumer's channel
	forward graphql.ForwardDataFunction
	// queue carries payloads from the reader to the pump; the reader closes
	// it when the server ends the subscription (complete or error).
	queue chan json.RawMessage
	// done ends the pump at once (Unsubscribe, Close).
	done     chan struct{}
	doneOnce sync.Once
}

func (s *wsSub) stop() { s.doneOnce.Do(func() { close(s.done) }) }

// NewWSClient returns a client; Start connects it.
func NewWSClient(opts WSOptions) *WSClient {
	if opts.Dialer == nil {
		d := *websocket.DefaultDialer
		opts.Dialer = &d
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = 10 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 15 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(5*time.Second, opts.MinBackoff)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &WSClient{
		opts:        opts,
		subs:        map[string]*wsSub{},
		errs:        make(chan error, 16),
		reconnected: make(chan struct{}, 1),
		ctx:         ctx,
		cancel:      cancel,
		done:        ctx.Done(),
	}
}

// The graphql-transport-ws message types.
const (
	msgConnInit  = "connection_init"
	msgConnAck   = "connection_ack"
	msgPing      = "ping"
	msgPong      = "pong"
	msgSubscribe = "subscribe"
	msgNext      = "next"
	msgError     = "error"
	msgComplete  = "complete"
	subprotocol  = "graphql-transport-ws"
	writeTimeout = 10 * time.Second
)

type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Start dials the server and waits for connection_ack; ctx bounds only
// this first connection. Its error channel receives connection losses and
// reconnect failures (non-blocking: errors are dropped when nobody reads)
// and is closed by Close.
func (c *WSClient) Start(ctx context.Context) (chan error, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("websocket client is closed")
	}
	if c.started {
		c.mu.Unlock()
		return nil, errors.New("websocket client already started")
	}
	c.started = true
	c.mu.Unlock()
	conn, err := c.connect(ctx)
	if err != nil {
		c.mu.Lock()
		c.started = false
		c.mu.Unlock()
		return nil, err
	}
	if !c.attach(conn) {
		return nil, errors.New("websocket client is closed")
	}
	c.wg.Add(1)
	go c.run(conn)
	return c.errs, nil
}

// Reconnected receives a value after each reconnect that re-subscribed the
// live subscriptions (coalesced): changes may have been missed meanwhile.
func (c *WSClient) Reconnected() <-chan struct{} { return c.reconnected }

// Reconnects counts the reconnects so far.
func (c *WSClient) Reconnects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnects
}

// connect dials and completes the connection_init handshake.
func (c *WSClient) connect(ctx context.Context) (*websocket.Conn, error) {
	d := *c.opts.Dialer
	d.Subprotocols = []string{subprotocol}
	// gorilla/websocket: a failed handshake's response is handed back for
	// inspection (dialError reads and closes it); a successful one has no body.
	conn, resp, err := d.DialContext(ctx, c.opts.Endpoint, c.opts.Header) //nolint:bodyclose // see above
	if err != nil {
		if resp != nil {
			return nil, dialError(c.opts.Endpoint, resp, err)
		}
		return nil, &wsUnreachedError{fmt.Errorf("dial %s: %w", c.opts.Endpoint, err)}
	}
	if conn.Subprotocol() != subprotocol {
		_ = conn.Close()
		return nil, fmt.Errorf("dial %s: server does not speak %s", c.opts.Endpoint, subprotocol)
	}
	payload, err := json.Marshal(c.opts.InitPayload)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("encode connection_init payload: %w", err)
	}
	if c.opts.InitPayload == nil {
		payload = nil
	}
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := conn.WriteJSON(wsMessage{Type: msgConnInit, Payload: payload}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("send connection_init: %w", err)
	}
	deadline := time.Now().Add(c.opts.AckTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		var m wsMessage
		if err := conn.ReadJSON(&m); err != nil {
			_ = conn.Close()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("wait for connection_ack: %w", ctx.Err())
			}
			return nil, fmt.Errorf("wait for connection_ack: %w", closeError(err))
		}
		switch m.Type {
		case msgConnAck:
			_ = conn.SetReadDeadline(time.Time{})
			return conn, nil
		case msgPing:
			_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := conn.WriteJSON(wsMessage{Type: msgPong}); err != nil {
				_ = conn.Close()
				return nil, fmt.Errorf("answer ping: %w", err)
			}
		}
	}
}

// attach makes conn current and (re-)subscribes every live subscription on
// it, atomically with respect to Subscribe; false when the client closed.
func (c *WSClient) attach(conn *websocket.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = conn.Close()
		return false
	}
	c.conn = conn
	for _, s := range c.subs {
		if err := c.sendSubscribeLocked(s); err != nil {
			// The reader sees the broken connection and reconnects.
			break
		}
	}
	return true
}

// run reads the current connection until it fails, then reconnects, until
// Close.
func (c *WSClient) run(conn *websocket.Conn) {
	defer c.wg.Done()
	for {
		err := c.session(conn)
		c.mu.Lock()
		closed := c.closed
		c.conn = nil
		c.mu.Unlock()
		_ = conn.Close()
		if closed {
			return
		}
		c.report(fmt.Errorf("websocket connection lost, reconnecting: %w", err))
		var ok bool
		if conn, ok = c.redial(); !ok {
			return
		}
		c.mu.Lock()
		c.reconnects++
		c.mu.Unlock()
		select {
		case c.reconnected <- struct{}{}:
		default:
		}
	}
}

// redial reconnects with jittered exponential backoff until it succeeds
// (true), the client closes, or the server refuses the credentials (false;
// every subscription then ends).
func (c *WSClient) redial() (*websocket.Conn, bool) {
	backoff := c.opts.MinBackoff
	for {
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-c.done:
			return nil, false
		case <-time.After(wait):
		}
		conn, err := c.connect(c.ctx)
		if err == nil {
			if c.attach(conn) {
				return conn, true
			}
			return nil, false
		}
		if c.isClosed() {
			return nil, false
		}
		if isFatalWSError(err) {
			c.report(err)
			c.endAll(err)
			return nil, false
		}
		c.report(err)
		backoff = min(backoff*2, c.opts.MaxBackoff)
	}
}

// session reads conn until it fails; a ping goroutine keeps it honest.
func (c *WSClient) session(conn *websocket.Conn) error {
	alive := 2 * c.opts.PingInterval
	extend := func() { _ = conn.SetReadDeadline(time.Now().Add(alive)) }
	extend()
	conn.SetPongHandler(func(string) error { extend(); return nil })
	conn.SetPingHandler(func(data string) error {
		extend()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeTimeout))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	stopPing := make(chan struct{})
	var pingWG sync.WaitGroup
	pingWG.Add(1)
	go func() {
		defer pingWG.Done()
		t := time.NewTicker(c.opts.PingInterval)
		defer t.Stop()
		for {
			select {
			case <-stopPing:
				return
			case <-t.C:
				if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout)); err != nil {
					_ = conn.Close()
					return
				}
			}
		}
	}()
	defer func() {
		close(stopPing)
		pingWG.Wait()
	}()
	for {
		var m wsMessage
		if err := conn.ReadJSON(&m); err != nil {
			return closeError(err)
		}
		extend()
		if err := c.dispatch(conn, m); err != nil {
			return err
		}
	}
}

// dispatch handles one server message.
func (c *WSClient) dispatch(conn *websocket.Conn, m wsMessage) error {
	switch m.Type {
	case msgPing:
		c.mu.Lock()
		defer c.mu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		return conn.WriteJSON(wsMessage{Type: msgPong})
	case msgNext:
		c.deliver(m.ID, m.Payload, false)
	case msgError:
		// The payload is a list of GraphQL errors; hand it on as a
		// response so the consumer sees resp.Errors, then end it.
		c.deliver(m.ID, json.RawMessage(`{"errors":`+string(m.Payload)+`}`), true)
	case msgComplete:
		c.deliver(m.ID, nil, true)
	}
	return nil
}

// deliver queues payload (when not nil) for subscription id and, with end,
// ends it after that. It blocks while the consumer is slow (back-pressure)
// but never past Unsubscribe or Close.
func (c *WSClient) deliver(id string, payload json.RawMessage, end bool) {
	c.mu.Lock()
	s := c.subs[id]
	if s != nil && end {
		delete(c.subs, id)
	}
	c.mu.Unlock()
	if s == nil {
		return // unsubscribed meanwhile
	}
	if payload != nil {
		select {
		case s.queue <- payload:
		case <-s.done:
			return
		case <-c.done:
			return
		}
	}
	if end {
		close(s.queue)
	}
}

// Subscribe starts a subscription whose payloads forwardDataFunc decodes
// onto interfaceChan (a channel the generated code made); the channel is
// closed when the subscription ends.
func (c *WSClient) Subscribe(req *graphql.Request, interfaceChan any, forwardDataFunc graphql.ForwardDataFunction) (string, error) {
	out := reflect.ValueOf(interfaceChan)
	if out.Kind() != reflect.Chan || out.Type().ChanDir()&reflect.SendDir == 0 {
		return "", fmt.Errorf("subscribe: %T is not a channel", interfaceChan)
	}
	if forwardDataFunc == nil || req == nil {
		return "", errors.New("subscribe: request and forward function are required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", errors.New("subscribe: websocket client is closed")
	}
	if !c.started {
		return "", errors.New("subscribe: websocket client is not started")
	}
	if c.dead != nil {
		return "", fmt.Errorf("subscribe: %w", c.dead)
	}
	c.nextID++
	s := &wsSub{id: strconv.FormatUint(c.nextID, 10), req: req, out: out, forward: forwardDataFunc,
		queue: make(chan json.RawMessage, 64), done: make(chan struct{})}
	c.subs[s.id] = s
	c.wg.Add(1)
	go c.pump(s)
	if c.conn != nil {
		// A failed write breaks the connection: the reader reconnects and
		// re-subscribes.
		_ = c.sendSubscribeLocked(s)
	}
	return s.id, nil
}

func (c *WSClient) sendSubscribeLocked(s *wsSub) error {
	payload, err := json.Marshal(s.req)
	if err != nil {
		return fmt.Errorf("encode subscription %s: %w", s.req.OpName, err)
	}
	return c.writeLocked(wsMessage{ID: s.id, Type: msgSubscribe, Payload: payload})
}

func (c *WSClient) writeLocked(m wsMessage) error {
	if c.conn == nil {
		return errors.New("not connected")
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := c.conn.WriteJSON(m); err != nil {
		_ = c.conn.Close() // the reader reconnects
		return err
	}
	return nil
}

// pump is the only goroutine that sends on (and closes) a subscription's
// channel. It decodes through forward onto a private one-slot channel of the
// same type, then offers the value to the consumer until Unsubscribe or
// Close.
func (c *WSClient) pump(s *wsSub) {
	defer c.wg.Done()
	defer s.out.Close()
	slot := reflect.MakeChan(s.out.Type(), 1)
	for {
		var payload json.RawMessage
		var ok bool
		select {
		case <-s.done:
			return
		case <-c.done:
			return
		case payload, ok = <-s.queue:
			if !ok {
				return
			}
		}
		if err := s.forward(slot.Interface(), payload); err != nil {
			c.report(fmt.Errorf("decode subscription %s: %w", s.req.OpName, err))
			continue
		}
		v, ok := slot.TryRecv()
		if !ok {
			continue
		}
		chosen, _, _ := reflect.Select([]reflect.SelectCase{
			{Dir: reflect.SelectSend, Chan: s.out, Send: v},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.done)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.done)},
		})
		if chosen != 0 {
			return
		}
	}
}

// Unsubscribe ends a subscription: its channel is closed promptly (values
// not yet received are dropped). Unsubscribing an ended or unknown
// subscription is a no-op.
func (c *WSClient) Unsubscribe(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.subs[id]
	if s == nil {
		return nil
	}
	delete(c.subs, id)
	s.stop()
	if c.conn != nil {
		_ = c.writeLocked(wsMessage{ID: id, Type: msgComplete})
	}
	return nil
}

// Close ends every subscription, closes the connection, waits for every
// goroutine the client started and closes the error channel. It is
// idempotent.
func (c *WSClient) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.cancel()
	for id, s := range c.subs {
		s.stop()
		delete(c.subs, id)
	}
	if c.conn != nil {
		_ = c.conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		_ = c.conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	close(c.errs)
	return nil
}

func (c *WSClient) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// endAll ends every subscription (their channels close) after a fatal
// refusal; later Subscribes fail with err.
func (c *WSClient) endAll(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = err
	for id, s := range c.subs {
		s.stop()
		delete(c.subs, id)
	}
}

// report offers err on the error channel without blocking.
func (c *WSClient) report(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	select {
	case c.errs <- err:
	default:
	}
}

// wsFatalError is a refusal that reconnecting cannot fix (bad token).
type wsFatalError struct{ err error }

func (e *wsFatalError) Error() string { return e.err.Error() }
func (e *wsFatalError) Unwrap() error { return e.err }

func isFatalWSError(err error) bool {
	var f *wsFatalError
	return errors.As(err, &f)
}

// closeError names a server close (4401/4403 are the protocol's auth
// refusals and are fatal).
func closeError(err error) error {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		e := fmt.Errorf("server closed the connection (%d %s)", ce.Code, ce.Text)
		if ce.Code >= 4400 && ce.Code < 4500 && ce.Code != 4408 && ce.Code != 4409 {
			return &wsFatalError{e}
		}
		return e
	}
	return err
}

// dialError turns a refused upgrade into an error carrying the server's
// GraphQL error when it sent one.
func dialError(endpoint string, resp *http.Response, err error) error {
	defer func() { _ = resp.Body.Close() }()
	var body graphql.Response
	if json.NewDecoder(resp.Body).Decode(&body) == nil && len(body.Errors) > 0 {
		e := fmt.Errorf("dial %s: %w", endpoint, apiError(body.Errors))
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return &wsFatalError{e}
		}
		return e
	}
	e := fmt.Errorf("dial %s: HTTP %d: %w", endpoint, resp.StatusCode, err)
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout: // a proxy's, for a server it did not reach
		return &wsUnreachedError{e}
	}
	return e
}

// wsUnreachedError is a dial that did not reach the server: no HTTP answer
// at all (refused, reset, timed out) or a proxy's 502-504 in its place.
type wsUnreachedError struct{ err error }

func (e *wsUnreachedError) Error() string { return e.err.Error() }
func (e *wsUnreachedError) Unwrap() error { return e.err }
