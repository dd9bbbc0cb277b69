package classic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// leaf is a simulated leaf kind: its reconcile waits the simulated latency,
// may fail as configured, and reports a status computed from its spec. Its
// ids are derived from its name, so a re-run reports the same status.
type leaf struct {
	kind        string
	version     string // "" = manifest.DefaultVersion
	deleteDelay time.Duration
	observe     func(name string, spec json.RawMessage) (any, error)
	verbs       map[string]func(req worker.Request) (any, error)
}

func (l *leaf) Kind() manifest.KindVersion {
	v := l.version
	if v == "" {
		v = manifest.DefaultVersion
	}
	return manifest.KindVersion{Kind: l.kind, Version: v}
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
		return worker.Outcome{}, sim.teardown(ctx, l.deleteDelay)
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
	// IPv6 is v2 only: the vpc also gets an IPv6 block.
	IPv6 bool `json:"ipv6,omitempty"`
}

type tgwSpec struct {
	Team      string `json:"team"`
	Region    string `json:"region"`
	ASN       int    `json:"asn"`
	AccountID string `json:"account_id"`
}

type routeSpec struct {
	Team        string `json:"team"`
	Destination string `json:"destination"`
	VPCID       string `json:"vpc_id"`
	// TGWID is set when the route targets a transit gateway (classicbom).
	TGWID string `json:"tgw_id,omitempty"`
}

// The leaves' statuses. Typed rather than maps: a map is marshalled with
// its keys sorted, which was a measurable part of the demo worker's CPU.
type accountStatus struct {
	AccountID string `json:"account_id"`
	Region    string `json:"region"`
	Team      string `json:"team"`
}

type vpcStatus struct {
	AccountID  string `json:"account_id"`
	APIVersion string `json:"api_version,omitempty"` // v2 only
	CIDR       string `json:"cidr"`
	IPv6CIDR   string `json:"ipv6_cidr,omitempty"` // v2 with ipv6 only
	VPCID      string `json:"vpc_id"`
}

type tgwStatus struct {
	AccountID string `json:"account_id"`
	ASN       int    `json:"asn"`
	TGWID     string `json:"tgw_id"`
}

type routeStatus struct {
	Destination string `json:"destination"`
	RouteID     string `json:"route_id"`
	TGWID       string `json:"tgw_id,omitempty"` // set when the route targets a transit gateway
	VPCID       string `json:"vpc_id"`
}

func decodeSpec(raw json.RawMessage, into any) error {
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

func newAccount(deleteDelay time.Duration) *leaf {
	return &leaf{kind: KindAccount, deleteDelay: deleteDelay, observe: func(name string, raw json.RawMessage) (any, error) {
		var s accountSpec
		if err := decodeSpec(raw, &s); err != nil {
			return nil, err
		}
		return accountStatus{AccountID: id("acct", KindAccount, name), Region: s.Region, Team: s.Team}, nil
	}}
}

// newVPC serves the vpc kind at version ("" = v1). v2 adds the ipv6 field.
func newVPC(deleteDelay time.Duration, version string) *leaf {
	return &leaf{kind: KindVPC, version: version, deleteDelay: deleteDelay,
		observe: func(name string, raw json.RawMessage) (any, error) {
			var s vpcSpec
			if err := decodeSpec(raw, &s); err != nil {
				return nil, err
			}
			if s.AccountID == "" {
				return nil, errors.New("spec.account_id is empty: a vpc lives in an account (a bom flows it in from the account's status)")
			}
			status := vpcStatus{AccountID: s.AccountID, CIDR: s.CIDR, VPCID: id("vpc", KindVPC, name)}
			if version == VPCv2 {
				status.APIVersion = VPCv2
				if s.IPv6 {
					status.IPv6CIDR = "2600:1f18:" + id("", KindVPC, name)[1:5] + "::/56"
				}
			}
			return status, nil
		},
		verbs: map[string]func(worker.Request) (any, error){
			"enable_flow_logs": func(req worker.Request) (any, error) {
				return map[string]any{"vpc_id": id("vpc", KindVPC, req.Resource.Name), "flow_logs": "enabled",
					"operation_id": req.Operation.ID}, nil
			},
		},
	}
}

func newTGW(deleteDelay time.Duration) *leaf {
	return &leaf{kind: KindTGW, deleteDelay: deleteDelay, observe: func(name string, raw json.RawMessage) (any, error) {
		var s tgwSpec
		if err := decodeSpec(raw, &s); err != nil {
			return nil, err
		}
		if s.AccountID == "" {
			return nil, errors.New("spec.account_id is empty: a tgw lives in an account (a classicbom flows it in from the account's status)")
		}
		return tgwStatus{AccountID: s.AccountID, ASN: s.ASN, TGWID: id("tgw", KindTGW, name)}, nil
	}}
}

func newRoute(deleteDelay time.Duration) *leaf {
	return &leaf{kind: KindRoute, deleteDelay: deleteDelay, observe: func(name string, raw json.RawMessage) (any, error) {
		var s routeSpec
		if err := decodeSpec(raw, &s); err != nil {
			return nil, err
		}
		if s.VPCID == "" {
			return nil, errors.New("spec.vpc_id is empty: a route belongs to a vpc (a bom flows it in from the vpc's status)")
		}
		return routeStatus{Destination: s.Destination, RouteID: id("rtb", KindRoute, name), TGWID: s.TGWID, VPCID: s.VPCID}, nil
	}}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err)) // only plain maps and structs of plain values are marshalled
	}
	return b
}
