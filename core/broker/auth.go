package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/auth"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// planeAuth authenticates the WorkerService: every call carries a bearer
// token (WORKER_TOKENS_FILE for workers, MESH_TOKENS_FILE for peer brokers)
// or arrives over mutual TLS with a client certificate whose OU — or, when
// set, WORKER_CLIENT_IDENTITIES / MESH_CLIENT_IDENTITIES — names its
// audience (auth.CertPolicy). WorkStream and GetProviderConfig need a worker, RelayStage a
// broker. Without any credential source configured the plane is open
// (WORKER_AUTH=none; the process warns at boot) and every caller passes.
type planeAuth struct {
	creds *auth.Plane // nil: no token files
	mtls  bool        // the listener verifies client certificates
	log   zerolog.Logger
}

// enforced reports whether the plane requires credentials.
func (a *planeAuth) enforced() bool { return a != nil && (a.creds != nil || a.mtls) }

type principalKey struct{}
type certKey struct{}

// principalFrom is the authenticated caller of a handler call.
func principalFrom(ctx context.Context) auth.Principal {
	if p, ok := ctx.Value(principalKey{}).(auth.Principal); ok {
		return p
	}
	return auth.Principal{Name: "anonymous", Audience: auth.AudienceOpen, Via: "open"}
}

// certResult is what withCertificate read from a verified client
// certificate: the worker-plane principal, or why it is none.
type certResult struct {
	p   auth.Principal
	err error
	// state is the connection's TLS state, for a session to verify its
	// certificate again (certificateWatch).
	state *tls.ConnectionState
}

