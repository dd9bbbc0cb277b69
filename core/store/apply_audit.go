package store

import (
	"context"
	"fmt"
)

// applyAuditDDL is the chaos suite's drain instrument: a row-level trigger
// that records every change of a resource's status whose document carries
// the demo worker's claim stamp ({"epoch": …, "run": …}). A result the drain
// applies changes the status (each execution stamps a fresh run id), so the
// table holds one row per applied result; two rows for one (resource, epoch)
// are one claim applied twice. A harness object for a scratch database,
// never part of the schema.
const applyAuditDDL = `
CREATE TABLE IF NOT EXISTS apply_audit (
    resource_id uuid NOT NULL,
    claim_epoch bigint NOT NULL,
    run         text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION apply_audit_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO apply_audit (resource_id, claim_epoch, run)
    VALUES (NEW.id, (NEW.status->>'epoch')::bigint, NEW.status->>'run');
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS apply_audit ON resources;
CREATE TRIGGER apply_audit AFTER UPDATE OF status ON resources FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status AND NEW.status ? 'epoch')
    EXECUTE FUNCTION apply_audit_record();`

// InstallApplyAudit arms the apply audit (see applyAuditDDL) in a scratch
// database: the chaos suite's, never a production one.
func (s *Store) InstallApplyAudit(ctx context.Context) error {
	if _, err := s.primary.Exec(ctx, applyAuditDDL); err != nil {
		return fmt.Errorf("install the apply audit: %w", err)
	}
	return nil
}

// AppliedTwice counts the claims (resource, claim_epoch) the audit saw more
// than one result applied for, and the resources that had results of more
// than one claim applied.
func (s *Store) AppliedTwice(ctx context.Context) (claims, resources int, err error) {
	err = s.primary.QueryRow(ctx, `
SELECT (SELECT count(*) FROM (SELECT 1 FROM apply_audit GROUP BY resource_id, claim_epoch HAVING count(*) > 1) c),
       (SELECT count(*) FROM (SELECT 1 FROM apply_audit GROUP BY resource_id HAVING count(DISTINCT claim_epoch) > 1) r)`).
		Scan(&claims, &resources)
	if err != nil {
		return 0, 0, fmt.Errorf("read the apply audit: %w", err)
	}
	return claims, resources, nil
}
