// Package resource holds the resource model the API and the runtime share:
// the stored phase, conditions and the resource row as core types.
package resource

// Phase is the single readiness signal, a STORED GENERATED column computed in
// the database from synced_gen, generation, health_ok, failure_gen,
// frozen_until and deletion_requested_at. Nothing above the database
// re-derives it.
type Phase string

// The seven phases, in precedence order (top wins).
const (
	PhaseDeleting    Phase = "Deleting"
	PhaseQuarantined Phase = "Quarantined"
	PhaseFailed      Phase = "Failed"
	PhaseOrphaned    Phase = "Orphaned"
	PhaseDegraded    Phase = "Degraded"
	PhaseReady       Phase = "Ready"
	PhaseReconciling Phase = "Reconciling"
)

// AllPhases lists every phase in precedence order.
var AllPhases = []Phase{PhaseDeleting, PhaseQuarantined, PhaseFailed, PhaseOrphaned, PhaseDegraded, PhaseReady, PhaseReconciling}

// Valid reports whether p is one of the seven phases.
func (p Phase) Valid() bool {
	for _, x := range AllPhases {
		if p == x {
			return true
		}
	}
	return false
}