// withCertificate records the worker-plane identity of a verified client
// certificate, decided by policy (OU, or the audiences' allow-lists), for
// the interceptor (Connect does not expose the TLS state to interceptors).
func withCertificate(policy auth.CertPolicy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			p, err := policy.Principal(r.TLS.VerifiedChains[0][0])
			r = r.WithContext(context.WithValue(r.Context(), certKey{}, certResult{p: p, err: err, state: r.TLS}))
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate resolves the caller of one call: its bearer token wins over
// its certificate.
func (a *planeAuth) authenticate(ctx context.Context, h http.Header) (auth.Principal, error) {
	if !a.enforced() {
		return principalFrom(ctx), nil
	}
	if token := auth.Bearer(h.Get("Authorization")); token != "" {
		if p, ok := a.creds.Lookup(token); ok {
			return p, nil
		}
		return auth.Principal{}, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown worker-plane token"))
	}
	if c, ok := ctx.Value(certKey{}).(certResult); ok {
		if c.err != nil {
			return auth.Principal{}, connect.NewError(connect.CodeUnauthenticated, c.err)
		}
		return c.p, nil
	}
	return auth.Principal{}, connect.NewError(connect.CodeUnauthenticated,
		errors.New("the worker plane requires a credential: a bearer token (WORKER_TOKEN) or a client certificate"))
}

// authorize checks the caller may call procedure.
func authorize(p auth.Principal, procedure string) error {
	need := auth.AudienceWorker
	if procedure == workerv1connect.WorkerServiceRelayStageProcedure {
		need = auth.AudienceBroker
	}
	if !p.Is(need) {
		return connect.NewError(connect.CodePermissionDenied, errors.New("this credential is a "+string(p.Audience)+
			" credential; "+procedure+" needs a "+string(need)+" credential"))
	}
	return nil
}

// check authenticates and authorizes one call and returns its context.
func (a *planeAuth) check(ctx context.Context, procedure string, h http.Header, peer string) (context.Context, error) {
	p, err := a.authenticate(ctx, h)
	if err == nil {
		err = authorize(p, procedure)
	}
	if err != nil {
		a.log.Warn().Err(err).Str("procedure", procedure).Str("peer", peer).Str("identity", p.Name).
			Msg("worker-plane call refused")
		return ctx, err
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}

// WrapUnary implements connect.Interceptor.
func (a *planeAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, err := a.check(ctx, req.Spec().Procedure, req.Header(), req.Peer().Addr)
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor (nothing to do).
func (a *planeAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor: the stream is refused
// before its first message is read.
func (a *planeAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := a.check(ctx, conn.Spec().Procedure, conn.RequestHeader(), conn.Peer().Addr)
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// meshCredential is the mesh client's interceptor: it presents this
// broker's current mesh token (re-read on every call, so a rotation applies
// at once).
type meshCredential struct{ creds *auth.Plane }

func (m meshCredential) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if t := m.creds.MeshToken(); t != "" && req.Spec().IsClient {
			req.Header().Set("Authorization", "Bearer "+t)
		}
		return next(ctx, req)
	}
}

func (m meshCredential) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (m meshCredential) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// errCredentialRevoked ends a session whose worker token was revoked.
var errCredentialRevoked = connect.NewError(connect.CodeUnauthenticated,
	errors.New("the session's worker token was removed from WORKER_TOKENS_FILE, or no longer serves its kinds"))

// revocationWatch ends s once the token p opened it with is revoked: removed
// from WORKER_TOKENS_FILE, moved to another audience, or narrowed to kinds
// that leave out one the session serves. The session is retired (routed
// nothing more) and its stream cut at once; the stages it held run again
// elsewhere, and the worker's next call is refused. It returns when ctx (the
// session) ends.
func (h *workerService) revocationWatch(ctx context.Context, s *session, p auth.Principal, end func(), log zerolog.Logger) {
	for {
		changed := h.creds.Changed()
		if why := revoked(h.creds, p, h.reg.kindsOf(s)); why != "" {
			h.reg.retire(s, errCredentialRevoked)
			log.Warn().Str("identity", p.Name).Str("why", why).Msg("worker session ended: its token was revoked")
			end()
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// errCertificateInvalid ends a session whose client certificate no longer
// verifies.
var errCertificateInvalid = connect.NewError(connect.CodeUnauthenticated,
	errors.New("the session's client certificate no longer verifies against TLS_CLIENT_CA_FILE (rotated out, or expired)"))

// certificateWatch ends s once the client certificate its connection presented no
// longer verifies: its CA rotated out of TLS_CLIENT_CA_FILE, or it expired.
// A session outlives the requests the listener checks (tlsreload's
// ClientCheck.Watch). It returns when ctx (the session) ends.
func (h *workerService) certificateWatch(ctx context.Context, s *session, cs *tls.ConnectionState, end func(), log zerolog.Logger) {
	if err := h.certs.Watch(ctx, cs); err != nil {
		h.reg.retire(s, errCertificateInvalid)
		log.Warn().Err(err).Msg("worker session ended: its client certificate no longer verifies")
		end()
	}
}

// revoked says why the credential p no longer admits a session serving
// kinds ("" while it does).
func revoked(creds *auth.Plane, p auth.Principal, kinds []string) string {
	cur, ok := creds.Current(p)
	switch {
	case !ok:
		return "the token is no longer listed"
	case !cur.Is(auth.AudienceWorker):
		return "the token is no longer a worker's"
	}
	for _, k := range kinds {
		if !cur.Serves(k) {
			return "the token no longer serves kind " + k
		}
	}
	return ""
}

// subscribeAllowed refuses a Subscribe for kinds the caller may not serve.
func subscribeAllowed(p auth.Principal, sub *workerv1.Subscribe) error {
	for _, k := range sub.GetKinds() {
		if !p.Serves(k.GetKind().GetKind()) {
			return connect.NewError(connect.CodePermissionDenied,
				errors.New("credential "+p.Name+" may not serve kind "+k.GetKind().GetKind()))
		}
	}
	return nil
}

// readinessAllowed refuses (and logs) a readiness update naming a kind the
// session's credential may not serve: it would route that kind's tasks and
// configs to it.
func readinessAllowed(ctx context.Context, u *workerv1.ReadinessUpdate, log zerolog.Logger) bool {
	p := principalFrom(ctx)
	for _, k := range u.GetKinds() {
		if !p.Serves(k.GetKind().GetKind()) {
			log.Warn().Str("identity", p.Name).Str("kind", k.GetKind().GetKind()).
				Msg("readiness update refused: the credential may not serve this kind")
			return false
		}
	}
	return true
}

// completionAllowed checks a StageComplete's lease secret against the
// session that sends it; a refused completion is logged and acked (the
// worker drops it; the task's real result, or a re-run, applies), and the
// lease of a task the session resumed here is released for that re-run.
func (h *workerService) completionAllowed(s *session, m *workerv1.StageComplete, log zerolog.Logger) bool {
	if h.leases.verify(s.holder, m.GetTaskId(), m.GetLeaseSecret()) {
		return true
	}
	log.Warn().Str("task_id", m.GetTaskId()).Str("identity", s.holder).Bool("has_secret", m.GetLeaseSecret() != "").
		Msg("completion refused: its lease secret was not issued to this worker for this task")
	s.ack(m.GetTaskId())
	if h.adopt != nil {
		h.adopt.refused(s, m.GetTaskId())
	}
	return false
}

// streamRate paces what one worker stream may send: a token bucket of
// rate messages per second (burst twice that). A stream past it is not cut
// off; its next message is read only once the bucket allows, so HTTP/2
// flow control pushes back on the sender.
type streamRate struct {
	rate, burst, tokens float64
	last                time.Time
}

func newStreamRate(perSecond int) *streamRate {
	r := float64(perSecond)
	return &streamRate{rate: r, burst: 2 * r, tokens: 2 * r, last: time.Now()}
}

// wait takes n tokens (a message, or each result of a batch), sleeping
// until the bucket has refilled what it lacks; false when ctx ended first.
func (r *streamRate) wait(ctx context.Context, n int) bool {
	if r == nil || r.rate <= 0 {
		return true
	}
	now := time.Now()
	r.tokens = min(r.burst, r.tokens+max(0, now.Sub(r.last).Seconds())*r.rate)
	r.last = now
	if r.tokens >= float64(n) {
		r.tokens -= float64(n)
		return true
	}
	wait := time.Duration((float64(n) - r.tokens) / r.rate * float64(time.Second))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		r.tokens = 0
		r.last = time.Now()
		return true
	}
}
