// DeadLetter: the banner the detail panel shows when a resource's reconcile
// was dead-lettered (its kind's max_transient_attempts transient failures in
// a row): why it stopped retrying, and what starts it again.
import { useEffect, useRef } from 'react';
import { Link } from '../app/router';
import { useQuery } from '../client/hooks';
import { ResourceDeadLetterDocument } from '../gql/graphql';
import type { ResourceRef } from './filters';
import { formatTime } from './mappers';

/** Re-read when stamp changes (the panel passes generation and updatedAt). */
export function DeadLetter({ target, stamp }: { target: ResourceRef; stamp: string }) {
  const q = useQuery(ResourceDeadLetterDocument, { kind: target.kind, name: target.name });
  const seen = useRef(stamp);
  const refetch = q.refetch;
  useEffect(() => {
    if (stamp !== seen.current) refetch();
    seen.current = stamp;
  }, [stamp, refetch]);
  const r = q.data?.resource;
  const dl = r?.deadLetter;
  if (!dl) return null;
  const def = r.definition;
  return (
    <section className="dead-letter error-box" role="alert" aria-labelledby="dl-h" data-testid="dead-letter">
      <h3 id="dl-h">Dead-lettered: retries stopped</h3>
      <p>{dl.message}</p>
      <p className="muted">
        Generation {dl.generation}, since {formatTime(dl.since)}. It stays FAILED until its spec changes (a new generation gets a fresh budget)
        {def ? (
          <>
            ; the bound is the kind&apos;s <Link to={`/kinds?sel=${encodeURIComponent(def.name)}&version=${encodeURIComponent(def.version)}`}>dead-letter policy</Link> ({def.config.maxTransientAttempts || 'never'})
          </>
        ) : null}
        .
      </p>
    </section>
  );
}
