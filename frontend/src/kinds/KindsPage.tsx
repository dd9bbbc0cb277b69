// Kinds: every applied manifest, its reactions and schemas, its live
// operational policy (editable), and applying a manifest.
// URL: /kinds?sel=name&version=v&apply=1
import { useEffect, useRef, useState } from 'react';
import { Link, navigate, useLocation, withQuery } from '../app/router';
import { useSession } from '../app/session';
import { fieldErrors, type FieldError } from '../client/errors';
import { useMutation, useQuery, useSubscriptionValue } from '../client/hooks';
import { ApplyKindManifestDocument, KindDetailDocument, KindsDocument, KindsLiveDocument, PhaseCountsLiveDocument, UpdateKindConfigDocument, type JSONValue, type KindSummaryFragment } from '../gql/graphql';
import { JsonEditor, JsonView, parseJSON } from '../json/JsonEditor';
import { countsInOrder, formatCount, formatTime, phaseClass, phaseLabel, prettyJSON } from '../resources/mappers';
import { emptyList, listSearch } from '../resources/filters';
import { ErrorBox } from '../widgets/ErrorBox';
import { breakingChange, MANIFEST_TEMPLATE, outcomesText, policyDraft, policyInput, reactionRole, rebaseDraft, triggerText, type PolicyDraft, type PolicyField } from './mappers';

function kindsHref(sel: string | null, version: string | null, apply = false) {
  const q = new URLSearchParams();
  if (sel) q.set('sel', sel);
  if (version) q.set('version', version);
  if (apply) q.set('apply', '1');
  return withQuery('/kinds', q);
}

