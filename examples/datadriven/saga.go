package datadriven

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/rs/zerolog"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/datadriven/gql"
)

// KindJobSaga is the saga reactor: bound to faketerraform's synced
// transition, it applies the matching fakek8sjob through the GraphQL API.
const KindJobSaga = "jobsaga"

// Labels the saga stamps on the resource it applies.
const (
	LabelSaga      = "saga"
	LabelSagaOf    = "saga-of"
	LabelSagaToken = "saga-token"
)

// SagaConfig is the jobsaga providerconfig spec.
type SagaConfig struct {
	// APIURL is converge's GraphQL endpoint, e.g. http://127.0.0.1:8080/graphql.
	APIURL string `json:"api_url"`
}

// SagaBundle is the jobsaga providerconfig bundle (its data): the API token
// the reactor presents, kept out of the spec.
type SagaBundle struct {
	Token string `json:"token,omitempty"`
}

// SagaConfigFor is the jobsaga default providerconfig pointing at the API
// served at baseURL, presenting token when the API asks for one (devstack
// applies it over the fixture's, which assumes the default 127.0.0.1:8080
// and an open API).
func SagaConfigFor(baseURL, token string) apply.ProviderConfig {
	pc := apply.ProviderConfig{Kind: KindJobSaga, Name: "default", IsDefault: true,
		Spec: mustJSON(SagaConfig{APIURL: strings.TrimSuffix(baseURL, "/") + "/graphql"})}
	if token != "" {
		pc.Data = mustJSON(SagaBundle{Token: token})
	}
	return pc
}

// SagaJobName is the name of the job the saga applies for a terraform.
func SagaJobName(terraform string) string { return terraform + "-job" }

// jobSaga is the reactor. It is unready until its default providerconfig
// names the API; each delivery then applies the next resource over GraphQL
// with a client built from the task's effective config.
type jobSaga struct {
	log   zerolog.Logger
	ready atomic.Bool
}

func newJobSaga(log zerolog.Logger) *jobSaga {
	return &jobSaga{log: log.With().Str("kind", KindJobSaga).Logger()}
}

func (*jobSaga) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: KindJobSaga, Version: manifest.DefaultVersion}
}

func (s *jobSaga) Ready() bool { return s.ready.Load() }

// OnConfig checks the default config names a usable API.
func (s *jobSaga) OnConfig(cfg worker.ProviderConfig) {
	_, err := sagaClient(cfg.Spec, cfg.Data)
	s.ready.Store(err == nil)
	if err != nil {
		s.log.Warn().Err(err).Msg("jobsaga unready: its default providerconfig names no usable API")
		return
	}
	s.log.Info().Msg("jobsaga ready")
}

func sagaClient(spec, data json.RawMessage) (graphql.Client, error) {
	var c SagaConfig
	if len(spec) == 0 || string(spec) == "null" {
		return nil, errors.New("no providerconfig")
	}
	if err := json.Unmarshal(spec, &c); err != nil {
		return nil, fmt.Errorf("providerconfig spec: %w", err)
	}
	u, err := url.Parse(c.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("api_url %q: want http(s)://host/graphql", c.APIURL)
	}
	var b SagaBundle
	if len(data) > 0 && string(data) != "null" {
		if err := json.Unmarshal(data, &b); err != nil {
			return nil, fmt.Errorf("providerconfig data: %w", err)
		}
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: bearer{token: b.Token, next: http.DefaultTransport}}
	return graphql.NewClient(c.APIURL, hc), nil
}

