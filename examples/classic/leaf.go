package classic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// leaf is a simulated leaf kind: its reconcile waits the simulated latency,
// may fail as configured, and reports a status computed from its spec. Its
// ids are derived from its name, so a re-run reports the same status.
type leaf struct {
	kind    string
	observe func(name string, spec json.RawMessage) (any, error)
	verbs   map[string]func(req worker.Request) (any, error)
}

func (l *leaf) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: l.kind, Version: manifest.DefaultVersion}
}

// OnConfig is a no-op: the simulation knobs are read per task from the
// effective config, so an edit applies to the next task.
func (l *leaf) OnConfig(worker.ProviderConfig) {}

// Ready is always true: a simulated leaf dials nothing.
func (l *leaf) Ready() bool { return true }

func (l *leaf) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	sim, err := simFor(req)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	switch req.Stage {
	case worker.StageDelete:
		return worker.Outcome{}, sim.teardown(ctx)
	case worker.StageOperate:
		verb, ok := l.verbs[req.Operation.Verb]
		if !ok {
			return worker.Outcome{}, worker.Terminal(fmt.Errorf("%s has no verb %q", l.kind, req.Operation.Verb))
		}
		out, err := verb(req)
		if err != nil {
			return worker.Outcome{}, err
		}
		return worker.Outcome{OperationOutput: mustJSON(out)}, nil
	case worker.StageWork:
		if err := sim.reconcile(ctx); err != nil {
			return worker.Outcome{}, err
		}
		status, err := l.observe(req.Resource.Name, req.Resource.Spec)
		if err != nil {
			return worker.Outcome{}, worker.Terminal(err)
		}
		return worker.Outcome{Status: mustJSON(status)}, nil
	}
	return worker.Outcome{}, worker.Terminal(fmt.Errorf("%s: unexpected stage %s", l.kind, req.Stage))
}

// id is a stable fake cloud id for a resource.
func id(prefix, kind, name string) string {
	h := sha256.Sum256([]byte(kind + "/" + name))
	return prefix + "-" + hex.EncodeToString(h[:6])
}

type accountSpec struct {
	Team   string `json:"team"`
	Region string `json:"region"`
}

type vpcSpec struct {
	Team      string `json:"team"`
	Region    string `json:"region"`
	CIDR      string `json:"cidr"`
	AccountID string `json:"account_id"`
}

type routeSpec struct {
	Team        string `json:"team"`
	Destination string `json:"destination"`
	VPCID       string `json:"vpc_id"`
}

func newAccount() *leaf {
	return &leaf{kind: KindAccount, observe: func(name string, raw json.RawMessage) (any, error) {
		var s accountSpec
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
		return map[string]any{"account_id": id("acct", KindAccount, name), "team": s.Team, "region": s.Region}, nil
	}}
}

func newVPC() *leaf {
	return &leaf{kind: KindVPC,
		observe: func(name string, raw json.RawMessage) (any, error) {
			var s vpcSpec
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("spec: %w", err)
			}
			if s.AccountID == "" {
				return nil, errors.New("spec.account_id is empty: a vpc lives in an account (a bom flows it in from the account's status)")
			}
			return map[string]any{"vpc_id": id("vpc", KindVPC, name), "cidr": s.CIDR, "account_id": s.AccountID}, nil
		},
		verbs: map[string]func(worker.Request) (any, error){
			"enable_flow_logs": func(req worker.Request) (any, error) {
				return map[string]any{"vpc_id": id("vpc", KindVPC, req.Resource.Name), "flow_logs": "enabled",
					"operation_id": req.Operation.ID}, nil
			},
		},
	}
}

func newRoute() *leaf {
	return &leaf{kind: KindRoute, observe: func(name string, raw json.RawMessage) (any, error) {
		var s routeSpec
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
		if s.VPCID == "" {
			return nil, errors.New("spec.vpc_id is empty: a route belongs to a vpc (a bom flows it in from the vpc's status)")
		}
		return map[string]any{"route_id": id("rtb", KindRoute, name), "vpc_id": s.VPCID, "destination": s.Destination}, nil
	}}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err)) // only maps of plain values are marshalled
	}
	return b
}
