package classic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// sinkConfig is the statussink providerconfig spec.
type sinkConfig struct {
	// Endpoint is file:///dir or an http(s) URL that accepts PUT.
	Endpoint string `json:"endpoint"`
	Prefix   string `json:"prefix"`
}

func parseSinkConfig(raw json.RawMessage) (sinkConfig, *url.URL, error) {
	var c sinkConfig
	if len(raw) == 0 || string(raw) == "null" {
		return c, nil, errors.New("no providerconfig")
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, nil, fmt.Errorf("providerconfig spec: %w", err)
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return c, nil, fmt.Errorf("endpoint %q: %w", c.Endpoint, err)
	}
	switch u.Scheme {
	case "file":
		if u.Path == "" {
			return c, nil, fmt.Errorf("endpoint %q: want file:///absolute/dir", c.Endpoint)
		}
	case "http", "https":
	default:
		return c, nil, fmt.Errorf("endpoint %q: want file://, http:// or https://", c.Endpoint)
	}
	return c, u, nil
}

// statusSink is the reference reactor: when a bound transition fires it
// writes the resource's status to <endpoint>/<prefix>/<name>-<generation>.json.
// The key is stable per generation, so a redelivery overwrites rather than
// duplicates. It is unready until its default providerconfig names a usable
// endpoint.
type statusSink struct {
	log    zerolog.Logger
	client *http.Client
	ready  atomic.Bool
}

func newStatusSink(log zerolog.Logger) *statusSink {
	return &statusSink{log: log.With().Str("kind", KindStatusSink).Logger(), client: &http.Client{Timeout: 30 * time.Second}}
}

func (s *statusSink) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: KindStatusSink, Version: manifest.DefaultVersion}
}

func (s *statusSink) Ready() bool { return s.ready.Load() }

// OnConfig checks the destination: a file endpoint's directory must be
// creatable; an http endpoint is dialled per upload.
func (s *statusSink) OnConfig(cfg worker.ProviderConfig) {
	_, u, err := parseSinkConfig(cfg.Spec)
	if err == nil && u.Scheme == "file" {
		err = os.MkdirAll(u.Path, 0o755)
	}
	s.ready.Store(err == nil)
	if err != nil {
		s.log.Warn().Err(err).Msg("statussink unready: its default providerconfig names no usable endpoint")
		return
	}
	s.log.Info().Str("endpoint", u.String()).Msg("statussink ready")
}

// Document is what the sink writes.
type Document struct {
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
	cfg, u, err := parseSinkConfig(req.Config.Spec)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	doc := Document{Name: req.Resource.Name, Generation: req.React.Generation, Transition: string(req.React.Transition),
		Binding: req.React.Binding, DedupToken: req.React.DedupToken, Status: req.Resource.Status}
	if doc.Status == nil {
		doc.Status = json.RawMessage("null")
	}
	body, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("encode document: %w", err))
	}
	key := path.Join(strings.Trim(cfg.Prefix, "/"), fmt.Sprintf("%s-%d.json", req.Resource.Name, req.React.Generation))
	if u.Scheme == "file" {
		return worker.Outcome{}, writeFile(filepath.Join(u.Path, filepath.FromSlash(key)), body)
	}
	return worker.Outcome{}, s.put(ctx, u.JoinPath(key).String(), body)
}

// writeFile writes atomically (temp file + rename), so a reader never sees
// half a document.
func writeFile(name string, body []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("statussink: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".statussink-*")
	if err != nil {
		return fmt.Errorf("statussink: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename
	if _, err := tmp.Write(body); err != nil {
		tmp.Close()
		return fmt.Errorf("statussink: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("statussink: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("statussink: %w", err)
	}
	return nil
}

func (s *statusSink) put(ctx context.Context, target string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, target, bytes.NewReader(body))
	if err != nil {
		return worker.Terminal(fmt.Errorf("statussink: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("statussink: put %s: %w", target, err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("statussink: put %s: %s", target, res.Status)
	}
	return nil
}