export function KindsPage() {
  const { search } = useLocation();
  const sel = search.get('sel');
  const version = search.get('version');
  const applying = search.get('apply') === '1';
  const query = useQuery(KindsDocument, {});
  // Live across clients: the server pushes every kind on each manifest
  // apply and policy edit; the query is the first paint.
  const live = useSubscriptionValue(KindsLiveDocument, {});
  const kinds = { ...query, data: live.data ?? query.data };
  const selected = kinds.data?.kinds.find((k) => k.name === sel && (!version || version === k.version));
  const stamp = selected ? `${selected.manifestGeneration}|${selected.config.updatedAt}` : '';
  const { canMutate } = useSession();
  return (
    <section className={`page kinds-page${sel ? ' with-detail' : ''}`}>
      <div className="list-pane">
        <h1>Kinds</h1>
        <div className="actions">
          <button type="button" onClick={() => navigate(kindsHref(sel, version, !applying))} aria-expanded={applying} disabled={!canMutate}>
            Apply a manifest
          </button>
        </div>
        {applying ? <ManifestForm initial={MANIFEST_TEMPLATE} onApplied={(k) => { kinds.refetch(); navigate(kindsHref(k.name, k.version)); }} onCancel={() => navigate(kindsHref(sel, version))} /> : null}
        <ErrorBox error={kinds.error} />
        {kinds.data && kinds.data.kinds.length === 0 ? <p className="empty">No kinds applied yet.</p> : null}
        {kinds.data?.kinds.length ? (
          <div className="table-wrap">
            <table className="grid" data-testid="kinds">
              <thead>
                <tr>
                  <th scope="col">Kind</th>
                  <th scope="col">Version</th>
                  <th scope="col">Type</th>
                  <th scope="col">Reactions</th>
                  <th scope="col" className="num">Resources</th>
                  <th scope="col" className="num">Served by</th>
                  <th scope="col" className="num">Cap</th>
                  <th scope="col">Updated</th>
                </tr>
              </thead>
              <tbody>
                {kinds.data.kinds.map((k) => (
                  <tr key={`${k.name}@${k.version}`} aria-selected={k.name === sel && (!version || version === k.version)}>
                    <th scope="row">
                      <Link to={kindsHref(k.name, k.version)}>{k.name}</Link>
                    </th>
                    <td>{k.version}</td>
                    <td>{k.isReactor ? 'reactor' : 'work'}</td>
                    <td>{k.reactions.map((r) => reactionRole(r)).join(', ')}</td>
                    <td className="num">{k.isReactor ? '—' : formatCount(k.usage.resources)}</td>
                    <td className="num" title="live members with a worker serving this version">
                      {k.usage.servedBy}
                    </td>
                    <td className="num">{k.config.maxInflight || '∞'}</td>
                    <td>{formatTime(k.updatedAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
      </div>
      {sel ? <KindDetail key={`${sel}@${version ?? ''}`} name={sel} version={version} stamp={stamp} onChanged={kinds.refetch} onClose={() => navigate(kindsHref(null, null))} /> : null}
    </section>
  );
}

function KindDetail({ name, version, stamp, onChanged, onClose }: { name: string; version: string | null; stamp: string; onChanged: () => void; onClose: () => void }) {
  const q = useQuery(KindDetailDocument, { name, version });
  // Another client changed this kind (manifest or policy): re-read it.
  const seen = useRef(stamp);
  const refetch = q.refetch;
  useEffect(() => {
    if (stamp && seen.current && stamp !== seen.current) refetch();
    seen.current = stamp;
  }, [stamp, refetch]);
  const [editing, setEditing] = useState(false);
  const { canMutate } = useSession();
  const k = q.data?.kind;
  return (
    <aside className="detail" aria-labelledby="kind-h" data-testid="kind-detail">
      <header className="detail-head">
        <h2 id="kind-h">
          {name} <span className="muted">{k?.version ?? version ?? ''}</span>
        </h2>
        <button type="button" className="close" onClick={onClose} aria-label="Close the kind">
          ×
        </button>
      </header>
      <ErrorBox error={q.error} />
      {q.data && !k ? <p className="empty">No such kind.</p> : null}
      {k ? (
        <>
          {k.description ? <p>{k.description}</p> : null}
          <p>
            <Link to={`/resources?${listSearch({ ...emptyList, kind: k.name }).toString()}`}>Its resources</Link>
            {k.finalizerName ? (
              <>
                {' '}
                · finalizer <code>{k.finalizerName}</code>
              </>
            ) : null}{' '}
            · manifest generation {k.manifestGeneration}
          </p>
          {!k.isReactor ? <KindCounts kind={k.name} /> : null}
          <section className="detail-section" aria-labelledby="k-reactions">
            <h3 id="k-reactions">Reactions</h3>
            <table className="grid compact">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Trigger</th>
                  <th scope="col">Emits</th>
                  <th scope="col">Role</th>
                </tr>
              </thead>
              <tbody>
                {k.reactions.map((r) => (
                  <tr key={r.name}>
                    <th scope="row">{r.name}</th>
                    <td>{triggerText(r.trigger)}</td>
                    <td>{outcomesText(r.emits)}</td>
                    <td>{reactionRole(r)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </section>
          <PolicyForm kind={k} onSaved={() => { q.refetch(); onChanged(); }} />
          <section className="detail-section" aria-labelledby="k-schemas">
            <h3 id="k-schemas">Schemas</h3>
            <h4>Spec</h4>
            <JsonView value={k.specSchema} label="Spec schema" />
            <h4>Status</h4>
            <JsonView value={k.statusSchema} label="Status schema" />
            <h4>Config</h4>
            <JsonView value={k.configSchema} label="Config schema" />
          </section>
          <section className="detail-section" aria-labelledby="k-manifest">
            <h3 id="k-manifest">Manifest</h3>
            <button type="button" onClick={() => setEditing((e) => !e)} aria-expanded={editing} disabled={!canMutate}>
              Edit and re-apply
            </button>
            {editing ? (
              <ManifestForm initial={prettyJSON(k.manifest)} onApplied={() => { setEditing(false); q.refetch(); onChanged(); }} onCancel={() => setEditing(false)} />
            ) : (
              <JsonView value={k.manifest} label="Manifest" />
            )}
          </section>
        </>
      ) : null}
    </aside>
  );
}

function KindCounts({ kind }: { kind: string }) {
  const { data } = useSubscriptionValue(PhaseCountsLiveDocument, { kind });
  return (
    <ul className="tiles small" aria-label={`${kind} resources by phase`}>
      {countsInOrder(data?.phaseCounts).map(({ phase, count }) => (
        <li key={phase} className={`tile ${phaseClass(phase)}`}>
          <Link to={`/resources?${listSearch({ ...emptyList, kind, phases: [phase] }).toString()}`}>
            <span className="tile-count">{data ? formatCount(count) : '…'}</span>
            <span className="tile-label">{phaseLabel(phase)}</span>
          </Link>
        </li>
      ))}
    </ul>
  );
}

const POLICY_FIELDS: Array<{ f: PolicyField; label: string; help: string }> = [
  { f: 'maxInflight', label: 'Max in flight', help: 'global concurrency cap; 0 = unlimited' },
  { f: 'taskDeadlineSecs', label: 'Task deadline (s)', help: '0 = none' },
  { f: 'resyncIntervalSecs', label: 'Resync interval (s)', help: '0 = off' },
  { f: 'orphanGraceSecs', label: 'Orphan grace (s)', help: '0 = prune at once' },
  { f: 'maxTransientAttempts', label: 'Dead-letter after', help: 'transient failures in a row; 0 = retry forever' },
];

function PolicyForm({ kind, onSaved }: { kind: KindSummaryFragment; onSaved: () => void }) {
  const { canMutate } = useSession();
  const [draft, setDraft] = useState<PolicyDraft>(() => policyDraft(kind.config));
  // A re-read (a reconnection, another client's manifest apply or policy
  // edit) moves the fields the user has not edited to the served values and
  // keeps the edits: a new config object alone changes nothing.
  const served = policyDraft(kind.config);
  const servedKey = JSON.stringify(served);
  const base = useRef(served);
  useEffect(() => {
    const old = base.current;
    base.current = served;
    setDraft((d) => rebaseDraft(d, old, served));
  }, [servedKey]);
  const [save, state] = useMutation(UpdateKindConfigDocument);
  const { input, errors } = policyInput(draft, kind.config);
  const policyField = (f: string) => (x: FieldError) => x.field === f || x.field === `input/${f}` || x.pointer === `/${f}`;
  const server = fieldErrors(state.error, (x) => POLICY_FIELDS.some(({ f }) => policyField(f)(x)));
  const changed = Object.keys(input).length > 0;
  return (
    <form
      className="detail-section policy"
      aria-labelledby="k-policy"
      onSubmit={(e) => {
        e.preventDefault();
        if (Object.keys(errors).length || !changed) return;
        save({ kind: kind.name, version: kind.version, input }).then(onSaved, () => {});
      }}
    >
      <h3 id="k-policy">Live policy</h3>
      <p className="muted">Applies on the next claim or tick; no restart. Last changed {formatTime(kind.config.updatedAt)}.</p>
      <div className="form-grid">
        {POLICY_FIELDS.map(({ f, label, help }) => {
          const err = errors[f] ?? server.fields.find(policyField(f))?.message;
          return (
            <div className="field" key={f}>
              <label htmlFor={`p-${f}`}>{label}</label>
              <input id={`p-${f}`} inputMode="numeric" value={draft[f]} aria-invalid={!!err || undefined} aria-describedby={`p-${f}-h`} onChange={(e) => setDraft({ ...draft, [f]: e.target.value })} disabled={!canMutate} />
              <span id={`p-${f}-h`} className={err ? 'field-error' : 'muted'}>
                {err ?? help}
              </span>
            </div>
          );
        })}
        <div className="field checkbox">
          <input id="p-recompose" type="checkbox" checked={draft.resyncRecomposes} onChange={(e) => setDraft({ ...draft, resyncRecomposes: e.target.checked })} disabled={!canMutate} />
          <label htmlFor="p-recompose">A resync also re-runs the composer</label>
        </div>
      </div>
      {server.general.length ? <ErrorBox error={server.general.join('; ')} /> : null}
      <div className="form-actions">
        <button type="submit" className="primary" disabled={!canMutate || !changed || state.running || Object.keys(errors).length > 0}>
          {state.running ? 'Saving…' : 'Save policy'}
        </button>
        <button type="button" disabled={!changed} onClick={() => setDraft(policyDraft(kind.config))}>
          Reset
        </button>
      </div>
    </form>
  );
}

function ManifestForm({ initial, onApplied, onCancel }: { initial: string; onApplied: (k: KindSummaryFragment) => void; onCancel: () => void }) {
  const [text, setText] = useState(initial);
  const [apply, state] = useMutation(ApplyKindManifestDocument);
  const breaking = breakingChange(state.error);
  const fe = fieldErrors(breaking ? null : state.error);
  const submit = (acceptBreaking: boolean) => {
    const m = parseJSON(text);
    if (!m.ok) return;
    apply({ manifest: m.value as JSONValue, acceptBreaking }).then((r) => onApplied(r.applyKindManifest), () => {});
  };
  return (
    <form
      className="editor"
      aria-label="Apply a kind manifest"
      onSubmit={(e) => {
        e.preventDefault();
        submit(false);
      }}
    >
      <JsonEditor label="Manifest (JSON, the kind fixture format)" value={text} onChange={setText} rows={16} errors={fe.fields.filter((f) => f.field === 'manifest')} />
      {fe.fields.filter((f) => f.field !== 'manifest').map((f, i) => (
        <p key={i} className="field-error" role="alert">
          {f.field}
          {f.pointer}: {f.message}
        </p>
      ))}
      {fe.general.length ? <ErrorBox error={fe.general.join('; ')} /> : null}
      {breaking ? (
        <div className="error-box" role="alert" data-testid="breaking-change">
          <p>
            The new spec schema breaks {formatCount(breaking.resourceCount)} stored resource{breaking.resourceCount === 1 ? '' : 's'}: {breaking.resources.join(', ')}
            {breaking.resourceCount > breaking.resources.length ? ` and ${formatCount(breaking.resourceCount - breaking.resources.length)} more` : ''}.
          </p>
          <p>Fields: {breaking.fields.join(', ')}. Publish it as a new version (a new <code>version</code>), or accept it.</p>
          <button type="button" className="danger" disabled={state.running} onClick={() => submit(true)}>
            Apply anyway (accept breaking)
          </button>
        </div>
      ) : null}
      <div className="form-actions">
        <button type="submit" className="primary" disabled={state.running}>
          {state.running ? 'Applying…' : 'Apply manifest'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
