// Reactor bindings: which reactor kind runs on which watched kind's
// transition. Create, edit, enable/disable (live), delete.
// Live across clients (the reactorBindings subscription).
// URL: /bindings?watch=kind&reactor=kind&sel=name (or new=1)
import { useState } from 'react';
import { Link, navigate, useLocation, withQuery } from '../app/router';
import { useSession } from '../app/session';
import { fieldErrors } from '../client/errors';
import { useMutation, useQuery, useSubscriptionValue } from '../client/hooks';
import { ApplyReactorBindingDocument, BindingKindsDocument, DeleteReactorBindingDocument, ReactorBindingsDocument, ReactorBindingsLiveDocument, TransitionValues, type JSONValue, type ReactorBindingRowFragment, type Transition } from '../gql/graphql';
import { JsonEditor, parseJSON } from '../json/JsonEditor';
import { labelEntries, prettyJSON, formatTime } from '../resources/mappers';
import { ConfirmDialog } from '../widgets/Dialog';
import { ErrorBox } from '../widgets/ErrorBox';

function bindingsHref(p: { watch?: string; reactor?: string; sel?: string | null; isNew?: boolean }) {
  const q = new URLSearchParams();
  if (p.watch) q.set('watch', p.watch);
  if (p.reactor) q.set('reactor', p.reactor);
  if (p.isNew) q.set('new', '1');
  else if (p.sel) q.set('sel', p.sel);
  return withQuery('/bindings', q);
}

/** bindingInput turns a binding (or an edit of it) into the mutation's input. */
export function bindingInput(b: Pick<ReactorBindingRowFragment, 'name' | 'watchKind' | 'transition' | 'reactor' | 'labelMatch' | 'enabled'>) {
  return { name: b.name, watchKind: b.watchKind, transition: b.transition, reactor: b.reactor, labelMatch: b.labelMatch, enabled: b.enabled };
}

