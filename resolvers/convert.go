package resolvers

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/graph/model"
)

// The core ↔ GraphQL mappings: enums are UPPER_SNAKE in GraphQL and the
// database's words in core.

func toPhase(p resource.Phase) model.Phase { return model.Phase(strings.ToUpper(string(p))) }

func fromPhases(in []model.Phase) []resource.Phase {
	if len(in) == 0 {
		return nil
	}
	out := make([]resource.Phase, len(in))
	for i, p := range in {
		out[i] = fromPhase(p)
	}
	return out
}

func fromPhase(p model.Phase) resource.Phase {
	s := strings.ToLower(string(p))
	if s == "" {
		return ""
	}
	return resource.Phase(strings.ToUpper(s[:1]) + s[1:])
}

func toResource(r resource.Resource) *model.Resource {
	labels, _ := json.Marshal(r.Labels)
	m := &model.Resource{
		ID: r.ID.String(), Kind: r.Kind, Version: r.Version, Name: r.Name,
		Labels: labels, Spec: r.Spec, Status: r.Status,
		Phase: toPhase(r.Phase), Ready: r.Ready,
		Generation: r.Generation, SyncedGeneration: r.SyncedGen, HealthOk: r.HealthOK,
		FailureGeneration: r.FailureGen, Finalizers: r.Finalizers,
		DeletionRequestedAt: r.DeletionRequestedAt, FrozenUntil: r.FrozenUntil,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		ComposedGeneration: r.ComposedGen, FailureTerminal: r.FailureTerminal, Quarantined: r.Quarantined,
		ShardID: r.ShardID, UUID: r.ID, OwnerID: r.OwnerID, RootID: r.RootID,
	}
	if len(m.Spec) == 0 {
		m.Spec = json.RawMessage(`{}`)
	}
	if m.Finalizers == nil {
		m.Finalizers = []string{}
	}
	if r.ProviderConfigRef != "" {
		ref := r.ProviderConfigRef
		m.ProviderConfigRef = &ref
	}
	return m
}

// toPlanned is toResource for a mutation's answer: dryRun marks it a
// dry run's would-be resource (model.Resource.Planned).
func toPlanned(r resource.Resource, dryRun bool) *model.Resource {
	m := toResource(r)
	m.Planned = dryRun
	return m
}

// fromResource is the core row a model was made from (toResource's inverse),
// for the pure core functions a nested field needs (synthesised conditions).
func fromResource(m *model.Resource) resource.Resource {
	var labels map[string]string
	_ = json.Unmarshal(m.Labels, &labels)
	r := resource.Resource{
		ID: m.UUID, Kind: m.Kind, Version: m.Version, Name: m.Name,
		Labels: labels, Spec: m.Spec, Status: m.Status,
		Phase: fromPhase(m.Phase), Ready: m.Ready,
		Generation: m.Generation, SyncedGen: m.SyncedGeneration, ComposedGen: m.ComposedGeneration,
		HealthOK: m.HealthOk, FailureGen: m.FailureGeneration, FailureTerminal: m.FailureTerminal,
		Finalizers: m.Finalizers, DeletionRequestedAt: m.DeletionRequestedAt, FrozenUntil: m.FrozenUntil,
		Quarantined: m.Quarantined, OwnerID: m.OwnerID, RootID: m.RootID, ShardID: m.ShardID,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
	}
	if m.ProviderConfigRef != nil {
		r.ProviderConfigRef = *m.ProviderConfigRef
	}
	return r
}

func toResources(rs []resource.Resource) []*model.Resource {
	out := make([]*model.Resource, len(rs))
	for i, r := range rs {
		out[i] = toResource(r)
	}
	return out
}

