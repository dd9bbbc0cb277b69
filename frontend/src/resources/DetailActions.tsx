// What an operator can do to a resource: edit and apply its spec (server
// validation errors shown at the field), resync, quarantine or lift it, run
// an operator verb, delete it.
import { useState } from 'react';
import { useSession } from '../app/session';
import { fieldErrors, type ApiError } from '../client/errors';
import { useMutation, useSubscriptionValue } from '../client/hooks';
import {
  ApplyResourceDocument,
  DeleteResourceDocument,
  OperationUpdatedDocument,
  QuarantineResourceDocument,
  ResyncResourceDocument,
  RunOperationDocument,
  UnquarantineResourceDocument,
  type JSONValue,
} from '../gql/graphql';
import { JsonEditor, parseJSON } from '../json/JsonEditor';
import { Link } from '../app/router';
import { ConfirmDialog } from '../widgets/Dialog';
import { ErrorBox } from '../widgets/ErrorBox';
import { isComposite, prettyJSON, verbsOf, type Detail } from './mappers';

export function DetailActions({ detail: d, onChanged }: { detail: Detail; onChanged: () => void }) {
  const { canMutate } = useSession();
  const ref = { kind: d.kind, name: d.name };
  const [editing, setEditing] = useState(false);
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [runOpen, setRunOpen] = useState(false);
  const [resync, resyncState] = useMutation(ResyncResourceDocument);
  const [quarantine, quarantineState] = useMutation(QuarantineResourceDocument);
  const [unquarantine, unquarantineState] = useMutation(UnquarantineResourceDocument);
  const [del, delState] = useMutation(DeleteResourceDocument);
  const verbs = verbsOf(d);
  const err = resyncState.error ?? quarantineState.error ?? unquarantineState.error ?? delState.error;
  const noMutate = canMutate ? undefined : 'Your token is read-only (viewer)';
  const act = (p: Promise<unknown>) => p.then(onChanged, () => {});
  return (
    <div className="actions-wrap">
      <div className="actions" role="toolbar" aria-label="Resource actions">
        <button type="button" onClick={() => setEditing((e) => !e)} aria-expanded={editing} disabled={!canMutate} title={noMutate}>
          Edit spec
        </button>
        <button type="button" onClick={() => act(resync(ref))} disabled={!canMutate || resyncState.running} title={noMutate}>
          Resync
        </button>
        {d.quarantined ? (
          <button type="button" onClick={() => act(unquarantine(ref))} disabled={!canMutate || unquarantineState.running} title={noMutate}>
            Unquarantine
          </button>
        ) : (
          <button type="button" onClick={() => act(quarantine(ref))} disabled={!canMutate || quarantineState.running || !!d.deletionRequestedAt} title={noMutate}>
            Quarantine
          </button>
        )}
        {verbs.length ? (
          <button type="button" onClick={() => setRunOpen((o) => !o)} aria-expanded={runOpen} disabled={!canMutate} title={noMutate}>
            Run operation
          </button>
        ) : null}
        <button type="button" className="danger" onClick={() => setConfirmDelete(true)} disabled={!canMutate || !!d.deletionRequestedAt} title={noMutate}>
          Delete
        </button>
        {isComposite(d) ? (
          <Link className="button" to={`/graph?root=${encodeURIComponent(`${d.kind}/${d.name}`)}`}>
            Graph
          </Link>
        ) : null}
      </div>
      <ErrorBox error={err} />
      {editing ? (
        <SpecEditor
          detail={d}
          onDone={() => {
            setEditing(false);
            onChanged();
          }}
          onCancel={() => setEditing(false)}
        />
      ) : null}
      {runOpen ? <OperationRunner detail={d} verbs={verbs} onRan={onChanged} /> : null}
      {confirmDelete ? (
        <ConfirmDialog
          title={`Delete ${d.kind}/${d.name}?`}
          message={<p>This marks its whole teardown tree (everything it owns and everything that depends on it) for deletion, in dependency order. It cannot be undone.</p>}
          confirm="Delete"
          busy={delState.running}
          onCancel={() => setConfirmDelete(false)}
          onConfirm={() =>
            del(ref).then(
              () => {
                setConfirmDelete(false);
                onChanged();
              },
              () => setConfirmDelete(false),
            )
          }
        />
      ) : null}
    </div>
  );
}

