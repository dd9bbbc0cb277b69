package classic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:///dir
	_ "gocloud.dev/blob/memblob"  // mem://
	_ "gocloud.dev/blob/s3blob"   // s3://bucket: the AWS SDK's credential chain and SigV4 signing

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// sinkConfig is the statussink providerconfig spec.
type sinkConfig struct {
	// Endpoint is a gocloud.dev/blob bucket URL: file:///dir, s3://bucket
	// (?region=…&endpoint=…&use_path_style=true) or mem://.
	Endpoint string `json:"endpoint"`
	// Prefix is the folder inside the bucket the documents go to: relative,
	// no "." or ".." segments — it can never leave the endpoint.
	Prefix string `json:"prefix"`
}

// sinkSchemes are the endpoint schemes statussink opens.
var sinkSchemes = map[string]bool{"file": true, "mem": true, "s3": true}

func parseSinkConfig(raw json.RawMessage) (sinkConfig, error) {
	var c sinkConfig
	if len(raw) == 0 || string(raw) == "null" {
		return c, errors.New("no providerconfig")
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("providerconfig spec: %w", err)
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return c, fmt.Errorf("endpoint %q: %w", c.Endpoint, err)
	}
	if !sinkSchemes[u.Scheme] {
		return c, fmt.Errorf("endpoint %q: want file:///dir, s3://bucket or mem://", c.Endpoint)
	}
	if u.Scheme == "file" && u.Path == "" {
		return c, fmt.Errorf("endpoint %q: want file:///absolute/dir", c.Endpoint)
	}
	if _, err := confinedKey(c.Prefix, "k", "x"); err != nil {
		return c, err
	}
	return c, nil
}

// confinedKey is the object key <prefix>/<kind>/<name>, refused when any
// part could climb out of the endpoint or name an unexpected object.
func confinedKey(prefix, kind, name string) (string, error) {
	prefix = strings.Trim(prefix, "/")
	for _, part := range []struct{ what, v string }{{"prefix", prefix}, {"kind", kind}, {"document name", name}} {
		if strings.ContainsAny(part.v, "\\\x00") {
			return "", fmt.Errorf("statussink %s %q: backslashes and NUL are not allowed", part.what, part.v)
		}
		if part.v == "" {
			continue
		}
		for _, seg := range strings.Split(part.v, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return "", fmt.Errorf("statussink %s %q: empty, . and .. segments are not allowed (the output stays inside the endpoint)",
					part.what, part.v)
			}
		}
	}
	for _, part := range []struct{ what, v string }{{"kind", kind}, {"document name", name}} {
		if strings.Contains(part.v, "/") {
			return "", fmt.Errorf("statussink %s %q: no / allowed", part.what, part.v)
		}
	}
	return path.Join(prefix, kind, name), nil
}

// statusSink is the reference reactor: when a bound transition fires it
// uploads the resource's status to
// <endpoint>/<prefix>/<watched kind>/<name>-<generation>.json. A name is
// unique within its kind only, so the kind is part of the key: resources
// of one name in two watched kinds keep a document each. The key is stable
// per generation, so a redelivery overwrites rather than duplicates. It opens its bucket from its default providerconfig and is
// unready until that succeeds.
type statusSink struct {
	log zerolog.Logger

	mu     sync.Mutex
	bucket *sharedBucket // nil until a default config opens one
}

// sharedBucket is the default config's open bucket and the uploads using
// it: a config push that replaces it closes it once they are done.
type sharedBucket struct {
	*blob.Bucket
	endpoint string // its URL
	uploads  sync.WaitGroup
}

func newStatusSink(log zerolog.Logger) *statusSink {
	return &statusSink{log: log.With().Str("kind", KindStatusSink).Logger()}
}

func (s *statusSink) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: KindStatusSink, Version: manifest.DefaultVersion}
}

func (s *statusSink) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bucket != nil
}