func toPage(p store.Page) *model.ResourcePage {
	return &model.ResourcePage{Items: toResources(p.Items), NextCursor: optString(p.NextCursor)}
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toCondition(c resource.Condition) *model.Condition {
	return &model.Condition{
		Type: c.Type, Status: model.ConditionStatus(strings.ToUpper(string(c.Status))),
		Reason: optString(c.Reason), Message: optString(c.Message),
		LastTransitionTime: c.LastTransitionTime, ObservedGeneration: int(c.ObservedGeneration),
		Synthesized: c.Synthesized,
	}
}

func toProviderConfig(pc store.ProviderConfig) *model.ProviderConfig {
	spec := pc.Spec
	if len(spec) == 0 {
		spec = json.RawMessage(`{}`)
	}
	return &model.ProviderConfig{
		ID: pc.ID.String(), Kind: pc.Kind, Name: pc.Name, IsDefault: pc.IsDefault,
		Spec: spec, Data: pc.Data, CreatedAt: pc.CreatedAt, UpdatedAt: pc.UpdatedAt, OwnerID: pc.OwnerID,
	}
}

func toKindConfig(c store.KindConfig) *model.KindConfig {
	return &model.KindConfig{
		MaxInflight: c.MaxInflight, TaskDeadlineSecs: c.TaskDeadlineSecs, ResyncIntervalSecs: c.ResyncIntervalSecs,
		ResyncRecomposes: c.ResyncRecomposes, OrphanGraceSecs: c.OrphanGraceSecs, UpdatedAt: c.UpdatedAt,
		MaxTransientAttempts: c.MaxTransientAttempts,
	}
}

var triggerNames = map[manifest.Trigger]model.Trigger{
	manifest.TriggerSpecChange:      model.TriggerSpecChange,
	manifest.TriggerChildrenSettled: model.TriggerChildrenSettled,
	manifest.TriggerDeleteRequested: model.TriggerDeleteRequested,
	manifest.TriggerOperation:       model.TriggerOperation,
	manifest.TriggerReactor:         model.TriggerReactor,
	manifest.TriggerResync:          model.TriggerResync,
}

var outcomeNames = map[manifest.OutcomeBit]model.Outcome{
	manifest.OutcomeChildren:        model.OutcomeChildren,
	manifest.OutcomeEdges:           model.OutcomeEdges,
	manifest.OutcomeConfigs:         model.OutcomeConfigs,
	manifest.OutcomeStatus:          model.OutcomeStatus,
	manifest.OutcomeConditions:      model.OutcomeConditions,
	manifest.OutcomeFinalizer:       model.OutcomeFinalizer,
	manifest.OutcomeOperationOutput: model.OutcomeOperationOutput,
	manifest.OutcomeSideEffect:      model.OutcomeSideEffect,
}

// readParts maps each read bit to its GraphQL part, in canonical order.
var readParts = []struct {
	bit  manifest.ReadBit
	part model.ResourcePart
}{
	{manifest.ReadSpec, model.ResourcePartSpec},
	{manifest.ReadStatus, model.ResourcePartStatus},
	{manifest.ReadLabels, model.ResourcePartLabels},
	{manifest.ReadFinalizers, model.ResourcePartFinalizers},
	{manifest.ReadChildStatus, model.ResourcePartChildStatus},
}

// toReads lists the parts a reaction's handler receives: its effective
// reads (every part when it declares none).
func toReads(r manifest.ReactionDecl) []model.ResourcePart {
	reads := r.Reading()
	out := []model.ResourcePart{}
	for _, p := range readParts {
		if reads.Has(p.bit) {
			out = append(out, p.part)
		}
	}
	return out
}

func toKind(k store.Kind) *model.Kind {
	m := k.Manifest
	out := &model.Kind{
		Name: k.Name, Version: k.Version, Description: optString(m.Description),
		SpecSchema: m.SpecSchema, StatusSchema: m.StatusSchema, ConfigSchema: m.ConfigSchema,
		FinalizerName: optString(m.Finalizer()), IsReactor: k.IsReactor,
		Config: toKindConfig(k.Config), Manifest: k.Raw, ManifestGeneration: int(k.ManifestGen),
		CreatedAt: k.CreatedAt, UpdatedAt: k.UpdatedAt, Reactions: make([]*model.Reaction, len(m.Reactions)),
	}
	for i, r := range m.Reactions {
		emits := []model.Outcome{}
		for _, b := range r.Emits.Bits() {
			emits = append(emits, outcomeNames[b])
		}
		out.Reactions[i] = &model.Reaction{Name: r.Name, Trigger: triggerNames[r.Trigger], Emits: emits,
			Reads: toReads(r), Verb: optString(r.Verb), Finalizer: optString(r.Finalizer)}
	}
	return out
}

func toTransition(t manifest.Transition) model.Transition {
	return model.Transition(strings.ToUpper(string(t)))
}

func fromTransition(t model.Transition) manifest.Transition {
	return manifest.Transition(strings.ToLower(string(t)))
}

func toBinding(b store.ReactorBinding) *model.ReactorBinding {
	lm, _ := json.Marshal(b.LabelMatch)
	return &model.ReactorBinding{
		Name: b.Name, WatchKind: b.WatchKind, Transition: toTransition(b.Transition), Reactor: b.Reactor,
		LabelMatch: lm, Enabled: b.Enabled, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
	}
}

func toOperation(op resource.Operation) *model.Operation {
	return &model.Operation{
		ID: op.ID.String(), Verb: op.Verb, Input: op.Input, Output: op.Output,
		State: model.OperationState(strings.ToUpper(string(op.State))), Error: optString(op.Error),
		CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt, FinishedAt: op.FinishedAt, ResourceID: op.ResourceID,
	}
}

func toMember(m live.Member) *model.ClusterMember {
	out := &model.ClusterMember{
		ID: m.ID, Role: model.MemberRole(strings.ToUpper(m.Role)), Status: model.MemberStatusNotReady,
		Kinds: m.Kinds, InFlight: m.InFlight, Workers: m.Workers, Version: m.Version, Host: m.Host, Pid: m.PID,
		StartedAt: m.StartedAt, LastHeartbeat: m.LastHeartbeat, Config: m.Config,
	}
	if m.Ready {
		out.Status = model.MemberStatusReady
	}
	switch m.Request.Action {
	case membership.ActionDrain:
		out.Status, out.RequestedAction = model.MemberStatusDraining, ptr(model.MemberActionDrain)
	case membership.ActionKill:
		out.Status, out.RequestedAction = model.MemberStatusKilled, ptr(model.MemberActionKill)
	}
	if m.Request.Pending() {
		out.RequestedBy, out.RequestedAt = &m.Request.By, m.Request.At
	}
	if out.Kinds == nil {
		out.Kinds = []string{}
	}
	if len(out.Config) == 0 {
		out.Config = json.RawMessage(`{}`)
	}
	if m.Shards != nil {
		lo, hi := m.Shards.Lo, m.Shards.Hi
		out.ShardLo, out.ShardHi = &lo, &hi
	}
	return out
}

func toMembers(ms []live.Member) []*model.ClusterMember {
	out := make([]*model.ClusterMember, len(ms))
	for i, m := range ms {
		out[i] = toMember(m)
	}
	return out
}

func toPhaseCounts(cs []resource.PhaseCount) []*model.PhaseCount {
	out := make([]*model.PhaseCount, len(cs))
	for i, c := range cs {
		out[i] = &model.PhaseCount{Phase: toPhase(c.Phase), Count: int(c.Count)}
	}
	return out
}

func toEvent(c live.Change) *model.ResourceEvent {
	ev := &model.ResourceEvent{Kind: c.Kind, Name: c.Name}
	switch c.Type {
	case live.Upserted:
		ev.Type, ev.ID, ev.Resource = model.ResourceEventTypeUpserted, c.ID.String(), toResource(*c.Resource)
	case live.Deleted:
		ev.Type, ev.ID = model.ResourceEventTypeDeleted, c.ID.String()
	default:
		ev.Type = model.ResourceEventTypeResync
	}
	if c.PreviousPhase != "" {
		p := toPhase(c.PreviousPhase)
		ev.PreviousPhase = &p
	}
	return ev
}

// parseID reads an ID argument that must be a UUID.
func parseID(field, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, &store.InvalidError{Field: field, Rule: "id_invalid", Message: fmt.Sprintf("%q is not an id (a UUID)", s)}
	}
	return id, nil
}