/** errorsFor picks the field errors of one input field. */
function errorsFor(err: ApiError | null, field: string) {
  return fieldErrors(err).fields.filter((f) => f.field === field);
}

function SpecEditor({ detail: d, onDone, onCancel }: { detail: Detail; onDone: () => void; onCancel: () => void }) {
  const [spec, setSpec] = useState(prettyJSON(d.spec));
  const [labels, setLabels] = useState(prettyJSON(d.labels ?? {}));
  const [apply, state] = useMutation(ApplyResourceDocument);
  const general = fieldErrors(state.error).general;
  const other = fieldErrors(state.error).fields.filter((f) => f.field !== 'spec' && f.field !== 'labels');
  const submit = (e: React.FormEvent) => {
    e.preventDefault();
    const s = parseJSON(spec);
    const l = parseJSON(labels, true);
    if (!s.ok || !l.ok) return;
    apply({ input: { kind: d.kind, name: d.name, version: d.version, spec: s.value as JSONValue, labels: (l.value ?? {}) as JSONValue, providerConfigRef: d.providerConfigRef } }).then(onDone, () => {});
  };
  return (
    <form className="editor" onSubmit={submit} aria-label="Edit spec" data-testid="spec-editor">
      <JsonEditor label="Spec (JSON)" name="spec" value={spec} onChange={setSpec} errors={errorsFor(state.error, 'spec')} rows={14} />
      <JsonEditor label="Labels (JSON object)" name="labels" value={labels} onChange={setLabels} errors={errorsFor(state.error, 'labels')} rows={4} optional />
      {other.map((f, i) => (
        <p key={i} className="field-error" role="alert">
          {f.field}: {f.message}
        </p>
      ))}
      {general.length ? <ErrorBox error={general.join('; ')} /> : null}
      <div className="form-actions">
        <button type="submit" className="primary" disabled={state.running}>
          {state.running ? 'Applying…' : 'Apply'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function OperationRunner({ detail: d, verbs, onRan }: { detail: Detail; verbs: string[]; onRan: () => void }) {
  const [verb, setVerb] = useState(verbs[0] ?? '');
  const [input, setInput] = useState('');
  const [opId, setOpId] = useState<string | null>(null);
  const [run, state] = useMutation(RunOperationDocument);
  const op = useSubscriptionValue(OperationUpdatedDocument, { id: opId ?? '' }, { skip: !opId });
  const submit = (e: React.FormEvent) => {
    e.preventDefault();
    const parsed = parseJSON(input, true);
    if (!parsed.ok) return;
    run({ kind: d.kind, name: d.name, verb, input: parsed.value as JSONValue }).then((r) => {
      setOpId(r.runOperation.id);
      onRan();
    }, () => {});
  };
  const cur = op.data?.operationUpdated;
  const fe = fieldErrors(state.error, ['input']);
  return (
    <form className="editor" onSubmit={submit} aria-label="Run an operation">
      <div className="field">
        <label htmlFor="op-verb">Verb</label>
        <select id="op-verb" value={verb} onChange={(e) => setVerb(e.target.value)}>
          {verbs.map((v) => (
            <option key={v}>{v}</option>
          ))}
        </select>
      </div>
      <JsonEditor label="Input (JSON, optional)" value={input} onChange={setInput} rows={3} optional errors={fe.fields} />
      <ErrorBox error={fe.general.length ? fe.general.join('; ') : null} />
      <div className="form-actions">
        <button type="submit" className="primary" disabled={state.running || !verb}>
          Run
        </button>
      </div>
      {opId ? (
        <p role="status" data-testid="operation-state">
          Operation <code>{opId.slice(0, 8)}</code>: <span className={`tag op-${(cur?.state ?? 'PENDING').toLowerCase()}`}>{cur?.state ?? 'PENDING'}</span>
          {cur?.output != null ? (
            <>
              {' '}
              output <code>{JSON.stringify(cur.output)}</code>
            </>
          ) : null}
          {cur?.error ? <span className="error-text"> {cur.error}</span> : null}
        </p>
      ) : null}
    </form>
  );
}