// bearer adds the API token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// Work applies the fakek8sjob that runs the image the synced faketerraform
// built. Idempotent: the job's spec and labels are a function of the
// terraform's status and the delivery's dedup token, and an apply that
// changes nothing bumps no generation — a redelivery is a no-op. A stale
// delivery — of a generation the terraform has moved past, or of a
// terraform that is gone or was replaced — applies nothing: its snapshot
// holds an older image, and the newer generation's own delivery applies
// the job.
func (s *jobSaga) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	if req.Stage != worker.StageReact || req.React == nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("jobsaga: unexpected stage %s", req.Stage))
	}
	client, err := sagaClient(req.Config.Spec, req.Config.Data)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	stale, err := staleDelivery(ctx, client, req)
	if err != nil {
		return worker.Outcome{}, err
	}
	if stale != "" {
		s.log.Info().Str("terraform", req.Resource.Name).Int64("generation", req.React.Generation).
			Str("dedup_token", req.React.DedupToken).Str("stale", stale).Msg("jobsaga skipped a stale delivery")
		return worker.Outcome{}, nil
	}
	var tf struct {
		Image string `json:"image"`
	}
	if len(req.Resource.Status) > 0 {
		if err := json.Unmarshal(req.Resource.Status, &tf); err != nil {
			return worker.Outcome{}, worker.Terminal(fmt.Errorf("jobsaga: %s's status: %w", req.Resource.Name, err))
		}
	}
	if tf.Image == "" {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("jobsaga: %s's status has no image: bind jobsaga to faketerraform's synced transition", req.Resource.Name))
	}
	team := req.Resource.Labels["team"]
	spec := mustJSON(FakeK8sJobSpec{Team: team, Image: tf.Image, Command: []string{"run"}})
	h := sha256.Sum256([]byte(req.React.DedupToken))
	labels := mustJSON(map[string]string{LabelSaga: KindJobSaga, LabelSagaOf: req.Resource.Name,
		LabelSagaToken: hex.EncodeToString(h[:12])})
	res, err := gql.ApplyNextResource(ctx, client, gql.ResourceInput{Kind: KindFakeK8sJob, Name: SagaJobName(req.Resource.Name),
		Labels: &labels, Spec: spec})
	if err != nil {
		if isUserError(err) {
			return worker.Outcome{}, worker.Terminal(fmt.Errorf("jobsaga: apply %s: %w", SagaJobName(req.Resource.Name), err))
		}
		return worker.Outcome{}, fmt.Errorf("jobsaga: apply %s: %w", SagaJobName(req.Resource.Name), err)
	}
	s.log.Info().Str("terraform", req.Resource.Name).Str("job", res.ApplyResource.Name).
		Int("generation", res.ApplyResource.Generation).Str("dedup_token", req.React.DedupToken).Msg("jobsaga applied the next resource")
	return worker.Outcome{}, nil
}

// staleDelivery reads the terraform as it is now (by id: a terraform
// deleted and created again under its name is another resource, with
// deliveries of its own) and says why the delivery is stale ("" when it is
// current). The read and the apply after it are two requests: a newer
// generation that syncs and is delivered between them can still be
// overtaken, a window of one round trip.
func staleDelivery(ctx context.Context, client graphql.Client, req worker.Request) (string, error) {
	if req.Resource.ID == "" {
		// A delivery always carries the watched resource's id; a hand-built
		// request without one is applied as it is.
		return "", nil
	}
	res, err := gql.SagaSource(ctx, client, req.Resource.ID)
	if err != nil {
		err = fmt.Errorf("jobsaga: read %s (%s): %w", req.Resource.Name, req.Resource.ID, err)
		if isUserError(err) {
			return "", worker.Terminal(err)
		}
		return "", err
	}
	switch cur := res.ResourceById; {
	case cur == nil:
		return "the terraform is gone", nil
	case int64(cur.Generation) > req.React.Generation:
		return fmt.Sprintf("the terraform is at generation %d", cur.Generation), nil
	}
	return "", nil
}

// isUserError reports an error retrying cannot fix: the API refused the
// input or the token (extensions.code), or answered 4xx. Transport errors
// and server faults are retried.
func isUserError(err error) bool {
	var he *graphql.HTTPError
	if errors.As(err, &he) {
		return he.StatusCode/100 == 4 && he.StatusCode != http.StatusTooManyRequests
	}
	var list gqlerror.List
	if errors.As(err, &list) {
		for _, e := range list {
			switch e.Extensions["code"] {
			case "BAD_USER_INPUT", "FORBIDDEN", "UNAUTHENTICATED":
				return true
			}
		}
	}
	return false
}
