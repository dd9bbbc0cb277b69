// The detail panel's spec history: the kept generations (Resource.specHistory),
// the server's diff of a chosen one against the one before it
// (Resource.specDiff), and a rollback to it (rollbackResource: a new
// generation carrying the old spec, recorded with who did it).
import { useEffect, useRef, useState } from 'react';
import { useSession } from '../app/session';
import { useMutation, useQuery } from '../client/hooks';
import { ResourceSpecDiffDocument, ResourceSpecHistoryDocument, RollbackResourceToDocument } from '../gql/graphql';
import { ConfirmDialog } from '../widgets/Dialog';
import { ErrorBox } from '../widgets/ErrorBox';
import type { ResourceRef } from './filters';
import { formatTime } from './mappers';

export function HistoryDiff({ target, generation, onChanged }: { target: ResourceRef; generation: number; onChanged: () => void }) {
  const { canMutate } = useSession();
  const h = useQuery(ResourceSpecHistoryDocument, target);
  const { refetch } = h;
  // Re-read when a new generation is applied (the first read is the query's own).
  const seen = useRef(generation);
  useEffect(() => {
    if (generation !== seen.current) refetch();
    seen.current = generation;
  }, [generation, refetch]);
  const items = h.data?.resource?.specHistory ?? [];
  const [sel, setSel] = useState<number | null>(null);
  const [confirm, setConfirm] = useState<number | null>(null);
  const [rollback, rb] = useMutation(RollbackResourceToDocument);
  const idx = items.findIndex((x) => x.generation === sel);
  const prev = idx >= 0 ? items[idx + 1] : undefined;
  const diff = useQuery(ResourceSpecDiffDocument, { ...target, from: prev?.generation ?? 0, to: sel }, { skip: !prev || sel == null });
  if (h.error) return <ErrorBox error={h.error} />;
  if (items.length === 0) return <p className="muted">none kept</p>;
  return (
    <div className="spec-history" data-testid="spec-history">
      <ErrorBox error={rb.error} />
      <table className="grid compact">
        <thead>
          <tr>
            <th scope="col">Generation</th>
            <th scope="col">Reason</th>
            <th scope="col">By</th>
            <th scope="col">Applied</th>
            <th scope="col">
              <span className="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {items.map((x) => (
            <tr key={x.generation} data-generation={x.generation} className={x.generation === sel ? 'selected' : undefined}>
              <td>
                {x.generation}
                {x.generation === generation ? <span className="muted"> (live)</span> : null}
              </td>
              <td>
                {x.reason}
                {x.rolledBackFrom != null ? <span className="muted"> from {x.rolledBackFrom}</span> : null}
              </td>
              <td>{x.actor}</td>
              <td>{formatTime(x.createdAt)}</td>
              <td>
                <button type="button" onClick={() => setSel(x.generation === sel ? null : x.generation)} aria-pressed={x.generation === sel}>
                  Diff
                </button>{' '}
                {x.generation < generation ? (
                  <button type="button" onClick={() => setConfirm(x.generation)} disabled={!canMutate || rb.running} title={canMutate ? undefined : 'Your token is read-only (viewer)'}>
                    Roll back
                  </button>
                ) : null}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {sel != null && !prev ? <p className="muted">Generation {sel} is the oldest kept: nothing to diff against.</p> : null}
      {sel != null && prev ? <DiffView loading={diff.loading} error={diff.error} d={diff.data?.resource?.specDiff} /> : null}
      {confirm != null ? (
        <ConfirmDialog
          title={`Roll back ${target.kind}/${target.name}`}
          message={`Apply generation ${confirm}'s spec and labels again, as generation ${generation + 1}?`}
          confirm="Roll back"
          busy={rb.running}
          onCancel={() => setConfirm(null)}
          onConfirm={() =>
            rollback({ ...target, toGeneration: confirm }).then(
              () => {
                setConfirm(null);
                onChanged();
              },
              () => setConfirm(null),
            )
          }
        />
      ) : null}
    </div>
  );
}

type Change = { path: string; before?: unknown; after?: unknown };

function DiffView({ loading, error, d }: { loading: boolean; error: Parameters<typeof ErrorBox>[0]['error']; d?: { from: number; to: number; spec: Change[]; labels: Change[] } }) {
  if (error) return <ErrorBox error={error} />;
  if (!d) return loading ? <p className="muted">Loading…</p> : null;
  const rows = [...d.spec.map((c) => ({ ...c, path: `spec${c.path}` })), ...d.labels.map((c) => ({ ...c, path: `labels${c.path}` }))];
  return (
    <div className="spec-diff" data-testid="spec-diff">
      <p className="muted">
        Generation {d.from} → {d.to}
      </p>
      {rows.length === 0 ? (
        <p className="muted">no spec or labels change</p>
      ) : (
        <ul className="diff">
          {rows.map((c) => (
            <li key={c.path}>
              {c.before != null ? <div className="del">{`- ${c.path}: ${JSON.stringify(c.before)}`}</div> : null}
              {c.after != null ? <div className="add">{`+ ${c.path}: ${JSON.stringify(c.after)}`}</div> : null}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
