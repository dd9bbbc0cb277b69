package classic

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// DomainTeamsSpec is a classicbom's spec: every functional domain is staffed
// by every team, and each (domain, team) pair — a unit — gets its own
// account, VPC, transit gateway and route.
type DomainTeamsSpec struct {
	Domains []string `json:"domains"`
	Teams   []string `json:"teams"`
	Region  string   `json:"region,omitempty"`
	// VPCVersion is the vpc kind version the units' VPCs are served at
	// (v1, the default, or v2).
	VPCVersion string `json:"vpc_version,omitempty"`
	LeafSim    *Sim   `json:"leaf_sim,omitempty"`
}

// KindsPerUnit is how many resources a classicbom composes per unit.
const KindsPerUnit = 4

// maxUnits bounds domains × teams: each unit gets a /24 of 10.0.0.0/8.
const maxUnits = 65536

// Descendants is how many resources a classicbom with this spec composes.
func (s DomainTeamsSpec) Descendants() int { return len(s.Domains) * len(s.Teams) * KindsPerUnit }

// UnitName is the name prefix of a unit's resources: child names carry the
// root's name, so they are unique across classicboms.
func UnitName(root, domain, team string) string { return root + "-" + domain + "-" + team }

// classicBOM is the classic composite: compose fans the domains × teams out
// into units, rollup summarises the subtree, teardown is its finalizer.
type classicBOM struct{ deleteDelay time.Duration }

func (classicBOM) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: KindClassicBOM, Version: manifest.DefaultVersion}
}
func (classicBOM) OnConfig(worker.ProviderConfig) {}
func (classicBOM) Ready() bool                    { return true }

func (b classicBOM) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	switch req.Stage {
	case worker.StageCompose:
		return b.compose(req)
	case worker.StageRollup:
		var spec DomainTeamsSpec
		status := map[string]any{}
		if json.Unmarshal(req.Resource.Spec, &spec) == nil {
			status["domains"], status["teams"] = len(spec.Domains), len(spec.Teams)
		}
		return rollupSubtree(req, status), nil
	case worker.StageDelete:
		return worker.Outcome{}, sleep(ctx, int(b.deleteDelay/time.Millisecond), 0)
	}
	return worker.Outcome{}, worker.Terminal(fmt.Errorf("classicbom: unexpected stage %s", req.Stage))
}

func (classicBOM) spec(raw json.RawMessage) (DomainTeamsSpec, error) {
	var spec DomainTeamsSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return spec, fmt.Errorf("spec: %w", err)
	}
	if n := len(spec.Domains) * len(spec.Teams); n > maxUnits {
		return spec, fmt.Errorf("spec: %d domains × %d teams = %d units: at most %d units get a /24 each",
			len(spec.Domains), len(spec.Teams), n, maxUnits)
	}
	seen := map[string]bool{}
	for _, d := range spec.Domains {
		for _, t := range spec.Teams {
			u := d + "-" + t
			if seen[u] {
				return spec, fmt.Errorf("spec: domain %q × team %q names unit %q twice: domains and teams must be unique", d, t, u)
			}
			seen[u] = true
		}
	}
	if spec.Region == "" {
		spec.Region = "eu-west-1"
	}
	if spec.VPCVersion == "" {
		spec.VPCVersion = manifest.DefaultVersion
	}
	return spec, nil
}

// compose emits per unit: an account; a VPC and a transit gateway that wait
// on the account and take its account_id; a route that waits on both the
// VPC and the gateway and takes vpc_id from one and tgw_id from the other.
func (b classicBOM) compose(req worker.Request) (worker.Outcome, error) {
	spec, err := b.spec(req.Resource.Spec)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	root := req.Resource.Name
	units := len(spec.Domains) * len(spec.Teams)
	out := worker.Outcome{
		Status: mustJSON(map[string]any{"phase": "composed", "domains": len(spec.Domains), "teams": len(spec.Teams),
			"resources": spec.Descendants()}),
		Children: make([]worker.Child, 0, spec.Descendants()),
		Edges:    make([]worker.Edge, 0, units*4),
	}
	i := 0
	for _, domain := range spec.Domains {
		for _, team := range spec.Teams {
			b.unit(&out, spec, root, domain, team, i)
			i++
		}
	}
	return out, nil
}

func (classicBOM) unit(out *worker.Outcome, spec DomainTeamsSpec, root, domain, team string, i int) {
	unit := UnitName(root, domain, team)
	labels := map[string]string{"classicbom": root, "domain": domain, "team": team}
	child := func(kind, version, name string, s map[string]any) worker.Ref {
		if spec.LeafSim != nil {
			s["sim"] = spec.LeafSim
		}
		s["team"] = unit
		out.Children = append(out.Children, worker.Child{Kind: kind, Version: version, Name: name, Labels: labels, Spec: mustJSON(s)})
		return worker.Ref{Kind: kind, Name: name}
	}
	edge := func(dependent, dependency worker.Ref, field string) {
		out.Edges = append(out.Edges, worker.Edge{Dependent: dependent, Dependency: dependency,
			ValueFlows: []worker.ValueFlow{{SrcField: "/" + field, DepField: "/" + field}}})
	}
	acct := child(KindAccount, "", unit+"-account", map[string]any{"region": spec.Region})
	vpc := child(KindVPC, spec.VPCVersion, unit+"-vpc", map[string]any{"region": spec.Region,
		"cidr": fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)})
	tgw := child(KindTGW, "", unit+"-tgw", map[string]any{"region": spec.Region, "asn": 64512 + i%1000})
	route := child(KindRoute, "", unit+"-route", map[string]any{"destination": "0.0.0.0/0"})
	edge(vpc, acct, "account_id")
	edge(tgw, acct, "account_id")
	edge(route, vpc, "vpc_id")
	edge(route, tgw, "tgw_id")
}
