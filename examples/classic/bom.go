package classic

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// BOMSpec is a bom's spec.
type BOMSpec struct {
	Teams         int    `json:"teams"`
	RoutesPerTeam *int   `json:"routes_per_team,omitempty"`
	Region        string `json:"region,omitempty"`
	LeafSim       *Sim   `json:"leaf_sim,omitempty"`
}

// DefaultRoutesPerTeam applies when a bom's spec sets none.
const DefaultRoutesPerTeam = 2

func (s BOMSpec) routes() int {
	if s.RoutesPerTeam == nil {
		return DefaultRoutesPerTeam
	}
	return *s.RoutesPerTeam
}

func (s BOMSpec) region() string {
	if s.Region == "" {
		return "eu-west-1"
	}
	return s.Region
}

// Descendants is how many resources a bom with this spec composes.
func (s BOMSpec) Descendants() int { return s.Teams * (2 + s.routes()) }

// AccountName is the name of a bom's team account. Child names are unique
// within the composition and across boms: they carry the bom's name.
func AccountName(bom string, team int) string { return fmt.Sprintf("%s-t%d-account", bom, team) }

// VPCName is the name of a bom's team VPC.
func VPCName(bom string, team int) string { return fmt.Sprintf("%s-t%d-vpc", bom, team) }

// RouteName is the name of a bom's team route.
func RouteName(bom string, team, route int) string {
	return fmt.Sprintf("%s-t%d-route-%d", bom, team, route)
}

// bom is the composite: compose fans the spec out, rollup summarises it,
// teardown is its finalizer (paced by FAKE_DELETE_DELAY).
type bom struct{ deleteDelay time.Duration }

func (bom) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: KindBOM, Version: manifest.DefaultVersion}
}
func (bom) OnConfig(worker.ProviderConfig) {}
func (bom) Ready() bool                    { return true }

func (b bom) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	switch req.Stage {
	case worker.StageCompose:
		return b.compose(req)
	case worker.StageRollup:
		return b.rollup(req), nil
	case worker.StageDelete:
		return worker.Outcome{}, sleep(ctx, int(b.deleteDelay/time.Millisecond), 0)
	}
	return worker.Outcome{}, worker.Terminal(fmt.Errorf("bom: unexpected stage %s", req.Stage))
}

// compose emits, per team: an account; a VPC that waits on the account and
// takes its account_id; routes that wait on the VPC and take its vpc_id.
func (bom) compose(req worker.Request) (worker.Outcome, error) {
	var spec BOMSpec
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("spec: %w", err))
	}
	if spec.Teams > 65535 {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("spec.teams %d: at most 65535 teams get a /24 each", spec.Teams))
	}
	root := req.Resource.Name
	routes := spec.routes()
	out := worker.Outcome{
		Status:   mustJSON(map[string]any{"phase": "composed", "teams": spec.Teams, "resources": spec.Descendants()}),
		Children: make([]worker.Child, 0, spec.Descendants()),
		Edges:    make([]worker.Edge, 0, spec.Teams*(1+routes)),
	}
	child := func(kind, name string, labels map[string]string, s teamChildSpec) {
		s.Sim = spec.LeafSim
		out.Children = append(out.Children, worker.Child{Kind: kind, Name: name, Labels: labels, Spec: mustJSON(s)})
	}
	for t := range spec.Teams {
		team := fmt.Sprintf("%s-t%d", root, t)
		// The children share their team's labels: the map is only read.
		labels := map[string]string{"bom": root, "team": fmt.Sprintf("t%d", t)}
		acct, vpc := AccountName(root, t), VPCName(root, t)
		child(KindAccount, acct, labels, teamChildSpec{Team: team, Region: spec.region()})
		child(KindVPC, vpc, labels, teamChildSpec{Team: team, Region: spec.region(), CIDR: fmt.Sprintf("10.%d.%d.0/24", t/256, t%256)})
		out.Edges = append(out.Edges, worker.Edge{
			Dependent: worker.Ref{Kind: KindVPC, Name: vpc}, Dependency: worker.Ref{Kind: KindAccount, Name: acct},
			ValueFlows: []worker.ValueFlow{{SrcField: "/account_id", DepField: "/account_id"}}})
		for r := range routes {
			rt := RouteName(root, t, r)
			child(KindRoute, rt, labels, teamChildSpec{Team: team, Destination: fmt.Sprintf("192.168.%d.0/24", r)})
			out.Edges = append(out.Edges, worker.Edge{
				Dependent: worker.Ref{Kind: KindRoute, Name: rt}, Dependency: worker.Ref{Kind: KindVPC, Name: vpc},
				ValueFlows: []worker.ValueFlow{{SrcField: "/vpc_id", DepField: "/vpc_id"}}})
		}
	}
	return out, nil
}

// teamChildSpec is the spec compose writes for a team's account, VPC or
// route: each sets the fields its kind reads (the value flows add
// account_id and vpc_id), and sim when the bom sets leaf_sim.
type teamChildSpec struct {
	Team        string `json:"team"`
	Region      string `json:"region,omitempty"`
	CIDR        string `json:"cidr,omitempty"`
	Destination string `json:"destination,omitempty"`
	Sim         *Sim   `json:"sim,omitempty"`
}

// notReadyShown bounds the names a rollup lists.
const notReadyShown = 20

// rollup counts the settled subtree by kind and phase. Any descendant not
// Ready makes the bom unhealthy (Degraded) with a ChildrenNotReady
// condition; all Ready makes it healthy again.
func (bom) rollup(req worker.Request) worker.Outcome {
	status := map[string]any{}
	var spec BOMSpec
	if json.Unmarshal(req.Resource.Spec, &spec) == nil {
		status["teams"] = spec.Teams
	}
	return rollupSubtree(req, status)
}

// rollupSubtree adds the subtree's counts to status (a composite's own
// summary fields) and decides health.
func rollupSubtree(req worker.Request, status map[string]any) worker.Outcome {
	byKind := map[string]map[string]int{}
	ready := 0
	var notReady []string
	for _, c := range req.Children {
		if byKind[c.Kind] == nil {
			byKind[c.Kind] = map[string]int{}
		}
		byKind[c.Kind][c.Phase]++
		if c.Phase == "Ready" {
			ready++
		} else {
			notReady = append(notReady, c.Kind+"/"+c.Name+" ("+c.Phase+")")
		}
	}
	sort.Strings(notReady)
	status["phase"], status["resources"], status["ready"], status["by_kind"] = "rolled-up", len(req.Children), ready, byKind
	healthy := len(notReady) == 0
	out := worker.Outcome{HealthOK: &healthy}
	// Healthy reports no condition: the drainer synthesizes Ready=True and
	// clears a stored False on recovery.
	if !healthy {
		if len(notReady) > notReadyShown {
			notReady = append(notReady[:notReadyShown], fmt.Sprintf("… and %d more", len(notReady)-notReadyShown))
		}
		status["not_ready"] = notReady
		out.Conditions = []worker.Condition{{Type: "Ready", Status: "False", Reason: "ChildrenNotReady",
			Message: fmt.Sprintf("%d of %d resources not ready", len(req.Children)-ready, len(req.Children))}}
	}
	out.Status = mustJSON(status)
	return out
}