export function BindingsPage() {
  const { search } = useLocation();
  const watch = search.get('watch') ?? '';
  const reactor = search.get('reactor') ?? '';
  const sel = search.get('sel');
  const isNew = search.get('new') === '1';
  const vars = { watchKind: watch || null, reactor: reactor || null };
  const list = useQuery(ReactorBindingsDocument, vars);
  // Live: the server pushes the whole filtered list on every change, from
  // any client; the query is the first paint.
  const live = useSubscriptionValue(ReactorBindingsLiveDocument, vars);
  const kinds = useQuery(BindingKindsDocument, {});
  const { canMutate } = useSession();
  const [toggle, toggleState] = useMutation(ApplyReactorBindingDocument);
  const watchable = [...new Set((kinds.data?.kinds ?? []).filter((k) => !k.isReactor).map((k) => k.name))];
  const reactors = [...new Set((kinds.data?.kinds ?? []).filter((k) => k.isReactor).map((k) => k.name))];
  const items = live.data?.reactorBindings ?? list.data?.reactorBindings ?? [];
  const selected = items.find((b) => b.name === sel) ?? null;
  const here = { watch, reactor };
  return (
    <section className={`page bindings-page${sel || isNew ? ' with-detail' : ''}`}>
      <div className="list-pane">
        <h1>Reactor bindings</h1>
        <form className="filters" aria-label="Binding filters" onSubmit={(e) => e.preventDefault()}>
          <div className="field">
            <label htmlFor="b-watch">Watched kind</label>
            <select id="b-watch" value={watch} onChange={(e) => navigate(bindingsHref({ ...here, watch: e.target.value }))}>
              <option value="">Any</option>
              {watchable.map((k) => (
                <option key={k}>{k}</option>
              ))}
            </select>
          </div>
          <div className="field">
            <label htmlFor="b-reactor">Reactor</label>
            <select id="b-reactor" value={reactor} onChange={(e) => navigate(bindingsHref({ ...here, reactor: e.target.value }))}>
              <option value="">Any</option>
              {reactors.map((k) => (
                <option key={k}>{k}</option>
              ))}
            </select>
          </div>
          <div className="filter-actions">
            <button type="button" className="primary" onClick={() => navigate(bindingsHref({ ...here, isNew: true }))} disabled={!canMutate}>
              New binding
            </button>
          </div>
        </form>
        <ErrorBox error={list.error ?? toggleState.error} />
        {list.data && items.length === 0 ? <p className="empty">No reactor bindings{watch || reactor ? ' match' : ' yet'}.</p> : null}
        {items.length ? (
          <div className="table-wrap">
            <table className="grid" data-testid="bindings">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">When</th>
                  <th scope="col">Run</th>
                  <th scope="col">Labels</th>
                  <th scope="col">Enabled</th>
                </tr>
              </thead>
              <tbody>
                {items.map((b) => (
                  <tr key={b.name} aria-selected={b.name === sel}>
                    <th scope="row">
                      <Link to={bindingsHref({ ...here, sel: b.name })}>{b.name}</Link>
                    </th>
                    <td>
                      {b.watchKind} → {b.transition.toLowerCase()}
                    </td>
                    <td>{b.reactor}</td>
                    <td>{labelEntries(b.labelMatch).map(([k, v]) => `${k}=${v}`).join(', ') || <span className="muted">all</span>}</td>
                    <td>
                      <label className="switch">
                        <input
                          type="checkbox"
                          checked={b.enabled}
                          disabled={!canMutate || toggleState.running}
                          onChange={(e) => toggle({ input: { ...bindingInput(b), enabled: e.target.checked } }).then(list.refetch, () => {})}
                        />
                        <span className="sr-only">Enable {b.name}</span>
                        <span aria-hidden="true">{b.enabled ? 'on' : 'off'}</span>
                      </label>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
      </div>
      {isNew || selected ? (
        <aside className="detail" aria-label="Reactor binding" data-testid="binding-detail">
          <header className="detail-head">
            <h2>{isNew ? 'New reactor binding' : selected!.name}</h2>
            <button type="button" className="close" aria-label="Close" onClick={() => navigate(bindingsHref(here))}>
              ×
            </button>
          </header>
          <BindingForm
            key={selected?.name ?? 'new'}
            binding={isNew ? null : selected}
            watchable={watchable}
            reactors={reactors}
            onSaved={(name) => {
              list.refetch();
              navigate(bindingsHref({ ...here, sel: name }));
            }}
            onDeleted={() => {
              list.refetch();
              navigate(bindingsHref(here));
            }}
          />
        </aside>
      ) : sel && list.data ? (
        <aside className="detail">
          <p className="muted">No binding named {sel} here.</p>
        </aside>
      ) : null}
    </section>
  );
}

function BindingForm({ binding, watchable, reactors, onSaved, onDeleted }: { binding: ReactorBindingRowFragment | null; watchable: string[]; reactors: string[]; onSaved: (name: string) => void; onDeleted: () => void }) {
  const { canMutate } = useSession();
  const [name, setName] = useState(binding?.name ?? '');
  const [watchKind, setWatchKind] = useState(binding?.watchKind ?? '');
  const [transition, setTransition] = useState<Transition>(binding?.transition ?? 'SYNCED');
  const [reactor, setReactor] = useState(binding?.reactor ?? '');
  const [labels, setLabels] = useState(prettyJSON(binding?.labelMatch ?? {}));
  const [enabled, setEnabled] = useState(binding?.enabled ?? true);
  const [confirm, setConfirm] = useState(false);
  const [apply, state] = useMutation(ApplyReactorBindingDocument);
  const [del, delState] = useMutation(DeleteReactorBindingDocument);
  const fe = fieldErrors(state.error, ['name', 'watchKind', 'transition', 'reactor', 'labelMatch']);
  const at = (f: string) =>
    fe.fields
      .filter((x) => x.field === f)
      .map((x, i) => (
        <span key={i} className="field-error" role="alert">
          {x.message}
        </span>
      ));
  return (
    <form
      className="editor"
      aria-label="Reactor binding"
      onSubmit={(e) => {
        e.preventDefault();
        const l = parseJSON(labels, true);
        if (!l.ok) return;
        apply({ input: { name, watchKind, transition, reactor, labelMatch: (l.value ?? {}) as JSONValue, enabled } }).then((r) => onSaved(r.applyReactorBinding.name), () => {});
      }}
    >
      <div className="field">
        <label htmlFor="bf-name">Name</label>
        <input id="bf-name" value={name} onChange={(e) => setName(e.target.value)} readOnly={!!binding} />
        {at('name')}
      </div>
      <div className="field">
        <label htmlFor="bf-watch">When a resource of kind</label>
        <select id="bf-watch" value={watchKind} onChange={(e) => setWatchKind(e.target.value)}>
          <option value="">Choose a kind</option>
          {[...new Set([...watchable, watchKind].filter(Boolean))].map((k) => (
            <option key={k}>{k}</option>
          ))}
        </select>
        {at('watchKind')}
      </div>
      <div className="field">
        <label htmlFor="bf-transition">crosses</label>
        <select id="bf-transition" value={transition} onChange={(e) => setTransition(e.target.value as Transition)}>
          {TransitionValues.map((t) => (
            <option key={t} value={t}>
              {t.toLowerCase()}
            </option>
          ))}
        </select>
        {at('transition')}
      </div>
      <div className="field">
        <label htmlFor="bf-reactor">run the reactor</label>
        <select id="bf-reactor" value={reactor} onChange={(e) => setReactor(e.target.value)}>
          <option value="">Choose a reactor kind</option>
          {[...new Set([...reactors, reactor].filter(Boolean))].map((k) => (
            <option key={k}>{k}</option>
          ))}
        </select>
        {at('reactor')}
      </div>
      <JsonEditor label="Only when its labels contain (JSON object; {} = all)" value={labels} onChange={setLabels} rows={4} optional errors={fe.fields.filter((f) => f.field === 'labelMatch')} />
      <div className="field checkbox">
        <input id="bf-enabled" type="checkbox" checked={enabled} onChange={(e) => setEnabled(e.target.checked)} />
        <label htmlFor="bf-enabled">Enabled</label>
      </div>
      {fe.general.length ? <ErrorBox error={fe.general.join('; ')} /> : null}
      <ErrorBox error={delState.error} />
      <div className="form-actions">
        <button type="submit" className="primary" disabled={!canMutate || state.running || !name || !watchKind || !reactor}>
          {state.running ? 'Saving…' : binding ? 'Save' : 'Create'}
        </button>
        {binding ? (
          <button type="button" className="danger" onClick={() => setConfirm(true)} disabled={!canMutate}>
            Delete
          </button>
        ) : null}
      </div>
      {binding ? <p className="muted">Created {formatTime(binding.createdAt)} · updated {formatTime(binding.updatedAt)}</p> : null}
      {confirm && binding ? (
        <ConfirmDialog
          title={`Delete the binding ${binding.name}?`}
          message={<p>The reactor stops receiving {binding.watchKind} {binding.transition.toLowerCase()} transitions.</p>}
          confirm="Delete"
          busy={delState.running}
          onCancel={() => setConfirm(false)}
          onConfirm={() => del({ name: binding.name }).then(() => { setConfirm(false); onDeleted(); }, () => setConfirm(false))}
        />
      ) : null}
    </form>
  );
}
