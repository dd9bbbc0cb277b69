package datadriven

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// leaf is a simulated leaf: it waits the latency its providerconfig names
// (latency_ms) and reports a status derived from its name and spec, so a
// re-run reports the same status.
type leaf struct {
	kind    string
	observe func(name string, spec json.RawMessage) (any, error)
}

func (l *leaf) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: l.kind, Version: manifest.DefaultVersion}
}
func (l *leaf) OnConfig(worker.ProviderConfig) {}
func (l *leaf) Ready() bool                    { return true }

type leafConfig struct {
	LatencyMS int `json:"latency_ms"`
}

func (l *leaf) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	if req.Stage != worker.StageWork {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("%s: unexpected stage %s", l.kind, req.Stage))
	}
	var cfg leafConfig
	if len(req.Config.Spec) > 0 && string(req.Config.Spec) != "null" {
		if err := json.Unmarshal(req.Config.Spec, &cfg); err != nil {
			return worker.Outcome{}, worker.Terminal(fmt.Errorf("providerconfig %q: %w", req.Config.Name, err))
		}
	}
	if cfg.LatencyMS > 0 {
		t := time.NewTimer(time.Duration(cfg.LatencyMS) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return worker.Outcome{}, ctx.Err()
		case <-t.C:
		}
	}
	status, err := l.observe(req.Resource.Name, req.Resource.Spec)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	return worker.Outcome{Status: mustJSON(status)}, nil
}

func id(prefix, kind, name string) string {
	h := sha256.Sum256([]byte(kind + "/" + name))
	return prefix + "-" + hex.EncodeToString(h[:6])
}

func decode[T any](raw json.RawMessage) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("spec: %w", err)
	}
	return v, nil
}

// FakeVPCSpec is a fakevpc's spec.
type FakeVPCSpec struct {
	Team string `json:"team,omitempty"`
	CIDR string `json:"cidr,omitempty"`
}

// FakeDBSpec is a fakedb's spec.
type FakeDBSpec struct {
	Team   string `json:"team,omitempty"`
	Engine string `json:"engine,omitempty"`
	SizeGB int    `json:"size_gb,omitempty"`
}

// FakeAppSpec is a fakeapp's spec: vpc_id and db_endpoint flow in from
// the fakevpc and the fakedb it is gated on.
type FakeAppSpec struct {
	Team       string `json:"team,omitempty"`
	Image      string `json:"image,omitempty"`
	VPCID      string `json:"vpc_id,omitempty"`
	DBEndpoint string `json:"db_endpoint,omitempty"`
}

// FakeTerraformSpec is a faketerraform's spec: the team's Terraform in S3.
type FakeTerraformSpec struct {
	Team   string `json:"team,omitempty"`
	Source string `json:"source"`
}

// FakeK8sJobSpec is a fakek8sjob's spec: image flows in from the
// faketerraform that built it.
type FakeK8sJobSpec struct {
	Team    string   `json:"team,omitempty"`
	Image   string   `json:"image,omitempty"`
	Command []string `json:"command,omitempty"`
}

func newFakeVPC() *leaf {
	return &leaf{kind: KindFakeVPC, observe: func(name string, raw json.RawMessage) (any, error) {
		s, err := decode[FakeVPCSpec](raw)
		if err != nil {
			return nil, err
		}
		cidr := s.CIDR
		if cidr == "" {
			cidr = "10.0.0.0/16"
		}
		return map[string]any{"vpc_id": id("vpc", KindFakeVPC, name), "cidr": cidr}, nil
	}}
}

func newFakeDB() *leaf {
	return &leaf{kind: KindFakeDB, observe: func(name string, raw json.RawMessage) (any, error) {
		s, err := decode[FakeDBSpec](raw)
		if err != nil {
			return nil, err
		}
		engine := s.Engine
		if engine == "" {
			engine = "postgres"
		}
		return map[string]any{"db_endpoint": name + ".db.internal:5432", "engine": engine}, nil
	}}
}

func newFakeApp() *leaf {
	return &leaf{kind: KindFakeApp, observe: func(name string, raw json.RawMessage) (any, error) {
		s, err := decode[FakeAppSpec](raw)
		if err != nil {
			return nil, err
		}
		if s.VPCID == "" {
			return nil, errors.New("spec.vpc_id is empty: a fakeapp runs in a vpc (an edge flows it in from a fakevpc's status)")
		}
		db := s.DBEndpoint
		if db == "" {
			db = "none"
		}
		return map[string]any{"url": "https://" + name + ".apps.internal", "vpc_id": s.VPCID, "db_endpoint": db}, nil
	}}
}

func newFakeTerraform() *leaf {
	return &leaf{kind: KindFakeTerraform, observe: func(name string, raw json.RawMessage) (any, error) {
		s, err := decode[FakeTerraformSpec](raw)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(s.Source, "s3://") {
			return nil, fmt.Errorf("spec.source %q: want the team's Terraform as s3://bucket/key", s.Source)
		}
		h := sha256.Sum256([]byte(s.Source))
		return map[string]any{"image": "registry.internal/" + name + "@sha256:" + hex.EncodeToString(h[:8]),
			"source": s.Source, "applied": true}, nil
	}}
}

func newFakeK8sJob() *leaf {
	return &leaf{kind: KindFakeK8sJob, observe: func(name string, raw json.RawMessage) (any, error) {
		s, err := decode[FakeK8sJobSpec](raw)
		if err != nil {
			return nil, err
		}
		if s.Image == "" {
			return nil, errors.New("spec.image is empty: a fakek8sjob runs an image (an edge flows it in from a faketerraform's status)")
		}
		return map[string]any{"job": name, "image": s.Image, "succeeded": 1}, nil
	}}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err)) // only plain values are marshalled
	}
	return b
}
