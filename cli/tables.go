package cli

import (
	"fmt"
	"strings"
	"time"
)

// The table and wide renderings of each type. Phases and statuses are shown
// as the server computed them.

func (a *app) resourceTable(rows []ResourceRow) error {
	wide := a.output == outWide
	header := []string{"KIND", "NAME", "PHASE", "GENERATION", "SYNCED", "AGE"}
	if wide {
		header = []string{"KIND", "NAME", "VERSION", "PHASE", "GENERATION", "SYNCED", "HEALTHY", "OWNER", "LABELS", "AGE"}
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		if wide {
			out[i] = []string{r.Kind, r.Name, r.Version, string(r.Phase), itoa(r.Generation), itoa(r.SyncedGeneration),
				yesNo(r.HealthOk), ownerString(r.Owner), labelsString(r.Labels), a.age(r.CreatedAt)}
			continue
		}
		out[i] = []string{r.Kind, r.Name, string(r.Phase), itoa(r.Generation), itoa(r.SyncedGeneration), a.age(r.CreatedAt)}
	}
	return renderTable(a.stdout(), header, out)
}

func ownerString(o *ResourceRowOwnerResource) string {
	if o == nil {
		return "<none>"
	}
	return o.Kind + "/" + o.Name
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (a *app) kindTable(rows []KindRow) error {
	wide := a.output == outWide
	header := []string{"NAME", "VERSION", "REACTOR", "REACTIONS", "FINALIZER", "AGE"}
	if wide {
		header = []string{"NAME", "VERSION", "REACTOR", "REACTIONS", "FINALIZER", "MAX-INFLIGHT", "DEADLINE", "RESYNC",
			"ORPHAN-GRACE", "GENERATION", "AGE"}
	}
	out := make([][]string, len(rows))
	for i, k := range rows {
		names := make([]string, len(k.Reactions))
		for j, r := range k.Reactions {
			names[j] = r.Name
		}
		row := []string{k.Name, k.Version, yesNo(k.IsReactor), strings.Join(names, ","), orNone(k.FinalizerName)}
		if wide {
			cfg := k.Config
			resync := secs(cfg.ResyncIntervalSecs)
			if cfg.ResyncIntervalSecs > 0 && cfg.ResyncRecomposes {
				resync += "+recompose"
			}
			row = append(row, unlimited(cfg.MaxInflight), secs(cfg.TaskDeadlineSecs), resync,
				secs(cfg.OrphanGraceSecs), itoa(k.ManifestGeneration))
		}
		out[i] = append(row, a.age(k.CreatedAt))
	}
	return renderTable(a.stdout(), header, out)
}

func secs(n int) string {
	if n == 0 {
		return "off"
	}
	return (time.Duration(n) * time.Second).String()
}

func unlimited(n int) string {
	if n == 0 {
		return "unlimited"
	}
	return itoa(n)
}

func (a *app) providerConfigTable(rows []ProviderConfigRow) error {
	wide := a.output == outWide
	header := []string{"KIND", "NAME", "DEFAULT", "OWNER", "AGE"}
	if wide {
		header = []string{"KIND", "NAME", "DEFAULT", "OWNER", "SPEC", "AGE"}
	}
	out := make([][]string, len(rows))
	for i, p := range rows {
		owner := "<none>"
		if p.Owner != nil {
			owner = p.Owner.Kind + "/" + p.Owner.Name
		}
		row := []string{p.Kind, p.Name, yesNo(p.IsDefault), owner}
		if wide {
			spec := p.Spec
			row = append(row, compact(&spec))
		}
		out[i] = append(row, a.age(p.CreatedAt))
	}
	return renderTable(a.stdout(), header, out)
}

func (a *app) reactorBindingTable(rows []ReactorBindingRow) error {
	wide := a.output == outWide
	header := []string{"NAME", "WATCH-KIND", "TRANSITION", "REACTOR", "ENABLED", "AGE"}
	if wide {
		header = []string{"NAME", "WATCH-KIND", "TRANSITION", "REACTOR", "ENABLED", "LABEL-MATCH", "AGE"}
	}
	out := make([][]string, len(rows))
	for i, b := range rows {
		row := []string{b.Name, b.WatchKind, string(b.Transition), b.Reactor, yesNo(b.Enabled)}
		if wide {
			row = append(row, labelsString(b.LabelMatch))
		}
		out[i] = append(row, a.age(b.CreatedAt))
	}
	return renderTable(a.stdout(), header, out)
}

func (a *app) memberTable(rows []MemberRow) error {
	wide := a.output == outWide
	header := []string{"ID", "ROLE", "STATUS", "SHARDS", "IN-FLIGHT", "WORKERS", "VERSION", "HEARTBEAT", "AGE"}
	if wide {
		header = []string{"ID", "ROLE", "STATUS", "SHARDS", "IN-FLIGHT", "WORKERS", "VERSION", "HEARTBEAT", "HOST", "PID", "KINDS", "AGE"}
	}
	out := make([][]string, len(rows))
	for i, m := range rows {
		workers := itoa(m.Workers)
		if m.Role == MemberRoleControl {
			workers = "-"
		}
		row := []string{m.Id, string(m.Role), string(m.Status), shardSpan(m.ShardLo, m.ShardHi), itoa(m.InFlight),
			workers, m.Version, a.age(m.LastHeartbeat) + " ago"}
		if wide {
			kinds := "<all>"
			if len(m.Kinds) > 0 {
				kinds = strings.Join(m.Kinds, ",")
			}
			row = append(row, m.Host, itoa(m.Pid), kinds)
		}
		out[i] = append(row, a.age(m.StartedAt))
	}
	return renderTable(a.stdout(), header, out)
}

func (a *app) operationTable(rows []OperationRow) error {
	wide := a.output == outWide
	header := []string{"ID", "VERB", "RESOURCE", "STATE", "AGE"}
	if wide {
		header = []string{"ID", "VERB", "RESOURCE", "STATE", "INPUT", "OUTPUT", "ERROR", "AGE"}
	}
	out := make([][]string, len(rows))
	for i, o := range rows {
		row := []string{o.Id, o.Verb, o.Resource.Kind + "/" + o.Resource.Name, string(o.State)}
		if wide {
			row = append(row, compact(o.Input), compact(o.Output), orNone(o.Error))
		}
		out[i] = append(row, a.age(o.CreatedAt))
	}
	return renderTable(a.stdout(), header, out)
}

// phaseCountLine renders counts as "READY 5  RECONCILING 1" (zeros
// skipped; "none" when empty).
func phaseCountLine(counts map[Phase]int) string {
	var parts []string
	for _, p := range AllPhase {
		if n := counts[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