// OnConfig opens the default config's bucket, replacing the previous one
// (kept when the endpoint is the same: every new broker session pushes the
// config again); a bad config leaves the kind unready. A replaced bucket
// is closed once the uploads using it are done, never under one.
func (s *statusSink) OnConfig(cfg worker.ProviderConfig) {
	c, err := parseSinkConfig(cfg.Spec)
	s.mu.Lock()
	if err == nil && s.bucket != nil && s.bucket.endpoint == c.Endpoint {
		s.mu.Unlock()
		s.log.Info().Str("endpoint", c.Endpoint).Str("prefix", c.Prefix).Msg("statussink ready")
		return
	}
	s.mu.Unlock()
	var b *sharedBucket
	if err == nil {
		var opened *blob.Bucket
		if opened, err = blob.OpenBucket(context.Background(), c.Endpoint); err == nil {
			b = &sharedBucket{Bucket: opened, endpoint: c.Endpoint}
		}
	}
	s.mu.Lock()
	old := s.bucket
	s.bucket = b
	s.mu.Unlock()
	if old != nil {
		go s.retire(old)
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("statussink unready: its default providerconfig names no usable endpoint")
		return
	}
	s.log.Info().Str("endpoint", c.Endpoint).Str("prefix", c.Prefix).Msg("statussink ready")
}

// retire closes a replaced bucket once its uploads are done (no upload
// takes it any more: bucketFor takes the current one, under mu).
func (s *statusSink) retire(b *sharedBucket) {
	b.uploads.Wait()
	if err := b.Close(); err != nil {
		s.log.Warn().Err(err).Str("endpoint", b.endpoint).Msg("statussink: close the previous bucket")
	}
}

// Document is what the sink writes.
type Document struct {
	Kind       string          `json:"kind"`
	Name       string          `json:"name"`
	Generation int64           `json:"generation"`
	Transition string          `json:"transition"`
	Binding    string          `json:"binding"`
	DedupToken string          `json:"dedup_token"`
	Status     json.RawMessage `json:"status"`
}

func (s *statusSink) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	if req.Stage != worker.StageReact || req.React == nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("statussink: unexpected stage %s", req.Stage))
	}
	cfg, err := parseSinkConfig(req.Config.Spec)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	if req.React.WatchKind == "" {
		return worker.Outcome{}, worker.Terminal(errors.New("statussink: the delivery names no watched kind (its key is <kind>/<name>-<generation>.json)"))
	}
	key, err := confinedKey(cfg.Prefix, req.React.WatchKind, fmt.Sprintf("%s-%d.json", req.Resource.Name, req.React.Generation))
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	doc := Document{Kind: req.React.WatchKind, Name: req.Resource.Name, Generation: req.React.Generation,
		Transition: string(req.React.Transition), Binding: req.React.Binding, DedupToken: req.React.DedupToken,
		Status: req.Resource.Status}
	if doc.Status == nil {
		doc.Status = json.RawMessage("null")
	}
	body, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("encode document: %w", err))
	}
	b, release, err := s.bucketFor(ctx, cfg.Endpoint)
	if err != nil {
		return worker.Outcome{}, err
	}
	defer release()
	if err := b.WriteAll(ctx, key, body, &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return worker.Outcome{}, fmt.Errorf("statussink: upload %s to %s: %w", key, cfg.Endpoint, err)
	}
	return worker.Outcome{}, nil
}

// bucketFor is the open default bucket when the task's endpoint is the
// default's, else a bucket opened for this task; release ends the use
// (closing a bucket opened for the task).
func (s *statusSink) bucketFor(ctx context.Context, endpoint string) (*blob.Bucket, func(), error) {
	s.mu.Lock()
	if sb := s.bucket; sb != nil && sb.endpoint == endpoint {
		sb.uploads.Add(1)
		s.mu.Unlock()
		return sb.Bucket, sb.uploads.Done, nil
	}
	s.mu.Unlock()
	b, err := blob.OpenBucket(ctx, endpoint)
	if err != nil {
		return nil, nil, worker.Terminal(fmt.Errorf("statussink: open %s: %w", endpoint, err))
	}
	return b, func() {
		if err := b.Close(); err != nil {
			s.log.Warn().Err(err).Str("endpoint", endpoint).Msg("statussink: close bucket")
		}
	}, nil
}