// labelMap reads a JSON labels argument: absent or null → nil.
func labelMap(field string, raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, &store.InvalidError{Field: field, Rule: "type", Message: "must be a JSON object of strings"}
	}
	return m, nil
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

func errPhase(p resource.Phase) error {
	return &store.InvalidError{Field: "phases", Rule: "phase_invalid", Message: fmt.Sprintf("unknown phase %q", p)}
}

func toSubtreeMember(m live.SubtreeMember) *model.SubtreeMember {
	out := &model.SubtreeMember{ID: m.ID.String(), Kind: m.Kind, Name: m.Name, Phase: toPhase(m.Phase),
		FailureTerminal: m.FailureTerminal}
	if m.OwnerID != nil {
		o := m.OwnerID.String()
		out.OwnerID = &o
	}
	if m.Reason != "" || m.Message != "" {
		out.Reason, out.Message = &m.Reason, &m.Message
	}
	return out
}

func toSubtreeProgress(p live.SubtreeProgress) *model.SubtreeProgress {
	out := &model.SubtreeProgress{RootID: p.RootID.String(), Total: p.Total, Ready: p.Ready,
		FailureCount: p.FailureCount, Counts: make([]*model.KindPhaseCount, len(p.Counts)),
		Failures: make([]*model.SubtreeMember, len(p.Failures))}
	if p.Root != nil {
		out.Root = toSubtreeMember(*p.Root)
	}
	for i, c := range p.Counts {
		out.Counts[i] = &model.KindPhaseCount{Kind: c.Kind, Phase: toPhase(c.Phase), Count: c.Count}
	}
	for i, f := range p.Failures {
		out.Failures[i] = toSubtreeMember(f)
	}
	return out
}
